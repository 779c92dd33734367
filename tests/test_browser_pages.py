"""Every page at its own address, in headless Chromium: each menu entry's URL opens directly (no
"Page not found" dialog, no exception, the address kept), the root forwards to the landing page
with its query string, and no request leaves the machine while any page loads (air-gapped
clusters; no visits leaked to outside servers)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.browser_util import app_server, browser  # noqa: F401  (fixtures)
from tests.test_browser_dashboard import WAIT_MS, wait_idle

pytestmark = pytest.mark.browser
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def _watch_outside(page, outside: list[str]) -> None:
    def on_request(request) -> None:
        host = urlsplit(request.url).hostname
        if request.url.startswith(("data:", "blob:")) or host in LOOPBACK or (host or "").startswith("127."):
            return
        outside.append(request.url)

    page.on("request", on_request)


def _open(browser, url: str, outside: list[str]):  # noqa: F811
    page = browser.new_context(viewport={"width": 1300, "height": 900}).new_page()
    _watch_outside(page, outside)
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=WAIT_MS)
    wait_idle(page)
    return page


def test_every_page_opens_at_its_own_address_and_nothing_leaves(app_server, browser):  # noqa: F811
    outside: list[str] = []
    root = _open(browser, app_server + "/?kvsim_probe=1", outside)
    # the root forwards to the landing page (the address changes once the page has run: wait for it)...
    root.wait_for_url(lambda url: urlsplit(url).path == "/plan", timeout=WAIT_MS)
    assert "kvsim_probe=1" in root.url  # ...keeping the query string (links carry state)
    links = root.locator('[data-testid="stSidebarNavLink"]')
    paths = sorted({urlsplit(links.nth(i).get_attribute("href")).path for i in range(links.count())})
    assert "/plan" in paths and "/simulate" in paths and len(paths) >= 6, paths
    root.context.close()

    for path in paths:
        page = _open(browser, app_server + path, outside)
        assert urlsplit(page.url).path == path, (path, page.url)
        assert page.locator('[role="dialog"]').count() == 0, f"{path}: a dialog opened"
        assert page.get_by_text("Page not found").count() == 0, path
        assert page.locator('[data-testid="stException"]').count() == 0, path
        page.context.close()
    assert outside == [], f"requests left the machine: {sorted(set(outside))[:5]}"

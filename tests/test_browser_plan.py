"""End to end in headless Chromium: the dashboard's root URL opens on the Plan page with the
default sweep answered (answer line, Pareto chart, table with what binds, the drill-down run);
saving the drill-down gives a link that a fresh browser context opens with the same answer."""

from __future__ import annotations

import pytest

from tests.browser_util import app_server, browser  # noqa: F401  (fixtures)
from tests.test_browser_dashboard import WAIT_MS, metrics, shot, wait_idle

pytestmark = pytest.mark.browser


def test_root_opens_on_plan_answered_and_shares(app_server, browser):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page.goto(app_server, wait_until="domcontentloaded")
    page.wait_for_selector("text=Best (", timeout=WAIT_MS)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    answer = page.locator('[data-testid="stAlert"]', has_text="Best (").first.inner_text()
    assert "What binds:" in answer and "requests/s" in answer
    numbers = metrics(page)
    page.wait_for_selector(".js-plotly-plot", timeout=WAIT_MS)
    assert "tokens/s per user" in page.locator(".js-plotly-plot").first.inner_text()
    assert any(label.startswith("completed (of") for label in numbers)
    shot(page, "plan")

    page.get_by_label("Snapshot name").fill("plan in the browser")
    page.get_by_role("button", name="Save snapshot and get a link").click()
    page.wait_for_selector("text=Anyone with this read-only link can open it", timeout=WAIT_MS)
    link = page.locator('[data-testid="stCode"]').filter(has_text="?snapshot=").last.inner_text().strip()
    assert "?snapshot=" in link

    other = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    other.goto(link, wait_until="domcontentloaded")
    other.wait_for_selector("text=plan in the browser", timeout=WAIT_MS)
    wait_idle(other)
    other.get_by_role("button", name="Download HTML report").wait_for(timeout=WAIT_MS)  # the last of the run's view
    assert other.locator('[data-testid="stAlert"]', has_text="Best (").first.inner_text() == answer
    assert metrics(other) == numbers
    other.context.close()
    ctx.close()

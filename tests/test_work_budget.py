"""Issue 29: a link can set every input of a page, so before a page starts a run it estimates the
work (requests x steps) and, over the page budget, asks for a click instead of starting it."""

from __future__ import annotations

import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from sim.guard.limits import PAGE_WORK_BUDGET, SECONDS_PER_MILLION_STEPS
from sim.guard.work import work_estimate
from sim.scenario import Scenario
from sim.trace import Trace

ROOT = Path(__file__).resolve().parent.parent
SIMULATE = str(ROOT / "app_pages" / "simulate.py")


def test_work_is_requests_times_their_steps():
    trace = Trace.build([0, 1, 2], [5, 3000, 4096], [3, 4, 1], format="generic", source="t")
    # decode steps 3 + 4 + 1, prefill chunks of 2048: 1 + 2 + 2
    assert work_estimate(trace, Scenario(max_batched_tokens=2048)) == 13
    assert work_estimate(trace, Scenario(max_batched_tokens=16_384)) == 11


def test_budget_is_about_half_a_minute_of_a_core():
    assert 15 <= PAGE_WORK_BUDGET / 1e6 * SECONDS_PER_MILLION_STEPS <= 60


def test_a_crafted_link_for_millions_of_requests_waits_for_a_click():
    at = AppTest.from_file(SIMULATE, default_timeout=120)
    at.query_params.update({"trace_src": "synthetic", "trace_synth": "n=2000000,rate=50"})
    start = time.monotonic()
    at.run()
    assert time.monotonic() - start < 90  # the 2M-request trace is generated (~1 s), never simulated
    assert not at.exception and not at.metric
    (warning,) = [w.value for w in at.warning if "request-steps" in w.value]
    assert warning.startswith("This run is large: about 258,") and "over the 25,000,000 a page starts by itself" in warning
    assert [b.label for b in at.button] == ["Start it anyway"]


def test_confirmed_once_then_it_runs(monkeypatch):
    monkeypatch.setattr("ui.work_budget.PAGE_WORK_BUDGET", 1_000)  # so a small run is "large"
    at = AppTest.from_file(SIMULATE, default_timeout=120)
    at.query_params.update({"trace_src": "synthetic", "trace_synth": "n=40,rate=5,seed=3"})
    at.run()
    assert not at.metric and any("request-steps" in w.value for w in at.warning)
    at.button[0].click().run()
    assert not at.exception and at.metric  # started after the click
    at.run()  # the same run again in this session: no second question
    assert at.metric and not any("request-steps" in w.value for w in at.warning)


def test_link_choices_outside_the_form_are_named():
    """A select value a link sets must be one of the form's options: named, not dropped silently."""
    at = AppTest.from_file(str(ROOT / "app_pages" / "capacity.py"), default_timeout=120)
    at.query_params.update({"cap_tp": "3", "cap_gpus": ["h100-sxm", "b900"], "cap_w": "fp3"})
    at.run()
    assert not at.exception
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("The link's cap_gpus='b900' is not one of the choices") for w in warnings)
    assert any(w.startswith("The link's cap_tp='3' is not one of the choices (1, 2, 4, 8)") for w in warnings)
    assert any("cap_w='fp3'" in w for w in warnings)
    assert at.selectbox(key="cap_tp").value == 1
    assert at.multiselect(key="cap_gpus").value == ["h100-sxm"]  # the valid part of the link is kept


def test_plan_link_numbers_and_choices_are_checked():
    at = AppTest.from_file(str(ROOT / "app_pages" / "plan.py"), default_timeout=300)
    at.query_params.update({"plan_ttft": "1e99", "plan_alloc": "magic"})
    at.run()
    assert not at.exception
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("The link's plan_ttft=1e99 is out of range (0 to 3,600)") for w in warnings)
    assert any(w.startswith("The link's plan_alloc='magic' is not one of the choices") for w in warnings)

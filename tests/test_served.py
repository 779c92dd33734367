"""What a run did not serve and whether it kept up: the verdict, the sentences, the load dial."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from sim.report.html_report import headline_metrics, html_report
from sim.report.served import compared_verdicts, latency_basis, load_verdict, not_served, rejection_fix, share
from sim.run.engine import simulate
from sim.run.verdict import MIN_QUEUE_GROWTH, OVERLOAD_MARGIN, load, overloaded
from sim.scenario import ENGINE_DEFAULTS, FLEET_DEFAULTS, TIER_DEFAULTS, Scenario, ScenarioError
from sim.trace import Trace, load_trace, speedup
from tests.test_app_simulate import ROOT
from ui.defaults import DEFAULT_SAMPLE, DEFAULT_SCENARIO

CHAT = ROOT / "samples" / "chat_small.csv"


# ----- the verdict on hand-made arrays -------------------------------------------------------

def test_keeping_up_is_not_overloaded():
    arrival = np.arange(200, dtype=float)
    assert not overloaded(arrival, arrival + 0.5)


def test_started_at_half_the_arrival_rate_is_overloaded():
    arrival = np.arange(200, dtype=float)
    result = load(arrival, arrival * 2)  # the engine takes requests in at half the rate they come
    assert result.overloaded and result.arrival_rate_rps == pytest.approx(2 * result.started_rate_rps, rel=0.05)
    assert result.waiting_at_end == 100  # started by t=199: arrivals 0 to 99


@pytest.mark.parametrize("ratio, expected", [(0.85, False), (0.75, True)])
def test_margin_is_the_share_of_arrivals_left_waiting(ratio, expected):
    """Started at `ratio` of the arrival rate over the window: "growing" beyond the 20% margin only
    (the median wait, 88 s and more, makes both runs overloaded by the queue rule)."""
    assert OVERLOAD_MARGIN == 0.20
    arrival = np.linspace(0, 1000, 2001)
    result = load(arrival, arrival / ratio)
    assert ("growing" in result.reasons) is expected and "queue" in result.reasons


def test_short_excess_and_offline_are_not_overloaded():
    arrival = np.arange(18, dtype=float)  # 9 in the window (8.5, 17]: growth below MIN_QUEUE_GROWTH
    assert MIN_QUEUE_GROWTH == 10 and load(arrival, arrival + 0.9).reasons == ()
    assert "growing" not in load(arrival, np.full(18, np.nan)).reasons
    offline = load(np.zeros(50), np.arange(50, dtype=float))
    assert not offline.overloaded and offline.arrival_rate_rps is None


def test_rejected_requests_are_not_queued():
    arrival = np.arange(200, dtype=float)
    admitted = arrival.copy()
    admitted[::3] = np.nan  # never started ...
    assert overloaded(arrival, admitted)
    assert not overloaded(arrival, admitted, rejected=np.isnan(admitted))  # ... because rejected


# ----- on real runs ---------------------------------------------------------------------------

def test_bundled_default_keeps_up_and_a_growing_queue_is_overloaded():
    trace = load_trace(ROOT / "samples" / DEFAULT_SAMPLE)  # the dashboard's default (ui/defaults.py)
    default = simulate(trace, DEFAULT_SCENARIO)
    assert default.summary["overloaded"] is False and load_verdict(default.summary) is None
    fast = simulate(trace, DEFAULT_SCENARIO.replace(speedup=20.0))
    assert fast.summary["overloaded"] is True
    steps = fast.steps
    last_arrival = fast.summary["load"]["window_end_s"]
    queue = steps.loc[steps["t_s"] <= last_arrival, "num_waiting"].to_numpy()
    assert queue[-1] > queue[len(queue) // 2]  # the queue is still growing as arrivals stop
    assert "Overloaded" in load_verdict(fast.summary)


def test_speedup_scales_arrivals_exactly():
    trace = load_trace(CHAT)
    fast = simulate(trace, Scenario(speedup=4.0))
    assert np.array_equal(fast.requests["arrival_s"].to_numpy(), trace.df["arrival_s"].to_numpy() / 4.0)
    same = simulate(speedup(trace, 4.0), Scenario())  # the trace transform: identical results
    for col in ("arrival_s", "admitted_s", "finish_s"):
        np.testing.assert_array_equal(fast.requests[col], same.requests[col])
    assert Scenario(speedup=2).digest() == Scenario(speedup=2.0).digest() != Scenario().digest()
    old = Scenario().to_dict()  # the digest formula from before the dial, over the fields it had
    for name in ("speedup", *TIER_DEFAULTS, *FLEET_DEFAULTS, *ENGINE_DEFAULTS):  # fields added after the formula
        del old[name]
    assert Scenario().digest() == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:16]
    for bad in (0.0, -1.0, float("nan"), 5000.0):
        with pytest.raises(ScenarioError, match="speedup"):
            Scenario(speedup=bad)


def long_prompt_trace() -> Trace:
    prompts = np.array([100, 200, 5000, 150, 9000, 120, 300, 20000, 90, 110])
    return Trace.build(np.arange(10, dtype=float), prompts, np.full(10, 50), format="generic", source="long.csv")


def test_rejections_by_reason_and_their_fix():
    result = simulate(long_prompt_trace(), Scenario(max_model_len=4096))
    s = result.summary
    assert s["rejected"] == 3 and s["rejected_reasons"] == {"over_max_model_len": 3, "over_kv_pool": 0}
    assert s["longest_prompt_tokens"] == 20000 and s["model_context_tokens"] == 8192
    assert "3 rejected (30.0%): 3 because the prompt is at least max_model_len (4,096 tokens)" in not_served(s)
    assert "over the 7 completed requests only" in latency_basis(s)
    fix = rejection_fix(s)
    assert fix is not None and fix.changes == {} and "longer context" in fix.text  # 20,000 > llama-3-8b's 8,192
    rows = dict(headline_metrics(s))
    assert rows["rejected"] == "3 (30.0%)" and rows["unfinished"] == "0"
    text = html_report(result)
    assert "3 rejected (30.0%)" in text and "longer context" in text

    qwen = simulate(long_prompt_trace(), Scenario(model="qwen2.5-7b", max_model_len=4096)).summary
    fix = rejection_fix(qwen)
    assert fix is not None and fix.changes == {"max_model_len": 32768} and "Raise max_model_len to 32,768" in fix.text


def test_kv_pool_rejections_say_so():
    s = simulate(long_prompt_trace(), Scenario(max_model_len=32768, model="qwen2.5-7b", kv_budget_gib=0.5)).summary
    assert s["rejected_reasons"]["over_kv_pool"] >= 1
    assert "cannot fit the empty KV pool" in not_served(s)
    assert "KV pool more memory" in rejection_fix(s).text


def test_no_fix_below_one_percent():
    summary = {"requests": 1000, "completed": 995, "rejected": 5, "unfinished": 0,
               "rejected_reasons": {"over_max_model_len": 5, "over_kv_pool": 0}, "longest_prompt_tokens": 9000,
               "model_context_tokens": 32768}
    assert rejection_fix(summary) is None and "5 rejected (0.5%)" in not_served(summary)


def test_one_rejected_of_a_long_trace_is_not_zero_percent():
    """Seen on the loaded screenshot: 1 of 19,366 rejected read "1 (0.0%)"."""
    summary = {"requests": 19366, "completed": 19365, "rejected": 1, "unfinished": 0,
               "rejected_reasons": {"over_max_model_len": 1, "over_kv_pool": 0}}
    assert "1 rejected (<0.1%)" in not_served(summary)
    assert dict(headline_metrics(summary))["rejected"] == "1 (<0.1%)"
    assert share(416, 19366) == "2.1%" and share(0, 10) == "0.0%" and share(5, 10000) == "0.1%"


def test_a_comparison_says_overload_and_unserved_once():
    """The loaded Compare screenshot: four runs gave eight warning boxes above the comparison."""
    base = {"requests": 100, "completed": 90, "rejected": 10, "unfinished": 0,
            "rejected_reasons": {"over_max_model_len": 10, "over_kv_pool": 0}}
    slow = dict(base, overloaded=True, binding="kv", load={"arrival_rate_rps": 16.16, "started_rate_rps": 1.48})
    fast = dict(base, overloaded=True, binding="compute", load={"arrival_rate_rps": 16.16, "started_rate_rps": 2.61})
    over, unserved = compared_verdicts({"max": slow, "pow2": fast})
    assert over.startswith("Overloaded: no run keeps up with the trace") and "16.16 requests/s arrived" in over
    assert "max (1.48 requests/s started; KV cache memory binds)" in over
    assert "pow2 (2.61 requests/s started; GPU compute binds)" in over
    assert unserved == "Every run: 90 of 100 requests completed; 10 rejected (10.0%): 10 because the prompt is at least max_model_len."
    calm = dict(base, rejected=0, completed=100, rejected_reasons={})
    words = compared_verdicts({"max": slow, "paged": calm})
    assert len(words) == 2 and words[0].startswith("Overloaded: 1 of 2 runs") and "paged" not in words[0]
    assert words[1].startswith("Not served: max: 90 of 100") and "paged" not in words[1]
    assert compared_verdicts({"a": calm, "b": calm}) == []

"""Overload verdicts from what users feel (issue 24): traces whose rate rises, falls and stays flat,
and the done-when runs on the Azure conversation trace. The second-half trend alone once called a
queue hours long healthy because this trace's rate falls in its second half."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.__main__ import main
from sim.report.served import load_verdict
from sim.run.engine import simulate
from sim.run.verdict import QUEUE_SERVICE_RATIO
from sim.scenario import Scenario
from sim.trace.model import Trace

# Four seats on an H100: each request (200 prompt, 100 output tokens) is served in well under a
# second, so the deployment starts a few requests per second at most.
SEATS = Scenario(model="llama-3-8b", gpu="h100-sxm", max_num_seqs=4, cost_source="roofline")


def phases(*parts: tuple[float, float]) -> Trace:
    """Arrivals at a constant rate per phase: (requests/s, seconds) after one another."""
    times, t0 = [], 0.0
    for rate, seconds in parts:
        n = int(rate * seconds)
        times.extend(t0 + np.arange(n) / rate)
        t0 += seconds
    n = len(times)
    return Trace.build(np.array(times), np.full(n, 200), np.full(n, 100), format="test", source="phases")


def run(trace: Trace) -> dict:
    return simulate(trace, SEATS).summary


def capacity() -> float:
    """Requests/s the four seats start when always busy (a saturated offline replay)."""
    s = run(Trace.build(np.zeros(200), np.full(200, 200), np.full(200, 100), format="test", source="offline"))
    return s["completed"] / s["duration_s"]


def test_flat_rate_below_capacity_keeps_up():
    s = run(phases((0.5 * capacity(), 120)))
    assert s["overloaded"] is False and s["load"]["reasons"] == [] and load_verdict(s) is None


def test_flat_rate_above_capacity_is_overloaded():
    s = run(phases((2 * capacity(), 60)))
    assert s["overloaded"] is True and {"queue", "growing"} <= set(s["load"]["reasons"])


def test_rising_rate_is_overloaded_by_its_growing_queue():
    cap = capacity()
    s = run(phases((0.3 * cap, 120), (3 * cap, 40)))
    assert s["overloaded"] is True and "growing" in s["load"]["reasons"]


def test_falling_rate_with_a_long_queue_is_overloaded():
    """The Azure case: a burst far above capacity, then a trickle. The queue shrinks in the second
    half (the old trend rule said fine) while most requests waited many times their service time."""
    cap = capacity()
    s = run(phases((4 * cap, 40), (0.2 * cap, 160)))
    load = s["load"]
    assert "growing" not in load["reasons"]  # what the old rule looked at
    assert s["overloaded"] is True and "queue" in load["reasons"]
    assert load["queue_p50_s"] > QUEUE_SERVICE_RATIO * load["service_mean_s"]
    assert "the median request waited" in load_verdict(s)


def test_falling_rate_within_capacity_keeps_up():
    cap = capacity()
    s = run(phases((0.8 * cap, 60), (0.2 * cap, 60)))
    assert s["overloaded"] is False


@pytest.mark.parametrize("flags, expected", [
    (["--model", "llama-3.1-70b", "--tp", "4", "--allocator", "contiguous", "--speedup", "0.7711"], True),
    (["--model", "llama-3.1-70b", "--tp", "4", "--kv-heads", "64", "--speedup", "0.7711"], True),  # MHA
    (["--model", "llama-3-8b", "--gpu", "rtx-4090", "--allocator", "contiguous"], True),
    (["--model", "llama-3-8b", "--gpu", "rtx-4090", "--kv-heads", "32", "--allocator", "paged"], True),  # MHA
    (["--model", "llama-3.1-70b", "--tp", "4", "--speedup", "0.7711"], False),  # the planned deployment
    (["--model", "llama-3-8b"], False),  # sim run's defaults: TTFT p50 0.03 s
])
def test_azure_conversation_trace_verdicts(shared_traces, capsys, flags, expected):
    path = shared_traces / "AzureLLMInferenceTrace_conv.csv"
    assert main(["run", "--trace", str(path), *flags, "--json", "--no-progress"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["overloaded"] is expected, (s["ttft_s"]["p50"], s["load"])
    if expected:
        assert s["ttft_s"]["p50"] > 60  # users wait minutes: contiguous 70B 1,228 s, MHA 70B 93 s


def test_bundled_default_keeps_up(samples_dir, capsys):
    assert main(["run", "--trace", str(samples_dir / "azure_conv_slice.csv"), "--model", "llama-3-8b",
                 "--gpu", "rtx-4090", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["overloaded"] is False


def test_compare_keeps_up_follows_the_same_rule():
    """Compare once said "keeps up: yes" at a TTFT p99 of 208 s: its column reads the same verdict."""
    from sim.report.compare_words import comparison_rows
    from sim.report.served import compared_verdicts

    cap = capacity()
    falling, calm = run(phases((4 * cap, 40), (0.2 * cap, 160))), run(phases((0.5 * cap, 120)))
    rows = {r["scenario"]: r["keeps up"] for r in comparison_rows({"falling": falling, "calm": calm})}
    assert rows == {"falling": "no (overloaded)", "calm": "yes"}
    words = compared_verdicts({"falling": falling, "calm": calm})[0]
    assert words.startswith("Overloaded: 1 of 2 runs") and "the median request waited" in words

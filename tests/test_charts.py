"""sim.report.charts and sim.report.compare_words on small hand-built frames (the metrics schema, docs/METRICS.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest

from sim.report import charts
from sim.report.compare_words import comparison_rows, describe_differences, token_state_share
from sim.scenario import Scenario

GIB = 1 << 30


@dataclass
class FakeResult:
    """Same attribute names as sim.run.metrics.SimResult; frames built by hand so values are known."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    scenario: Scenario = field(default_factory=Scenario)
    trace_digest: str = "0123456789abcdef"


def make_result(n_steps: int = 10, n_req: int = 8, token_gib: float = 2.0) -> FakeResult:
    t = np.arange(n_steps, dtype=float)
    cap = 10 * GIB
    tok = np.full(n_steps, token_gib * GIB)
    steps = pd.DataFrame({
        "t_s": t, "duration_s": 1.0, "num_steps": 5, "batch_size": 4.0, "prefill_tokens": 100,
        "decode_tokens": 20, "num_running": 4, "num_waiting": np.arange(n_steps), "token_states_bytes": tok,
        "reserved_bytes": 1.0 * GIB, "internal_frag_bytes": 0.5 * GIB, "external_frag_bytes": 0.5 * GIB,
        "free_bytes": cap - tok - 2.0 * GIB, "capacity_bytes": cap, "blocks_in_use": 100,
        "kv_cache_usage_perc": (tok + 2.0 * GIB) / cap, "num_preemptions": [0, 1] * (n_steps // 2),
    })
    arrival = np.arange(n_req) * 0.5
    ttft = np.linspace(0.1, 0.8, n_req)
    ttft[-1] = np.nan  # an unfinished request
    requests = pd.DataFrame({
        "req_id": np.arange(n_req), "arrival_s": arrival, "admitted_s": arrival, "first_token_s": arrival + ttft,
        "finish_s": arrival + 2, "input_tokens": 100, "output_tokens": 20, "queue_s": 0.0, "ttft_s": ttft,
        "tpot_s": 0.02, "e2e_s": 2.0, "num_preemptions": 0, "prefix_cache_hit_tokens": 0,
    })
    summary = {
        "requests": n_req, "completed": n_req - 1, "duration_s": float(n_steps), "throughput_tok_s": 1234.5,
        "ttft_s": {"mean": 0.4, "p50": 0.4, "p90": 0.7, "p99": 0.8}, "tpot_s": {"p50": 0.02, "p99": 0.02},
        "e2e_s": {"p99": 2.0}, "mean_batch_size": 4.0, "num_preemptions": int(steps["num_preemptions"].sum()),
        "kv_cache_usage_perc": {"mean": 0.4, "peak": 0.4},
        "kv_breakdown_mean": {"token_states": token_gib * GIB, "reserved": GIB, "internal_frag": GIB / 2,
                              "external_frag": GIB / 2, "free": (8 - token_gib) * GIB},
        "weights_bytes": 15 * GIB,
    }
    return FakeResult(requests, steps, summary)


def test_memory_timeline_stacks_five_parts_and_weights_in_gib():
    r = make_result()
    fig = charts.memory_timeline(r.steps, weights_bytes=15 * GIB)
    names = [t.name for t in fig.data]
    assert names[:5] == [label for _, label, _ in charts.BREAKDOWN] and names[5] == "weights"
    assert all(t.stackgroup == "mem" for t in fig.data)
    # bands have no outline, so an all-zero band (paged external fragmentation) paints nothing
    assert all(t.line.width == 0 for t in fig.data)
    # the stack at any time is capacity + weights
    top = sum(np.asarray(t.y)[3] for t in fig.data)
    assert top == pytest.approx(10 + 15)
    assert len(charts.memory_timeline(r.steps).data) == 5  # no weights band when unknown


def test_latency_cdfs_drop_unfinished_and_end_at_one():
    r = make_result()
    fig = charts.latency_cdfs(r.requests)
    ttft = fig.data[0]
    assert len(ttft.x) == 7  # the NaN (unfinished) request is left out
    assert list(ttft.x) == sorted(ttft.x) and ttft.y[-1] == pytest.approx(1.0)


def test_queue_preemption_usage_and_trace_charts():
    r = make_result()
    q = charts.queue_and_batch(r.steps)
    assert [t.name for t in q.data][0].startswith("waiting") and list(q.data[0].y) == list(range(10))
    p = charts.preemptions(r.steps)
    assert p.data[1].y[-1] == 5  # running total of 0,1,0,1,...
    assert max(charts.kv_usage(r.steps).data[0].y) == pytest.approx(40.0)
    df = pd.DataFrame({"arrival_s": np.linspace(0, 99, 200), "input_tokens": 10, "output_tokens": 5})
    rate = charts.arrival_rate(df, buckets=10)
    assert sum(np.asarray(rate.data[0].y) * rate.data[0].width) == pytest.approx(200)  # rate x width = count
    assert len(charts.length_histograms(df).data) == 2


def test_overlays_and_breakdown_bars():
    a, b = make_result(token_gib=2.0), make_result(token_gib=6.0)
    fig = charts.overlay_timeline({"A": a.steps, "B": b.steps}, "kv_cache_usage_perc", "usage", "%", 100)
    assert [t.name for t in fig.data] == ["A", "B"]
    assert fig.data[1].y[0] == pytest.approx(80.0)
    bars = charts.breakdown_bars({"A": a.summary, "B": b.summary})
    assert bars.data[0].y[0] == pytest.approx(20.0) and bars.data[0].y[1] == pytest.approx(60.0)
    assert len(charts.overlay_cdf({"A": a.requests}, "ttft_s").data) == 1


def test_capacity_charts():
    curves = pd.DataFrame({"label": ["x", "x", "y"], "context_tokens": [2048, 8192, 2048], "max_concurrency": [500, 125, 10]})
    fig = charts.concurrency_curves(curves)
    assert [t.name for t in fig.data] == ["x", "y"]
    pie = charts.budget_pie({"weights": 14 * GIB, "KV cache": 55 * GIB, "unused": 0})
    assert list(pie.data[0].labels) == ["weights", "KV cache"] and list(pie.data[0].values) == [14, 55]


def test_compare_words_ratios_come_from_summaries():
    a, b = make_result(token_gib=2.0).summary, make_result(token_gib=6.0).summary
    b = dict(b, mean_batch_size=9.2, throughput_tok_s=2469.0)
    words = describe_differences({"contiguous": a, "paged": b})
    assert words[0] == ("paged runs 2.3x more requests at once than contiguous on average, at about the same "
                        "p99 TTFT (800 ms vs 800 ms).")
    assert "2.0x more output tokens per second than" in words[1]
    assert "paged uses 60% of its KV pool for token states, contiguous 20%." in words
    assert token_state_share(a) == pytest.approx(0.2)
    assert describe_differences({"a": a, "b": dict(b, completed=3)})[0] == "b completes 3 of 8 requests, a 7."
    slow = dict(b, ttft_s={"p99": 2.4}, mean_batch_size=2.0)
    assert "2.0x fewer requests at once" in describe_differences({"a": a, "b": slow})[0]
    assert "(3.0x higher)" in describe_differences({"a": a, "b": slow})[0]
    assert describe_differences({"only": a}) == []
    # when memory does not bind, the peak share of the pool is the difference that shows
    lean = dict(a, kv_cache_usage_perc={"mean": 0.1, "peak": 0.25})
    fat = dict(a, kv_cache_usage_perc={"mean": 0.5, "peak": 0.97})
    assert describe_differences({"contiguous max": fat, "paged": lean}) == [
        "paged runs about as many requests at once as contiguous max on average, at about the same p99 TTFT "
        "(800 ms vs 800 ms).",
        "paged peaks at 25% of its KV pool in use, contiguous max at 97%."]
    rows = comparison_rows({"contiguous max": fat, "paged": lean})
    assert [r["peak KV usage %"] for r in rows] == [97.0, 25.0] and rows[1]["scenario"] == "paged"
    assert rows[0]["token states %"] == pytest.approx(100 * token_state_share(fat), abs=0.05)
    assert not any("peaks at" in w for w in describe_differences({"a": fat, "b": dict(fat)}))


def test_compare_words_read_right_both_ways_and_put_unserved_first():
    """The issue's case: p99 TTFT 6.76 s vs 3,376.73 s was said as "(0.0x)"; equal completed counts
    beside "holds 2.3x more concurrent requests" read as more capacity."""
    a = make_result().summary
    fast = dict(a, ttft_s={"p99": 6.76}, mean_batch_size=4.0)
    slow = dict(a, ttft_s={"p99": 3376.73}, mean_batch_size=9.2, overloaded=True, rejected=40)
    words = describe_differences({"fast": fast, "slow": slow})
    assert words[0] == "slow rejects 40 requests, fast 0 (latency counts completed requests only)."
    assert words[1].startswith("slow cannot keep up with the arrivals") and words[1].endswith("fast keeps up.")
    assert "(500x higher)" in words[2] and "0.0x" not in " ".join(words)
    assert "each stays longer, not more capacity" in words[2]  # same throughput: Little's law, not capacity
    back = describe_differences({"slow": slow, "fast": fast})
    assert "(500x lower)" in " ".join(back) and "0.0x" not in " ".join(back)
    rows = comparison_rows({"fast": fast, "slow": slow})
    assert [r["keeps up"] for r in rows] == ["yes", "no (overloaded)"] and rows[1]["rejected"] == 40


# Issue 17's chart complaints, one test each (bench/why_audit.py runs each on the code before its fix).
def test_a_long_queue_does_not_squash_running_and_running_is_not_hidden():
    r = make_result()
    steps = r.steps.assign(num_waiting=np.linspace(0, 1000, 10))  # a 1,000-request queue ...
    q = charts.queue_and_batch(steps)
    by_name = {t.name: t for t in q.data}
    assert by_name["waiting (queue)"].yaxis != by_name["running"].yaxis  # ... on its own axis: running stays legible
    assert by_name["running"].line.dash == "solid" and by_name["batch size (latest step)"].line.dash == "dot"


def test_tpot_chart_in_ms_like_the_headline():
    cdf = charts.latency_cdfs(make_result().requests)
    assert cdf.layout.xaxis2.title.text == "ms" and max(cdf.data[1].x) == pytest.approx(20.0)  # TPOT 0.02 s


def test_ttft_overlay_goes_log_when_values_span_decades():
    r = make_result()
    fast, slow = r.requests, r.requests.assign(ttft_s=r.requests["ttft_s"] * 5000)
    over = charts.overlay_cdf({"fast": fast, "slow": slow}, "ttft_s")
    assert over.layout.xaxis.type == "log"  # 0.1 s .. 4,000 s: a linear axis would hide "fast"
    assert charts.overlay_cdf({"a": fast, "b": fast}, "ttft_s").layout.xaxis.type != "log"


def test_overlaid_identical_lines_stay_told_apart():
    r = make_result()
    lines = charts.overlay_timeline({"A": r.steps, "B": r.steps}, "num_running", "running", "requests")
    assert lines.data[0].line.dash != lines.data[1].line.dash


def _capacity_figure():
    curves = pd.DataFrame({"label": ["x", "x"], "context_tokens": [512, 131072], "max_concurrency": [2000, 7]})
    return charts.concurrency_curves(curves, context_tokens=8192)


def test_capacity_ticks_read_1_10_100_1k_and_the_users_context_is_marked():
    cap = _capacity_figure()
    assert cap.layout.xaxis.dtick == 1 and cap.layout.xaxis.tickformat == "~s"  # 1, 10, 100, 1k
    assert cap.layout.shapes[0].x0 == 8192 and "8,192" in cap.layout.annotations[0].text


def test_the_users_context_label_sits_on_its_line():
    """On a log axis an annotation sits at log10(x): add_vline's label for x=8192 was drawn at 10^8192, off
    the chart (the loaded capacity screenshot had the dashed line and no label)."""
    cap = _capacity_figure()
    assert cap.layout.annotations[0].x == pytest.approx(math.log10(8192)) and cap.layout.annotations[0].yref == "paper"


def test_overload_is_said_once_for_all_runs():
    """The default Compare screenshot: "contiguous max cannot keep up ...; X keeps up." three times."""
    a = make_result().summary
    runs = {"max": dict(a, overloaded=True), "pow2": a, "oracle": a, "paged": a}
    words = describe_differences(runs)
    said = [w for w in words if "keep up" in w]
    assert said == ["max cannot keep up with the arrivals (its queue is still growing when they stop); "
                    "pow2, oracle and paged keep up."]
    two = describe_differences({"max": dict(a, overloaded=True), "pow2": dict(a, overloaded=True), "paged": a})
    assert ("max and pow2 cannot keep up with the arrivals (their queues are still growing when they stop); "
            "paged keeps up.") in two

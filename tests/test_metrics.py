"""StepRecorder: grid sampling is a time-weighted mean; merging keeps totals; frame schema."""

from __future__ import annotations

import numpy as np

from sim.core.request import RequestTable
from sim.run.metrics import COUNTERS, GAUGES, STEP_COLUMNS, StepRecorder, requests_frame, summarize


def gauges(value: float) -> np.ndarray:
    return np.full(len(GAUGES), value)


def test_grid_samples_give_time_weighted_mean():
    rec = StepRecorder(horizon_s=100.0, max_rows=100, samples_per_bucket=2)
    # state 1.0 held over [0, 30), state 4.0 over [30, 40): time-weighted mean 1.75
    rec.sample_until(30.0, gauges(1.0), inclusive=False)
    rec.sample_until(40.0, gauges(4.0), inclusive=False)
    means = rec.gauge_means()
    assert abs(means["num_running"] - 1.75) < 0.05


def test_merge_keeps_counter_totals_and_bounds_rows():
    rec = StepRecorder(horizon_s=10.0, max_rows=40, samples_per_bucket=2)
    total = 0
    for i in range(1, 5001):
        t = i * 0.1  # run goes 50x past the horizon
        rec.add_counts(t, 1, 3, 5, i % 7 == 0)
        total += 1
        rec.sample_until(t, gauges(2.0))
    df = rec.frame()
    assert tuple(df.columns) == STEP_COLUMNS
    assert len(df) <= 40
    assert df["num_steps"].sum() == total
    assert df["prefill_tokens"].sum() == 3 * total and df["decode_tokens"].sum() == 5 * total
    assert df["num_preemptions"].sum() == sum(1 for i in range(1, 5001) if i % 7 == 0)
    assert np.allclose(df["num_running"], 2.0)
    assert abs(df["duration_s"].sum() - 500.0) < 1e-9
    assert set(COUNTERS) <= set(df.columns)


def test_summary_percentiles_and_rates():
    t = RequestTable.create(np.array([0.0, 1.0, 2.0]), np.array([10, 10, 10]), np.array([5, 1, 3]))
    t.admitted_s[:] = [0.0, 1.5, 2.0]
    t.first_token_s[:] = [0.5, 2.0, 3.0]
    t.finish_s[:] = [2.5, 2.0, np.nan]  # the third never finished
    df = requests_frame(t)
    assert df["tpot_s"].iloc[0] == 0.5 and np.isnan(df["tpot_s"].iloc[1])
    rec = StepRecorder(horizon_s=3.0)
    rec.finish(2.5, gauges(1.0))
    s = summarize(df, rec, peak_usage=0.5, num_preemptions=0, prefix_queries=0, prefix_hits=0, sim_wall_s=0.1)
    assert s["completed"] == 2 and s["requests"] == 3
    assert s["duration_s"] == 2.5
    assert s["throughput_tok_s"] == 6 / 2.5
    assert s["ttft_s"]["mean"] == 0.75 and s["queue_s"]["p50"] == 0.25
    assert set(s["kv_breakdown_mean"]) == {"token_states", "reserved", "internal_frag", "external_frag", "free"}

"""Intervals on predictions (sim/timing/intervals.py): honest coverage on held-back windows of the
shared RTX 4090 run, the summary's `intervals` keys, and the two methods."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from sim.fidelity.calibrate import from_run
from sim.fidelity.run_record import load_run_dir
from sim.fidelity.validate import validate
from sim.timing.intervals import (
    CALIBRATED,
    VALIDATED_METHOD,
    fmt_interval,
    method_for,
    prediction_bounds,
    summary_intervals,
    validated_method,
    window_log_residuals,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED_RUN = Path(os.environ.get("KVSIM_SHARED", ROOT.parent / "shared")) / "fidelity" / "rtx4090-llama-3.1-8b" / "run"


@pytest.mark.slow
def test_nominal_90_covers_85_to_95_percent_of_held_back_windows(tmp_path):
    """Two folds: fit on the even (odd) 10-request windows, bound the odd (even) ones; every window
    and metric (TTFT, TPOT, E2E window means) counts once. Measured: 84 of 90 inside (93.3%)."""
    if not SHARED_RUN.is_dir():
        pytest.skip("../shared/fidelity not present (set KVSIM_SHARED)")
    run = load_run_dir(SHARED_RUN)
    inside = total = 0
    for fold in (0, 1):
        prof = from_run(run, train_windows=lambda w, f=fold: w % 2 == f)
        path = tmp_path / f"fold{fold}.json"
        path.write_text(json.dumps(prof))
        v = validate(run, profile=str(path))
        method = method_for(v.result.summary["cost_model"], prof)
        assert method.method == CALIBRATED and v.result.summary["interval_method"]["method"] == CALIBRATED
        held = window_log_residuals(run.requests, v.result.requests).iloc[1 - fold :: 2]
        for metric, (lo, hi) in method.log_bounds.items():
            r = held[metric].to_numpy()
            inside += int(((r >= lo) & (r <= hi)).sum())
            total += len(r)
    assert total == 90
    assert 0.85 <= inside / total <= 0.95, f"{inside}/{total}"


def test_summary_has_intervals_on_every_prediction():
    run = load_run_dir(ROOT / "samples" / "vllm_run")
    s = validate(run).result.summary
    assert s["interval_method"]["method"] == VALIDATED_METHOD and s["interval_method"]["level"] == 0.9
    iv = s["intervals"]
    for key in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
        for stat, value in s[key].items():
            if math.isfinite(value):
                lo, hi = iv[key][stat]
                assert lo <= value <= hi
    lo, hi = iv["throughput_tok_s"]
    assert lo < s["throughput_tok_s"] < hi


def test_validated_bounds_combine_within_and_between_run_spread():
    """roofline TTFT: sqrt(0.094^2 + (0.079 / 0.6745)^2) x 1.645 = 0.247 either side (log)."""
    m = validated_method("roofline")
    assert m.log_bounds["ttft_s"][1] == pytest.approx(1.6449 * math.hypot(0.094, 0.079 / 0.6745), rel=1e-3)
    assert validated_method("measured-db").log_bounds["ttft_s"][1] > m.log_bounds["ttft_s"][1]
    assert m.bounds(2.0, "e2e_s")[0] == pytest.approx(2.0 * math.exp(m.log_bounds["e2e_s"][0]))
    assert m.inverse_bounds(100.0, "e2e_s") == pytest.approx([100 * math.exp(-m.log_bounds["e2e_s"][1]),
                                                              100 * math.exp(-m.log_bounds["e2e_s"][0])])


def test_prediction_bounds_student_t():
    r = np.array([0.0, 0.1, -0.1, 0.05, -0.05])
    lo, hi = prediction_bounds(r)
    half = 2.1318 * r.std(ddof=1) * math.sqrt(1 + 1 / 5)  # t(0.95, 4)
    assert (lo, hi) == pytest.approx((-half, half), rel=1e-3)
    with pytest.raises(ValueError):
        prediction_bounds(np.array([0.1, np.nan]))


def test_stored_bounds_are_checked_and_formatting():
    bad = {"fit": {"intervals": {"log_bounds": {"ttft_s": [0.1, -0.1], "tpot_s": [0, 0], "e2e_s": [0, 0]}}}}
    assert method_for({"source": "profile"}, bad).method == VALIDATED_METHOD  # lo > hi: not trusted
    assert summary_intervals({"req_per_s": 4.1}, validated_method("roofline"))["req_per_s"][0] < 4.1
    assert fmt_interval(4.1, [3.8, 4.4], "{:.1f}") == "4.1 (3.8-4.4)"


def test_report_and_chart_show_the_intervals():
    from sim.report import charts
    from sim.report.html_report import html_report
    from sim.report.interval_words import interval_line, log_bounds

    result = validate(load_run_dir(ROOT / "samples" / "vllm_run")).result
    line = interval_line(result.summary)
    assert line.startswith("90% intervals (validated error") and "TTFT p50" in line and "tok/s" in line
    fig = charts.latency_cdfs(result.requests, log_bounds(result.summary))
    assert len(fig.data) == 6 and fig.data[3].fill == "toself"  # three curves, then three bands
    lo, hi = result.summary["interval_method"]["log_bounds"]["ttft_s"]
    first = np.asarray(fig.data[0].x)[0]
    assert np.asarray(fig.data[3].x)[0] == pytest.approx(first * math.exp(lo))
    assert "90% intervals" in html_report(result)
    assert interval_line({"ttft_s": {}}) is None  # an older snapshot: no line


def test_rate_under_slo_carries_an_interval():
    from sim.report.plan_answer import rate_words
    from sim.timing.intervals import rate_bounds

    method = validated_method("roofline").describe()
    lo, hi = method["log_bounds"]["e2e_s"]
    assert rate_bounds(4.0, method) == pytest.approx([4.0 * math.exp(-hi), 4.0 * math.exp(-lo)])
    assert rate_bounds(0.0, method) is None and rate_bounds(4.0, None) is None
    assert rate_words(4.1, (3.8, 4.4)) == "4.1 requests/s (3.8-4.4)"


def test_pareto_chart_draws_the_rate_interval():
    from sim.report.plan_charts import pareto_figure

    rows = [{"max_rate_per_s": 4.0, "tok_s_per_gpu": 400.0, "tok_s_per_user": 30.0, "binding": "compute",
             "max_rate_interval": [3.0, 5.0], "model": "m", "gpu": "g"}]
    bars = pareto_figure(rows, []).data[0].error_y
    assert list(bars.array) == [pytest.approx(100.0)] and list(bars.arrayminus) == [pytest.approx(100.0)]
    rows[0]["max_rate_interval"] = None
    assert pareto_figure(rows, []).data[0].error_y.array is None


def test_validate_reports_interval_coverage_of_the_measured_windows():
    """sim validate says how many measured window means fall inside the simulated 90% intervals
    (the 40-request sample: 8 of 12; the full shared run: 87 of 90)."""
    from sim.fidelity.validate import interval_coverage

    run = load_run_dir(ROOT / "samples" / "vllm_run")
    v = validate(run)
    c = interval_coverage(run, v.result)
    assert c["windows"] == 12 and c["by_metric"]["ttft_s"][1] == 4 and c["method"] == VALIDATED_METHOD
    assert c["inside"] == sum(n for n, _ in c["by_metric"].values()) == 8
    assert v.as_dict()["interval_coverage"] == c

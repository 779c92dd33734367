"""sim calibrate: v2 profiles from a measured vLLM run (by replay) and from a GPU-backend profile."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.__main__ import main
from sim.fidelity.run_record import load_run_dir
from sim.fidelity.validate import validate
from sim.timing.profile import load_profile
from sim.timing.profile_fit import v2_times

FIXTURE = Path(__file__).resolve().parent.parent / "samples" / "vllm_run"
SHARED_RUN = Path(__file__).resolve().parents[1].parent / "shared" / "fidelity" / "rtx4090-llama-3.1-8b" / "run"


def test_calibrate_cli_on_the_fixture_then_validate(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["calibrate", "--run", str(FIXTURE), "--out", str(out), "--no-progress"]) == 0
    prof = load_profile(out)
    assert prof["schema_version"] == 2 and prof["fit"]["replays"] >= 3 and prof["tp"] == 1
    capsys.readouterr()
    assert main(["validate", str(FIXTURE), "--profile", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cost_model"]["source"] == "profile"
    before = validate(load_run_dir(FIXTURE))
    rows = {(r["metric"], r["stat"]): r["error"] for r in report["comparison"]}
    # the fit minimises the mean errors, so it cannot end worse than where it started
    start = sum(before.error(m) ** 2 for m in ("TTFT", "TPOT", "E2E"))
    assert sum(rows[(m, "mean")] ** 2 for m in ("TTFT", "TPOT", "E2E")) <= start + 1e-9


@pytest.mark.slow
def test_calibrated_shared_run_within_five_percent(tmp_path):
    """Done-when of issue 10: after `sim calibrate` on the shared run, `sim validate --profile` <= 5%."""
    if not SHARED_RUN.is_dir():
        pytest.skip("../shared/fidelity not present")
    out = tmp_path / "p.json"
    assert main(["calibrate", "--run", str(SHARED_RUN), "--out", str(out), "--no-progress"]) == 0
    v = validate(load_run_dir(SHARED_RUN), profile=str(out))
    for metric in ("TTFT", "TPOT", "E2E"):
        assert abs(v.error(metric)) <= 0.05, (metric, v.error(metric))


def test_calibrate_from_a_gpu_backend_profile(tmp_path, capsys):
    truth = {"intercept_s": 3e-4, "per_seq_s": 1e-5, "per_token_s": 4e-5, "weights_s": 4e-3,
             "per_prefill_pair_s": 1e-10, "per_kv_token_s": 3e-8}
    raw = []
    for b in (1, 4, 16, 64, 128, 256):
        for ctx in (128, 1024, 4096):
            raw.append([b, b * ctx, b * ctx, float(v2_times(truth, np.array([[b, b * ctx, 0, 0, 0, 0]]))[0])])
    for q in (128, 512, 2048, 8192):
        pairs = q * (q + 1) // 2
        raw.append([q, 0, pairs, float(v2_times(truth, np.array([[0, 0, q, 0, pairs, 1]]))[0])])
    gpu_prof = {"schema": "kvsim.cost_profile", "schema_version": 1, "device": "test GPU", "model": "llama-3-8b",
                "coefficients": {"intercept_s": 1e-3, "per_new_token_s": 1e-5, "per_kv_read_token_s": 0,
                                 "per_attn_pair_s": 0}, "samples_raw": raw}
    src = tmp_path / "gpu.json"
    src.write_text(json.dumps(gpu_prof))
    out = tmp_path / "v2.json"
    assert main(["calibrate", "--gpu-profile", str(src), "--out", str(out)]) == 0
    got = load_profile(out)["coefficients"]
    for name in ("intercept_s", "per_seq_s", "per_token_s", "weights_s", "per_kv_token_s"):
        assert got[name] == pytest.approx(truth[name], rel=0.02), name
    gpu_prof.pop("samples_raw")
    src.write_text(json.dumps(gpu_prof))
    assert main(["calibrate", "--gpu-profile", str(src)]) == 2
    assert "no samples_raw" in capsys.readouterr().err


def test_the_fit_lands_on_a_linear_models_least_squares_in_one_step():
    """fit_log_scales on log errors exactly linear in the scales (three means, two scales, no exact
    fit): one Gauss-Newton step is the least-squares answer, so 1 + 2 + 1 evaluations reach it and a
    second Jacobian finds nothing left to move."""
    from sim.fidelity.calibrate import fit_log_scales

    jac = np.array([[0.2, 1.0], [1.0, 0.1], [0.7, 0.6]])
    offset = np.array([0.3, -0.2, 0.15])
    calls = []

    def log_errors(x):
        calls.append(x)
        return jac @ x + offset

    x, loss = fit_log_scales(log_errors, 2)
    best = np.linalg.lstsq(jac, -offset, rcond=None)[0]
    assert x == pytest.approx(best, abs=1e-9)
    assert loss == pytest.approx(float(np.sum((jac @ best + offset) ** 2)), rel=1e-9)
    assert len(calls) <= 7


def test_a_step_that_overshoots_is_retried_shorter_and_the_fit_stops_at_its_budget():
    """A valley the linear model overshoots (log errors with a cubic term): the fit still lowers the
    loss fivefold, returns a point it replayed, and runs no more replays than its budget."""
    from sim.fidelity.calibrate import fit_log_scales

    losses = []

    def log_errors(x):
        r = np.array([x[0] + 4 * x[1] ** 3 - 0.5, x[0] - x[1] - 0.1, 0.3 * x[1]])
        losses.append(float(r @ r))
        return r

    x, loss = fit_log_scales(log_errors, 2, max_evals=12)
    assert len(losses) <= 12
    assert loss in losses and loss < 0.2 * losses[0]

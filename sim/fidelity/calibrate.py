"""Calibration v2 from what a user has: a GPU-backend profile run, or a measured vLLM run.

(a) `from_gpu_profile`: the GPU backend's profile JSON keeps its raw rows (samples_raw: new
    tokens, K/V read, pairs, seconds); they become step shapes and are fitted directly
    (sim.timing.profile_fit.fit_profile_v2).
(b) `from_run`: a vLLM run records requests, not steps, so it is fitted by replay: start from the
    default step-time model of the run's engine written in the v2 form, then scale its memory/decode
    part (weights, K/V, per-step and per-sequence costs) and its compute/prefill part (per token,
    per prefill pair) by two factors that minimise the squared log errors of the simulated mean
    TTFT, TPOT and E2E against the measured ones (`fit_log_scales`: Levenberg-Marquardt, 9-17
    replays on the shared run).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sim.fidelity.run_record import MeasuredRun
from sim.fidelity.validate import run_scenario, run_trace
from sim.timing.intervals import (
    LEVEL,
    METRICS,
    WINDOW_REQUESTS,
    prediction_bounds,
    window_log_residuals,
    window_means,
)
from sim.timing.profile import PROFILE_SCHEMA, ProfileError, load_profile, save_profile, validate_profile
from sim.timing.profile_fit import fit_profile_v2, shapes_from_v1_rows

MEMORY_PART = ("intercept_s", "per_seq_s", "weights_s", "per_kv_token_s")
COMPUTE_PART = ("per_token_s", "per_prefill_pair_s")
TARGETS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
MAX_REPLAYS = 20  # the fit's replays at most (9-17 on the shared run and its folds), and 2 for the intervals
STEP = 0.05  # log-scale step of the fit's forward differences, and of residual_intervals' Jacobian
MAX_MOVE = 1.0  # one Gauss-Newton step moves a scale by at most e^1
LOSS_FLOOR = 1e-5  # squared log errors summed: every mean within ~0.3% of the measured one is a fit


def fit_log_scales(log_errors: Callable[[np.ndarray], np.ndarray], n: int, max_evals: int = MAX_REPLAYS - 2,
                   xtol: float = 0.005, floor: float = LOSS_FLOOR) -> tuple[np.ndarray, float]:
    """The log scales x minimising |log_errors(x)|^2, by Levenberg-Marquardt with forward differences.
    Why not a simplex: a step's time is a sum of the memory part and the compute part, so each mean's
    log error is close to linear in x and a Gauss-Newton step lands near the minimum at once (9-17
    replays on the shared run and its two folds, where Nelder-Mead took 40). A step that does not
    lower the loss is retried shorter (the damping grows tenfold); the fit stops when the loss is
    below `floor`, a step would move x by less than xtol, or the replays run out."""
    x = np.zeros(n)
    r = log_errors(x)
    loss, evals, damping = float(r @ r), 1, 0.0
    while loss >= floor and evals + n + 1 <= max_evals:
        jac = np.column_stack([(log_errors(x + STEP * e) - r) / STEP for e in np.eye(n)])
        evals += n
        scale = np.sqrt(np.maximum(np.diag(jac.T @ jac), 1e-12))
        moved = False
        while evals < max_evals:
            a = np.vstack([jac, math.sqrt(damping) * np.diag(scale)])
            dx = np.clip(np.linalg.lstsq(a, np.concatenate([-r, np.zeros(n)]), rcond=None)[0], -MAX_MOVE, MAX_MOVE)
            if float(np.max(np.abs(dx))) < xtol:
                break  # nothing left to move (or damped to nothing): no replay for it
            trial = log_errors(x + dx)
            evals += 1
            if float(trial @ trial) < loss:
                x, r, loss, damping, moved = x + dx, trial, float(trial @ trial), damping / 10, True
                break
            damping = max(damping * 10, 1e-3)
        if not moved or float(np.max(np.abs(dx))) < xtol:
            break
    return x, loss


def from_gpu_profile(path: str | Path) -> dict[str, Any]:
    """A v2 profile from a GPU-backend profile file that kept its raw rows (samples_raw)."""
    prof = load_profile(path)
    raw = prof.get("samples_raw")
    if not isinstance(raw, list) or len(raw) < 6:
        raise ProfileError(f"{path}: no samples_raw rows (at least 6) to refit; re-run `python -m gpu_backend profile`")
    try:
        rows = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise ProfileError(f"{path}: samples_raw must be rows of 4 numbers") from None
    if rows.ndim != 2 or rows.shape[1] != 4:
        raise ProfileError(f"{path}: samples_raw must be rows of (new_tokens, kv_read_tokens, attn_pairs, seconds)")
    meta = {k: prof[k] for k in ("device", "model", "tp", "kv_dtype", "weight_dtype") if k in prof}
    return fit_profile_v2(shapes_from_v1_rows(rows), **meta, calibrated_from=f"gpu_backend profile {Path(path).name}")


def default_coefficients(cost: Any) -> dict[str, float]:
    """The roofline CostModel written in the v2 form (the starting point of a fit by replay)."""
    bw = cost.hbm_bandwidth * cost.memory_efficiency
    return {
        "intercept_s": cost.step_overhead_s + cost.layer_overhead_s + cost.allreduce_fixed_s,
        "per_seq_s": cost.per_seq_s + cost.head_flops_per_seq / (cost.peak_flops * cost.prefill_efficiency),
        "per_token_s": (cost.matmul_flops_per_token / (cost.peak_flops * cost.prefill_efficiency)
                        + cost.elementwise_bytes_per_token / bw + cost.allreduce_s_per_token),
        "weights_s": (cost.weight_bytes + cost.expert_weight_bytes) / bw,  # every expert: the v2 form has no routing
        "per_prefill_pair_s": cost.attn_flops_per_pair / (cost.peak_flops * cost.attention_efficiency),
        "per_kv_token_s": cost.kv_bytes_per_token / bw,
    }


Fit = Callable[[Callable[[np.ndarray], np.ndarray], int], tuple[np.ndarray, float]]  # (log_errors, n) -> (x, loss)


def from_run(run: MeasuredRun, progress: Callable[[float], None] | None = None,
             train_windows: Callable[[int], bool] | None = None, fit: Fit | None = None) -> dict[str, Any]:
    """A v2 profile fitted by replaying a measured run (module docstring), with the residuals of its
    windows stored for intervals (`fit.intervals`, sim/timing/intervals.py). `train_windows(w)`
    picks the windows of WINDOW_REQUESTS requests the fit and the residuals may use (default: all);
    the rest are held back (the interval check in tests/test_intervals.py). `fit`: another minimiser
    than fit_log_scales (bench/bench_calibrate.py compares the Nelder-Mead fit this one replaced)."""
    from sim.run.deployment import Deployment
    from sim.run.engine import Simulation, build
    from sim.timing.cost_model import CostModel

    scenario = run_scenario(run, cost_source="roofline")
    dep = Deployment.resolve(scenario)  # once: every replay runs it with other coefficients
    trace = run_trace(run)
    base = default_coefficients(dep.cost)
    order = run.requests.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    windows = np.arange(len(order)) // WINDOW_REQUESTS
    keep = np.array([train_windows is None or bool(train_windows(int(w))) for w in windows])
    measured = {col: float(np.nanmean(order[col].to_numpy()[keep])) for col, _ in TARGETS}
    for col, _ in TARGETS:  # a file that kept only aggregates: its own reported means
        reported = (run.measured_stats(col) or {}).get("mean")
        if reported is not None:
            measured[col] = float(reported)
    calls = [0]
    replays: dict[tuple[float, ...], Any] = {}  # the fit and the intervals ask for some scales twice

    def coefficients(x: np.ndarray) -> dict[str, float]:
        a, b = math.exp(float(x[0])), math.exp(float(x[1]))
        return {k: v * (a if k in MEMORY_PART else b) for k, v in base.items()}

    def replay(x: np.ndarray) -> Any:
        key = tuple(round(float(v), 12) for v in x)
        if key in replays:
            return replays[key]
        calls[0] += 1
        if progress is not None:
            progress(min(calls[0] / MAX_REPLAYS, 1.0))
        setup = build(trace, dep)
        setup.cost = CostModel.from_scenario(dep.spec, dep.gpu, scenario, profile=coefficients(x), source="profile")
        sim = Simulation(setup)
        sim.run()
        replays[key] = sim.result("calibrate", 0.0).requests.sort_values("arrival_s", kind="stable").reset_index(drop=True)
        return replays[key]

    def log_errors(x: np.ndarray) -> np.ndarray:
        req = replay(x)
        return np.array([math.log(max(float(np.nanmean(req[col].to_numpy()[keep])), 1e-12) / measured[col])
                         for col, _ in TARGETS])

    x, loss = (fit or fit_log_scales)(log_errors, 2)
    coef = coefficients(x)
    if run.meta.get("reported") or len(np.unique(windows[keep])) < 3:
        # no per-request latencies (a file of aggregates) or fewer than 3 windows: no residual intervals,
        # so runs with this profile take the source's validated error (sim/timing/intervals.method_for)
        intervals: dict[str, Any] = {"skipped": f"needs per-request latencies over at least 3 windows of "
                                     f"{WINDOW_REQUESTS} requests"}
    else:
        intervals = residual_intervals(order, replay, x, keep)
    e = run.engine
    return validate_profile({
        "schema": PROFILE_SCHEMA, "schema_version": 2, "model": e.model, "device": e.device_name, "tp": e.tp,
        "weight_dtype": e.weight_dtype, "kv_dtype": e.kv_dtype, "coefficients": coef,
        "calibrated_from": f"vLLM {e.vllm_version} run {run.source}",
        "fit": {"method": f"replay ({'Levenberg-Marquardt' if fit is None else fit.__name__} on log memory and "
                          "compute scales)", "replays": calls[0],
                "memory_scale": math.exp(float(x[0])), "compute_scale": math.exp(float(x[1])),
                "squared_log_error": loss, "intervals": intervals},
    }, "calibration")


def residual_intervals(measured: Any, replay: Callable[[np.ndarray], Any], x: np.ndarray, keep: np.ndarray,
                       step: float = STEP) -> dict[str, Any]:
    """Per-metric 90% log bounds from the kept windows' residuals at the fitted scales, widened by the
    scales' uncertainty: J = d log(simulated window mean) / d log(scale) by one replay per scale,
    Cov = s^2 (J'J)^-1 over every kept window and metric, each metric's coefficient variance the
    mean of j' Cov j over its windows (sim/timing/intervals.py)."""
    kept = measured[keep].reset_index(drop=True)
    fitted = replay(x)[keep].reset_index(drop=True)
    base = window_log_residuals(kept, fitted)
    sims = [window_means(fitted)]
    for i in range(len(x)):
        dx = np.array(x, dtype=float)
        dx[i] += step
        sims.append(window_means(replay(dx)[keep].reset_index(drop=True)))
    with np.errstate(divide="ignore", invalid="ignore"):
        jac = {m: np.column_stack([np.log(sims[i + 1][m] / sims[0][m]).to_numpy() / step for i in range(len(x))])
               for m in METRICS}
    rows = np.vstack([jac[m] for m in METRICS])
    resid = np.concatenate([(base[m] - base[m].mean()).to_numpy() for m in METRICS])
    ok = np.isfinite(resid) & np.isfinite(rows).all(axis=1)
    dof = max(int(ok.sum()) - len(x), 1)
    cov = float(np.sum(resid[ok] ** 2)) / dof * np.linalg.pinv(rows[ok].T @ rows[ok])
    bounds, coef_var = {}, {}
    for m in METRICS:
        j = jac[m][np.isfinite(jac[m]).all(axis=1)]
        coef_var[m] = float(np.mean(np.einsum("ij,jk,ik->i", j, cov, j))) if len(j) else 0.0
        bounds[m] = list(prediction_bounds(base[m].to_numpy(), coef_var[m]))
    return {"level": LEVEL, "window_requests": WINDOW_REQUESTS, "windows": int(len(base)), "log_bounds": bounds,
            "coefficient_var": coef_var, "scale_covariance": cov.tolist()}


def write_profile(profile: dict[str, Any], out: str | Path | None) -> Path:
    """Save where asked, else in a temporary file (the path is printed)."""
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="kvsim-profile-")) / "profile.json"
    return save_profile(profile, out)


def describe(profile: dict[str, Any]) -> str:
    return json.dumps({"coefficients": profile["coefficients"], "fit": profile.get("fit")}, indent=2)

"""Calibration v2 from what a user has: a GPU-backend profile run, or a measured vLLM run.

(a) `from_gpu_profile`: the GPU backend's profile JSON keeps its raw rows (samples_raw: new
    tokens, K/V read, pairs, seconds); they become step shapes and are fitted directly
    (sim.timing.profile_fit.fit_profile_v2).
(b) `from_run`: a vLLM run records requests, not steps, so it is fitted by replay: start from the
    default step-time model of the run's engine written in the v2 form, then scale its memory/decode
    part (weights, K/V, per-step and per-sequence costs) and its compute/prefill part (per token,
    per prefill pair) by two factors that minimise the squared log errors of the simulated mean
    TTFT, TPOT and E2E against the measured ones (scipy.optimize.minimize, Nelder-Mead, about 30
    replays).
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
from sim.timing.profile import PROFILE_SCHEMA, ProfileError, load_profile, save_profile, validate_profile
from sim.timing.profile_fit import fit_profile_v2, shapes_from_v1_rows

MEMORY_PART = ("intercept_s", "per_seq_s", "weights_s", "per_kv_token_s")
COMPUTE_PART = ("per_token_s", "per_prefill_pair_s")
TARGETS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
MAX_REPLAYS = 40


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


def from_run(run: MeasuredRun, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """A v2 profile fitted by replaying a measured run (module docstring)."""
    from scipy.optimize import minimize

    from sim.run.deployment import Deployment
    from sim.run.engine import Simulation, build
    from sim.timing.cost_model import CostModel

    scenario = run_scenario(run, cost_source="roofline")
    dep = Deployment.resolve(scenario)  # once: every replay runs it with other coefficients
    trace = run_trace(run)
    base = default_coefficients(dep.cost)
    measured = {col: float(np.nanmean(run.requests[col])) for col, _ in TARGETS}
    calls = [0]

    def coefficients(x: np.ndarray) -> dict[str, float]:
        a, b = math.exp(float(x[0])), math.exp(float(x[1]))
        return {k: v * (a if k in MEMORY_PART else b) for k, v in base.items()}

    def loss(x: np.ndarray) -> float:
        calls[0] += 1
        if progress is not None:
            progress(min(calls[0] / MAX_REPLAYS, 1.0))
        setup = build(trace, dep)
        setup.cost = CostModel.from_scenario(dep.spec, dep.gpu, scenario, profile=coefficients(x), source="profile")
        sim = Simulation(setup)
        sim.run()
        req = sim.result("calibrate", 0.0).requests
        return sum(math.log(max(float(np.nanmean(req[col])), 1e-12) / measured[col]) ** 2 for col, _ in TARGETS)

    result = minimize(loss, np.zeros(2), method="Nelder-Mead",
                      options={"maxfev": MAX_REPLAYS, "xatol": 0.005, "fatol": 1e-6, "initial_simplex":
                               np.array([[0.0, 0.0], [0.15, 0.0], [0.0, 0.15]])})
    coef = coefficients(result.x)
    e = run.engine
    return validate_profile({
        "schema": PROFILE_SCHEMA, "schema_version": 2, "model": e.model, "device": e.device_name, "tp": e.tp,
        "weight_dtype": e.weight_dtype, "kv_dtype": e.kv_dtype, "coefficients": coef,
        "calibrated_from": f"vLLM {e.vllm_version} run {run.source}",
        "fit": {"method": "replay (Nelder-Mead on memory and compute scales)", "replays": calls[0],
                "memory_scale": math.exp(float(result.x[0])), "compute_scale": math.exp(float(result.x[1])),
                "squared_log_error": float(result.fun)},
    }, "calibration")


def write_profile(profile: dict[str, Any], out: str | Path | None) -> Path:
    """Save where asked, else in a temporary file (the path is printed)."""
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="kvsim-profile-")) / "profile.json"
    return save_profile(profile, out)


def describe(profile: dict[str, Any]) -> str:
    return json.dumps({"coefficients": profile["coefficients"], "fit": profile.get("fit")}, indent=2)

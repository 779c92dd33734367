"""Calibration profiles: fitted step models measured on a real GPU (docs/CALIBRATION.md).

Schema v1 (still read): one linear form over (new_tokens, kv_read_tokens, attn_pairs).
Schema v2 (written by sim.timing.profile_fit): prefill and decode parts in a max(compute, memory)
form over the step shape; docs/CALIBRATION.md has both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.safe_json import read_json_file
from sim.errors import ScenarioError
from sim.guard import bounded, numbers_within

PROFILE_SCHEMA = "kvsim.cost_profile"
PROFILE_VERSION = 1  # what fit_profile (the linear v1 form) writes
PROFILE_VERSIONS = (1, 2)
MAX_PROFILE_BYTES = 1 << 20
COEFFICIENTS = ("intercept_s", "per_new_token_s", "per_kv_read_token_s", "per_attn_pair_s")
# v2: step = intercept + per_seq x S + max(per_token x T, weights) + per_prefill_pair x Pp + per_kv_token x (Kd + Kp)
MAX_COEFFICIENT_S = 60.0  # seconds per step, per token or per pair: a minute is corrupt, not slow
COEFFICIENTS_V2 = ("intercept_s", "per_seq_s", "per_token_s", "weights_s", "per_prefill_pair_s", "per_kv_token_s")


class ProfileError(ScenarioError):
    """A calibration profile cannot be used (one line: file and problem)."""


def profile_mismatches(prof: dict[str, Any], scenario: Any, spec: Any) -> list[str]:
    """Warnings when a profile was measured for another model, TP or dtype than the scenario's."""
    out = []
    for key, want in (("model", scenario.model), ("tp", scenario.tp), ("kv_dtype", scenario.kv_dtype),
                      ("weight_dtype", scenario.weight_dtype)):
        have = prof.get(key)
        if have not in (None, "") and str(have).lower() not in (str(want).lower(), spec.name.lower(), spec.hf_id.lower()):
            out.append(f"profile measured with {key}={have}, scenario has {want}")
    return out


def fit_profile(samples: Iterable[Sequence[float]] | np.ndarray, **meta: Any) -> dict[str, Any]:
    """Least-squares fit of the linear step model to measured rows.

    samples: rows of (new_tokens, kv_read_tokens, attn_pairs, seconds). A bounded least squares
    (scipy.optimize.lsq_linear, coefficients >= 0) on columns scaled to 1; a column that never
    varies gets 0. meta (device, model, tp, kv_dtype, weight_dtype,
    ...) is stored alongside. Returns the profile dict that save_profile writes.
    """
    data = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != 4:
        raise ProfileError("fit_profile: samples must be rows of (new_tokens, kv_read_tokens, attn_pairs, seconds)")
    if len(data) < 4 or not np.isfinite(data).all() or (data < 0).any():
        raise ProfileError("fit_profile: need at least 4 finite, non-negative rows")
    X = np.column_stack([np.ones(len(data)), data[:, :3]])
    y = data[:, 3]
    coef = nonnegative_lstsq(X, y)
    if coef[0] + coef[1] <= 0:  # noisy timings can leave no per-step cost: keep the floor of the residuals
        coef[0] = max(float(np.min(y - X[:, 1:] @ coef[1:])), 1e-3 * float(np.min(y)), 1e-9)
    pred = X @ coef
    resid = y - pred
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    rel = np.abs(resid) / np.maximum(y, 1e-12)
    return {
        "schema": PROFILE_SCHEMA, "schema_version": PROFILE_VERSION, **meta,
        "coefficients": dict(zip(COEFFICIENTS, (float(c) for c in coef), strict=True)),
        "fit": {"samples": len(data), "r2": r2, "rmse_s": float(np.sqrt((resid**2).mean())),
                "max_rel_error": float(rel.max()), "median_rel_error": float(np.median(rel))},
    }


def nonnegative_lstsq(X: np.ndarray, y: np.ndarray, relative: bool = True) -> np.ndarray:
    """min ||(X c - y) / y|| subject to c >= 0: relative errors, since step times span 1 ms to 1 s
    and a plain least squares would ignore the short steps that pin the intercept (relative=False:
    absolute errors). Columns are scaled to 1 first (they span 1 .. 1e12). Column 0 is the
    intercept; any other column that never varies is left out (coefficient 0)."""
    from scipy.optimize import lsq_linear

    if relative:
        w = 1.0 / np.maximum(y, 1e-12)
        X, y = X * w[:, None], np.ones_like(y)
    scale = np.maximum(np.abs(X).max(axis=0), 1e-30)
    active = [j for j in range(X.shape[1]) if j == 0 or np.ptp(X[:, j]) > 0]
    coef = np.zeros(X.shape[1])
    ys = max(float(np.abs(y).max()), 1e-30)
    sol = lsq_linear(X[:, active] / scale[active], y / ys, bounds=(0.0, np.inf), method="bvls", tol=1e-12)
    coef[active] = sol.x * ys / scale[active]
    return coef


def validate_profile(data: Any, source: str = "profile") -> dict[str, Any]:
    """Check a parsed profile: schema, version and four finite, non-negative coefficients."""
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a JSON object")
    if data.get("schema") != PROFILE_SCHEMA:
        raise ProfileError(f"{source}: not a kvsim cost profile (schema must be {PROFILE_SCHEMA!r})")
    version = data.get("schema_version")
    if version not in PROFILE_VERSIONS or isinstance(version, bool):
        raise ProfileError(f"{source}: schema_version {version!r} unsupported (expected one of 1, 2)")
    coef = data.get("coefficients")
    if not isinstance(coef, dict):
        raise ProfileError(f"{source}: missing 'coefficients' object")
    names = COEFFICIENTS if version == 1 else COEFFICIENTS_V2
    for name in names:
        bounded(coef.get(name), f"{source}: coefficients.{name}", 0.0, MAX_COEFFICIENT_S, ProfileError)
    numbers_within(data, source, ProfileError)  # metadata and fit figures: finite, no overflow
    if coef["intercept_s"] + coef.get("per_new_token_s", 0) + coef.get("weights_s", 0) + coef.get("per_token_s", 0) <= 0:
        raise ProfileError(f"{source}: coefficients give zero step time")
    return {**data, "coefficients": {name: float(coef[name]) for name in names}}


def save_profile(profile: dict[str, Any], path: str | Path) -> Path:
    """Write a profile (validated first) as indented JSON."""
    p = Path(path)
    p.write_text(json.dumps(validate_profile(profile, str(p)), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return p


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read and validate a profile file: size-bounded, UTF-8 JSON, never executed."""
    p = Path(path)
    data = read_json_file(p, max_bytes=MAX_PROFILE_BYTES, error=ProfileError, what="a profile")
    return validate_profile(data, str(p))

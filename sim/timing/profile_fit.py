"""Calibration v2: fit the max(compute, memory) step form to measured steps with a bounded least squares.

    step = intercept + per_seq x S + max(per_token x T, weights) + per_prefill_pair x Pp + per_kv_token x (Kd + Kp)

(T = D + P tokens computed, S = D + Np sequences sampled; the step shape of sim/timing/cost_model.py.)
The max() is not linear, but for a fixed split of the rows into "memory-bound" (T at or below a
ridge) and "compute-bound" (above it) the form is linear in the six coefficients. So every
candidate ridge (each distinct T) gets one scipy.optimize.lsq_linear fit (coefficients >= 0) and
the split whose fit is consistent (the fitted max agrees with the split) and leaves the smallest
relative residual wins. Exact data generated from known coefficients is recovered exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from sim.timing.profile import COEFFICIENTS_V2, PROFILE_SCHEMA, ProfileError, nonnegative_lstsq

SHAPE_COLUMNS = ("decode_seqs", "decode_kv", "prefill_tokens", "prefill_kv", "prefill_pairs", "prefill_seqs")


def v2_design(shape: np.ndarray, ridge: float) -> np.ndarray:
    """Design matrix of the v2 form for rows of step shapes, given the ridge (tokens) splitting them."""
    d, kd, p, kp, pp, nps = shape.T
    t = d + p
    compute = t > ridge
    return np.column_stack([np.ones(len(shape)), d + nps, np.where(compute, t, 0.0), (~compute).astype(float),
                            pp, kd + kp])


def v2_times(coef: dict[str, float], shape: np.ndarray) -> np.ndarray:
    """Step seconds of the v2 form for rows of step shapes."""
    d, kd, p, kp, pp, nps = np.asarray(shape, dtype=np.float64).T
    c = coef
    return (c["intercept_s"] + c["per_seq_s"] * (d + nps) + np.maximum(c["per_token_s"] * (d + p), c["weights_s"])
            + c["per_prefill_pair_s"] * pp + c["per_kv_token_s"] * (kd + kp))


def fit_profile_v2(samples: Iterable[Sequence[float]] | np.ndarray, **meta: Any) -> dict[str, Any]:
    """Fit rows of (decode_seqs, decode_kv, prefill_tokens, prefill_kv, prefill_pairs, prefill_seqs, seconds)."""
    data = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != 7:
        raise ProfileError("fit_profile_v2: samples must be rows of (" + ", ".join(SHAPE_COLUMNS) + ", seconds)")
    if len(data) < 6 or not np.isfinite(data).all() or (data < 0).any() or (data[:, 6] <= 0).any():
        raise ProfileError("fit_profile_v2: need at least 6 finite rows with non-negative shapes and positive times")
    shape, y = data[:, :6], data[:, 6]
    tokens = shape[:, 0] + shape[:, 2]
    best: tuple[float, np.ndarray] | None = None
    for ridge in np.concatenate(([-1.0], np.unique(tokens))):
        coef = nonnegative_lstsq(v2_design(shape, ridge), y)
        named = dict(zip(COEFFICIENTS_V2, coef.tolist(), strict=True))
        rel = v2_times(named, shape) / y - 1.0
        score = float(np.sqrt(np.mean(rel**2)))
        if best is None or score < best[0] - 1e-12:
            best = (score, coef)
    assert best is not None
    named = dict(zip(COEFFICIENTS_V2, (float(c) for c in best[1]), strict=True))
    pred = v2_times(named, shape)
    rel = np.abs(pred / y - 1.0)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return {
        "schema": PROFILE_SCHEMA, "schema_version": 2, **meta, "coefficients": named,
        "fit": {"samples": len(data), "r2": r2, "rmse_s": float(np.sqrt(((y - pred) ** 2).mean())),
                "max_rel_error": float(rel.max()), "median_rel_error": float(np.median(rel))},
    }


def shapes_from_v1_rows(rows: np.ndarray) -> np.ndarray:
    """GPU-backend profile rows (new_tokens, kv_read_tokens, attn_pairs, seconds) as v2 rows: a row
    whose pairs equal its K/V read is a decode batch (one new token per sequence), else one prefill chunk."""
    rows = np.asarray(rows, dtype=np.float64)
    new, kv, pairs, secs = rows.T
    decode = pairs == kv
    zero = np.zeros(len(rows))
    return np.column_stack([np.where(decode, new, 0), np.where(decode, kv, 0), np.where(decode, 0, new),
                            np.where(decode, 0, kv), np.where(decode, 0, pairs), np.where(decode, 0, 1.0) + zero,
                            secs])

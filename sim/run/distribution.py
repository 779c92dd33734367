"""One summary of a distribution (mean and the percentiles docs/METRICS.md reports) for every summary
block that has one: request latencies, KV transfer times, tier load delays."""

from __future__ import annotations

import numpy as np


def distribution(values: np.ndarray, *, count: bool = False, maximum: bool = False) -> dict[str, float | None]:
    """Mean, p50, p90, p99 of the finite values (None when there are none); `count` and `maximum` add
    the number of finite values and their max, for blocks that report them."""
    v = values[np.isfinite(values)]
    out: dict[str, float | None] = {"count": int(v.size)} if count else {}
    if not v.size:
        out.update({"mean": None, "p50": None, "p90": None, "p99": None})
        if maximum:
            out["max"] = None
        return out
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    out.update({"mean": float(v.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)})
    if maximum:
        out["max"] = float(v.max())
    return out

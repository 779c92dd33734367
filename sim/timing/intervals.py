"""Error bars on predictions: nominal 90% intervals on latency, throughput and what follows from them.

An interval says where a measurement of the metric over a window of traffic (WINDOW_REQUESTS
consecutive requests in arrival order) would fall, 9 times in 10. It is multiplicative: the
predicted value times exp([lo, hi]) of a log error, per metric (TTFT, TPOT, E2E; queueing follows
TTFT, throughput and duration follow E2E inverted). Two methods, the summary says which
(`interval_method`):

- "calibration residuals": the scenario's profile was fitted by replaying a measured run
  (`sim calibrate --run`); the fit stored, per metric, the log residuals of the run's windows
  (measured / simulated window means) and the scales' covariance propagated by two extra replays
  (finite-difference Jacobian, Gauss-Newton covariance). The bounds are a Student-t prediction
  interval: mean +- t(0.95, n-1) x sqrt(sd^2 (1 + 1/n) + coefficient variance).
- "validated error": no fitted profile; the step-time source's error distribution validated on
  measured runs (docs/CALIBRATION.md, "Intervals"): the within-run window spread of the shared
  RTX 4090 run combined with the between-run spread of run-level errors measured on runs outside
  the repository (issue 27). `VALIDATED` holds the figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

LEVEL = 0.9
Z90 = 1.6448536269514722  # standard normal 95th percentile
WINDOW_REQUESTS = 10
METRICS = ("ttft_s", "tpot_s", "e2e_s")
CALIBRATED = "calibration residuals"
VALIDATED_METHOD = "validated error"

# Validated log-error spread per step-time source and metric (docs/CALIBRATION.md "Intervals"):
# sd_within = standard deviation of window log errors (10-request windows) of the shared RTX 4090
# run replayed with that source's defaults; median_between = median |run-level error| on measured
# runs outside the repository (issue 27: per-request runs on RTX 4090 / RTX PRO 6000 for the
# roofline, H100 SXM stages for the measured kernels). sd_between = median / 0.6745 (normal).
VALIDATED: dict[str, dict[str, tuple[float, float]]] = {
    # metric: (sd_within, median_between)
    "roofline": {"ttft_s": (0.094, 0.079), "tpot_s": (0.061, 0.036), "e2e_s": (0.015, 0.061)},
    "measured-db": {"ttft_s": (0.094, 0.237), "tpot_s": (0.061, 0.097), "e2e_s": (0.015, 0.093)},
}
VALIDATED["derived"] = VALIDATED["measured-db"]
VALIDATED["profile"] = VALIDATED["roofline"]  # a profile without stored residuals (a GPU-backend fit)


@dataclass(frozen=True)
class IntervalMethod:
    """How the intervals were made, and the log bounds per metric at LEVEL."""

    method: str
    detail: str
    log_bounds: Mapping[str, tuple[float, float]]
    level: float = LEVEL
    window_requests: int = WINDOW_REQUESTS
    extra: dict[str, Any] = field(default_factory=dict)

    def bounds(self, value: float, metric: str) -> list[float]:
        """[lo, hi] around a predicted value of `metric` (a latency in ttft_s/tpot_s/e2e_s)."""
        lo, hi = self.log_bounds[metric]
        return [value * math.exp(lo), value * math.exp(hi)]

    def inverse_bounds(self, value: float, metric: str) -> list[float]:
        """[lo, hi] of a rate that varies inversely with `metric` (throughput vs E2E)."""
        lo, hi = self.log_bounds[metric]
        return [value * math.exp(-hi), value * math.exp(-lo)]

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "detail": self.detail, "level": self.level,
                "window_requests": self.window_requests,
                "log_bounds": {k: list(v) for k, v in self.log_bounds.items()}, **self.extra}


def window_means(requests: pd.DataFrame, window: int = WINDOW_REQUESTS) -> pd.DataFrame:
    """Mean TTFT/TPOT/E2E of consecutive windows of `window` requests in arrival order (NaNs skipped)."""
    order = requests.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    groups = np.arange(len(order)) // window
    return order[list(METRICS)].groupby(groups).mean()


def window_log_residuals(measured: pd.DataFrame, simulated: pd.DataFrame,
                         window: int = WINDOW_REQUESTS) -> pd.DataFrame:
    """log(measured / simulated) of each window's mean, per metric (rows: windows)."""
    m, s = window_means(measured, window), window_means(simulated, window)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(m / s).replace([np.inf, -np.inf], np.nan)


def prediction_bounds(residuals: np.ndarray, coefficient_var: float = 0.0) -> tuple[float, float]:
    """Student-t 90% prediction interval of one more log residual (mean +- t x sqrt(sd^2 (1 + 1/n) + var))."""
    from scipy.stats import t as student_t

    r = residuals[np.isfinite(residuals)]
    if len(r) < 3:
        raise ValueError("need at least 3 windows to bound the error")
    n, mu, sd = len(r), float(r.mean()), float(r.std(ddof=1))
    half = float(student_t.ppf(0.5 + LEVEL / 2, n - 1)) * math.sqrt(sd * sd * (1 + 1 / n) + coefficient_var)
    return mu - half, mu + half


def validated_method(source: str) -> IntervalMethod:
    """Intervals from the step-time source's validated error distribution (no fitted profile)."""
    table = VALIDATED.get(source, VALIDATED["roofline"])
    bounds = {m: (-Z90 * math.hypot(w, b / 0.6745), Z90 * math.hypot(w, b / 0.6745)) for m, (w, b) in table.items()}
    return IntervalMethod(VALIDATED_METHOD, f"the {source} step times' validated error (docs/CALIBRATION.md, Intervals)",
                          bounds)


def method_for(cost_model: Mapping[str, Any], profile: Mapping[str, Any] | None) -> IntervalMethod:
    """Calibration residuals when the scenario's profile stored them, else the source's validated error."""
    stored = (profile or {}).get("fit", {}).get("intervals") if profile else None
    if isinstance(stored, Mapping) and isinstance(stored.get("log_bounds"), Mapping):
        try:
            bounds = {m: (float(stored["log_bounds"][m][0]), float(stored["log_bounds"][m][1])) for m in METRICS}
        except (KeyError, TypeError, ValueError, IndexError):
            bounds = {}
        if bounds and all(math.isfinite(lo) and math.isfinite(hi) and lo <= hi for lo, hi in bounds.values()):
            return IntervalMethod(CALIBRATED, f"residuals of {int(stored.get('windows', 0))} windows of the calibration "
                                  "run, coefficient uncertainty propagated by replay", bounds,
                                  window_requests=int(stored.get("window_requests", WINDOW_REQUESTS)))
    return validated_method(str(cost_model.get("source", "roofline")))


LATENCY_KEYS = {"ttft_s": "ttft_s", "tpot_s": "tpot_s", "e2e_s": "e2e_s", "queue_s": "ttft_s"}
RATE_KEYS = ("throughput_tok_s", "req_per_s")


def summary_intervals(summary: Mapping[str, Any], method: IntervalMethod) -> dict[str, Any]:
    """`intervals`: the summary's keys that are predictions, each [lo, hi] (latency stats per stat)."""
    out: dict[str, Any] = {}
    for key, metric in LATENCY_KEYS.items():
        stats = summary.get(key)
        if isinstance(stats, Mapping):
            out[key] = {s: method.bounds(float(v), metric) for s, v in stats.items()
                        if isinstance(v, int | float) and math.isfinite(v)}
    for key in RATE_KEYS:
        if isinstance(summary.get(key), int | float):
            out[key] = method.inverse_bounds(float(summary[key]), "e2e_s")
    if isinstance(summary.get("duration_s"), int | float):
        out["duration_s"] = method.bounds(float(summary["duration_s"]), "e2e_s")
    pool = (summary.get("vllm_memory") or {}).get("num_gpu_blocks_range")
    if summary.get("num_gpu_blocks") is not None and pool:
        out["num_gpu_blocks"] = list(pool)  # not the step-time method's: the pool's own (sim/memory/vllm_first_start.py)
    return out


def load_profile_quietly(path: str | None) -> dict[str, Any] | None:
    """The scenario's profile (already validated when the cost model loaded it), or None."""
    if not path:
        return None
    from sim.timing.profile import ProfileError, load_profile

    try:
        return load_profile(path)
    except (ProfileError, OSError):
        return None


def run_intervals(summary: Mapping[str, Any], profile_path: str | None) -> dict[str, Any]:
    """The summary keys `intervals` and `interval_method` of one run."""
    method = method_for(summary.get("cost_model") or {}, load_profile_quietly(profile_path))
    return {"intervals": summary_intervals(summary, method), "interval_method": method.describe()}


def fmt_interval(value: float, bounds: list[float] | tuple[float, float] | None, fmt: str = "{:.2f}") -> str:
    """'4.1 (3.8-4.4)': a value with its interval, in one format."""
    if not bounds:
        return fmt.format(value)
    return f"{fmt.format(value)} ({fmt.format(bounds[0])}-{fmt.format(bounds[1])})"


def rate_bounds(rate: float, interval_method: Mapping[str, Any] | None, metric: str = "e2e_s") -> list[float] | None:
    """[lo, hi] of a sustainable rate (capacity under an SLO): a real engine slower by exp(hi) serves
    that much less, one faster by exp(lo) that much more (first order: the rate scales with the step
    time; queueing near the limit is not re-simulated: sim/plan/rate_interval.py re-simulates it, and
    labels where this one is kept). None without a method."""
    bounds = (interval_method or {}).get("log_bounds") if isinstance(interval_method, Mapping) else None
    if not isinstance(bounds, Mapping) or metric not in bounds or not rate > 0:
        return None
    lo, hi = float(bounds[metric][0]), float(bounds[metric][1])
    return [rate * math.exp(-hi), rate * math.exp(-lo)]

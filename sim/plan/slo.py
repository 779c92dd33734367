"""Service-level objectives: what "fits" means when the search asks how many users fit.

Text form (CLI and dashboard): "ttft_p99=1.0,tpot_p99=0.05[,e2e_p99=20,goodput=0.99]". A latency
target is METRIC_STAT=SECONDS with METRIC in ttft, tpot, e2e, queue and STAT in mean, p50, p90,
p99, checked against the run summary (docs/METRICS.md). `goodput=F` also asks that at least a
fraction F of all requests meets every latency target on its own (DistServe's goodput; rejected
requests count as misses), the per-request threshold of a metric being its target's value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

METRICS = ("ttft", "tpot", "e2e", "queue")
STATS = ("mean", "p50", "p90", "p99")


class SloError(ValueError):
    """A bad SLO spec; one line naming the part."""


@dataclass(frozen=True)
class Slo:
    """Latency targets ((metric, stat, seconds), ...) and an optional goodput fraction."""

    targets: tuple[tuple[str, str, float], ...]
    goodput: float | None = None

    def text(self) -> str:
        parts = [f"{m}_{s}={_num(v)}" for m, s, v in self.targets]
        return ",".join(parts + ([f"goodput={_num(self.goodput)}"] if self.goodput is not None else []))

    def words(self) -> str:
        """For people: "TTFT p99 <= 2 s, TPOT p99 <= 100 ms, goodput >= 90%" (text() is the CLI's form)."""
        parts = [f"{m.upper()} {s} <= {_secs(v)}" for m, s, v in self.targets]
        return ", ".join(parts + ([f"goodput >= {100 * self.goodput:g}%"] if self.goodput is not None else []))

    def violations(self, summary: dict[str, Any], requests: pd.DataFrame | None = None) -> list[str]:
        """What misses, one short phrase each (empty: every objective met)."""
        out = []
        if summary.get("completed", 0) == 0:
            return ["no request completed"]
        for metric, stat, limit in self.targets:
            value = (summary.get(f"{metric}_s") or {}).get(stat)
            if value is None or not value <= limit:
                out.append(f"{metric}_{stat} {_fmt(value)} > {_num(limit)} s")
        if self.goodput is not None:
            share = self.goodput_share(requests) if requests is not None else 0.0
            if share < self.goodput:
                out.append(f"goodput {share:.3f} < {_num(self.goodput)}")
        return out

    def goodput_share(self, requests: pd.DataFrame) -> float:
        """Fraction of requests meeting every latency target on their own (NaN = a miss, except a
        1-token output's NaN TPOT, which has no inter-token time to miss)."""
        if requests.empty:
            return 0.0
        return float(self.met_by(requests).mean())

    def met_by(self, requests: pd.DataFrame) -> np.ndarray:
        """Per request: does it meet every latency target on its own (the target's value as its limit)?"""
        ok = np.ones(len(requests), dtype=bool)
        for metric, _stat, limit in self.targets:
            col = requests[f"{metric}_s"].to_numpy(dtype=float)
            fine = col <= limit
            if metric == "tpot":
                fine |= np.isnan(col) & np.isfinite(requests["finish_s"].to_numpy(dtype=float))
            ok &= fine
        return ok


def parse_slo(text: str) -> Slo:
    targets: list[tuple[str, str, float]] = []
    goodput = None
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        try:
            number = float(value)
        except ValueError:
            raise SloError(f"--slo: {part.strip()!r} is not KEY=NUMBER") from None
        if not sep or not math.isfinite(number) or number <= 0:
            raise SloError(f"--slo: {part.strip()!r} needs a positive number")
        if key == "goodput":
            if number > 1:
                raise SloError(f"--slo: goodput={value.strip()} must be a fraction in (0, 1]")
            goodput = number
            continue
        metric, _, stat = key.partition("_")
        if metric not in METRICS or stat not in STATS:
            raise SloError(f"--slo: unknown objective {key!r} (METRIC_STAT with METRIC in {', '.join(METRICS)}, "
                           f"STAT in {', '.join(STATS)}; or goodput)")
        if any((m, s) == (metric, stat) for m, s, _ in targets):
            raise SloError(f"--slo: {key} given twice")
        targets.append((metric, stat, number))
    if not targets:
        raise SloError("--slo: give at least one latency target, e.g. ttft_p99=1.0")
    return Slo(tuple(targets), goodput)


def _secs(v: float) -> str:
    return f"{1000 * v:g} ms" if v < 1 else f"{v:g} s"


def _num(v: float) -> str:
    return f"{v:g}"


def _fmt(v: float | None) -> str:
    return "none" if v is None else f"{v:.3g}"

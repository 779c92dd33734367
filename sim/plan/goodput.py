"""Goodput of one finished run against an SLO (`sim run --slo`, docs/METRICS.md "Goodput").

Goodput as DistServe (OSDI '24) defines it: the requests that met every latency limit on their own,
as a share of all requests (rejected and unfinished ones are misses) and as a rate over the run's
`duration_s` (the denominator of `throughput_tok_s`). The per-request
limit of an objective is its target's value whatever its statistic (`ttft_p99=1` asks each request
for TTFT <= 1 s), the definition sim/plan/slo.py's `goodput=F` search objective already uses, so
both read `Slo.met_by`. A 1-token output has no TPOT to miss.

A P/D fleet adds one row per pool, each against the objectives that pool decides, as DistServe sizes
its prefill instances for TTFT and its decode instances for TPOT: the prefill pool against the ttft
and queue targets, the decode pool against tpot (e2e spans both and is counted only fleet-wide).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sim.plan.slo import Slo

POOL_METRICS = {"prefill": ("ttft", "queue"), "decode": ("tpot",)}


def _met(slo: Slo, requests: pd.DataFrame, duration_s: float) -> dict[str, Any]:
    met = slo.met_by(requests) & requests["finish_s"].notna().to_numpy()  # an unfinished request met nothing yet
    n = int(met.sum())
    tokens = int(requests["output_tokens"].to_numpy()[met].sum())
    return {"slo": slo.text(), "met": n, "share": n / len(requests) if len(requests) else 0.0,
            "tokens_per_s": tokens / duration_s if duration_s > 0 else 0.0,
            "req_per_s": n / duration_s if duration_s > 0 else 0.0}


def goodput_summary(slo: Slo, requests: pd.DataFrame, summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's `goodput` key: fleet-wide, plus `pools` for a P/D fleet (module docstring)."""
    duration = float(summary.get("duration_s") or 0.0)
    out = _met(Slo(slo.targets), requests, duration)
    roles = [p.get("role") for p in (summary.get("fleet") or {}).get("pools", [])]
    if "prefill" in roles and "decode" in roles:
        pools = []
        for role, metrics in POOL_METRICS.items():
            targets = tuple(t for t in slo.targets if t[0] in metrics)
            row = _met(Slo(targets), requests, duration) if targets else {"slo": None, "met": None, "share": None,
                                                                           "tokens_per_s": None, "req_per_s": None}
            pools.append({"role": role, **row})
        out["pools"] = pools
    return out

"""The "P:D" text of a disaggregated fleet: P prefill replicas and D decode replicas (xPyD)."""

from __future__ import annotations

MAX_POOL = 1024


def parse_pd(text: str) -> tuple[int, int]:
    """(P, D) from "P:D", both whole numbers >= 1 (ValueError with one line otherwise)."""
    parts = str(text).strip().split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError("must be P:D, e.g. 1:3 (prefill and decode replicas)")
    p, d = (int(x) for x in parts)
    if not (1 <= p <= MAX_POOL and 1 <= d <= MAX_POOL):
        raise ValueError(f"P and D must each be between 1 and {MAX_POOL}")
    return p, d


def every_split(replicas: int) -> list[str]:
    """Every "P:D" of `replicas` replicas, prefill-light first: 1:n-1 .. n-1:1 (none below 2). The
    Compare preset, the Plan page and the search's aggregated-or-disaggregated question all sweep it."""
    return [f"{p}:{replicas - p}" for p in range(1, replicas)]

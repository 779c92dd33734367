"""A run's 90% intervals said in one line (the Simulate metrics and the HTML report share it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _fmt_s(v: float) -> str:
    """Seconds as the headline shows them: ms under a second."""
    v = float(v)
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:,.2f} s"

FIGURES = (("TTFT p50", "ttft_s", "p50"), ("TTFT p99", "ttft_s", "p99"), ("TPOT p50", "tpot_s", "p50"),
           ("TPOT p99", "tpot_s", "p99"), ("E2E p99", "e2e_s", "p99"))


def interval_line(summary: Mapping[str, Any]) -> str | None:
    """'90% intervals (validated error of the roofline step times): throughput 600-804 tok/s, TTFT p50
    24.2-39.7 ms, ...', or None for a summary without intervals (older snapshots, the GPU backend)."""
    iv, method = summary.get("intervals"), summary.get("interval_method")
    if not isinstance(iv, Mapping) or not isinstance(method, Mapping):
        return None
    parts = []
    tput = iv.get("throughput_tok_s")
    if isinstance(tput, list | tuple) and len(tput) == 2:
        parts.append(f"throughput {float(tput[0]):,.0f}-{float(tput[1]):,.0f} tok/s")
    for label, key, stat in FIGURES:
        b = iv.get(key, {}).get(stat) if isinstance(iv.get(key), Mapping) else None
        if isinstance(b, list | tuple) and len(b) == 2:
            parts.append(f"{label} {_fmt_s(b[0])}-{_fmt_s(b[1])}")
    if not parts:
        return None
    level = float(method.get("level", 0.9))
    return (f"{level:.0%} intervals ({method.get('method')}: {method.get('detail')}; where a measurement over "
            f"{method.get('window_requests', 10)} consecutive requests falls {round(level * 10)} times in 10): "
            + ", ".join(parts) + ".")


def log_bounds(summary: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The per-metric log bounds the charts draw as bands, or None."""
    method = summary.get("interval_method")
    bounds = method.get("log_bounds") if isinstance(method, Mapping) else None
    return bounds if isinstance(bounds, Mapping) else None

"""The KV tiers' part of the HTML report (docs/TIERS.md, "Metrics"): the stacked occupancy chart the
dashboard shows, hits per tier, bytes moved per tier and direction, the load delay, and TTFT split
into queue, load and prefill. Empty for a run without tiers, so such reports stay as they were."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from sim.report import tier_charts
from sim.report.svg import figure_svg

SPLIT_PARTS = (("queue", "arrival -> admission"), ("load", "admission -> KV loaded from a lower tier"),
               ("prefill", "the rest, until the first token"))


def _ms(d: Mapping[str, Any] | None, key: str) -> str:
    value = (d or {}).get(key)
    return "-" if value is None else f"{float(value) * 1e3:,.1f}"


def _rows(head: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{''.join(f'<th>{html.escape(h)}</th>' for h in head)}</tr>{cells}</table>"


def tier_section(summary: Mapping[str, Any], steps: Any) -> str:
    """The report's "KV tiers" section, or "" when the run has none."""
    rates = summary.get("tier_hit_rate")
    if not isinstance(rates, Mapping):
        return ""
    moved = summary.get("tier_bytes_moved") or {}
    hits = _rows(("tier", "hit rate", "loaded (GB)", "stored (GB)"),
                 [(name, f"{float(rate):.2%}", *(f"{(moved.get(name) or {}).get(d, 0) / 1e9:,.3f}" for d in ("load", "store")))
                  for name, rate in rates.items()])
    split = summary.get("ttft_split_s") or {}
    ttft = _rows(("TTFT part", "what", "mean (ms)", "p50 (ms)", "p99 (ms)"),
                 [(part, words, _ms(split.get(part), "mean"), _ms(split.get(part), "p50"), _ms(split.get(part), "p99"))
                  for part, words in SPLIT_PARTS])
    delay = summary.get("tier_load_delay_s") or {}
    loads = (f"<p>{int(delay.get('count') or 0):,} loads from the lower tiers; load delay mean {_ms(delay, 'mean')} ms, "
             f"p99 {_ms(delay, 'p99')} ms.</p>")
    fig = tier_charts.tier_occupancy(summary, steps)
    chart = f'<figure id="chart-tiers">{figure_svg(fig)}</figure>' if fig is not None else ""
    return f"<h2>KV tiers</h2>{chart}{hits}{loads}{ttft}"

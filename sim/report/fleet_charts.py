"""Charts of a fleet's run (docs/FLEET.md): per-replica KV usage and queue over time as heatmaps,
what each replica was routed and hit, and the P/D transfers as a timeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from sim.report.charts import _layout


def replica_heatmap(timeline: Mapping[str, Any], field: str, title: str, label: str = "replica") -> go.Figure:
    """Rows: replicas; columns: the gauge samples of `timeline` (fleet_metrics.timeline)."""
    rows = timeline.get(field) or []
    names = [f"{label} {i}" for i in range(len(rows))]
    colorbar = "share of pool" if field == "kv_usage" else "waiting requests"
    fig = go.Figure(go.Heatmap(z=rows, x=timeline.get("t_s") or [], y=names, colorscale="Viridis",
                               colorbar={"title": colorbar}, zmin=0, zmax=1 if field == "kv_usage" else None))
    return _layout(fig, title, "", height=120 + 28 * len(rows))


def routed_bars(replicas: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Requests routed per replica, with each replica's prefix-cache hit rate on the hover."""
    fig = go.Figure(go.Bar(x=[r["replica"] for r in replicas], y=[r["routed"] for r in replicas],
                           customdata=[[r["prefix_cache_hit_rate"], r["utilisation"]] for r in replicas],
                           hovertemplate="replica %{x}: %{y} requests<br>prefix hit %{customdata[0]:.1%}"
                                         "<br>busy %{customdata[1]:.0%}<extra></extra>"))
    return _layout(fig, "Requests routed per replica", "requests", x_title="replica", height=300)


def transfer_timeline(transfers: Sequence[Mapping[str, Any]]) -> go.Figure:
    """One line per KV handoff from its start (decode blocks reserved) to its arrival, by decode replica."""
    xs: list[float | None] = []
    ys: list[str | None] = []
    for t in transfers:
        xs += [t["start_s"], t["done_s"], None]
        ys += [f"decode {t['decode']}"] * 2 + [None]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", marker={"size": 4}, hoverinfo="x+y"))
    return _layout(fig, f"KV transfers, prefill to decode (first {len(transfers)})", "", height=300)

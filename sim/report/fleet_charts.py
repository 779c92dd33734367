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


def replica_label(r: Mapping[str, Any]) -> str:
    """'3', or 'decode 3' in a P/D fleet (each pool numbers its replicas from 0)."""
    return f"{r['pool']} {r['replica']}" if "pool" in r else str(r["replica"])


def routed_bars(replicas: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Requests routed per replica, with each replica's prefix-cache hit rate on the hover. Bars sit at
    0..n-1 with the replica's label ('decode 0' in a P/D fleet) as tick text and on the hover."""
    labels = [replica_label(r) for r in replicas]
    fig = go.Figure(go.Bar(x=list(range(len(replicas))), y=[r["routed"] for r in replicas],
                           customdata=[[r["prefix_cache_hit_rate"], r["utilisation"], label]
                                       for r, label in zip(replicas, labels, strict=True)],
                           hovertemplate="replica %{customdata[2]}: %{y} requests<br>prefix hit %{customdata[0]:.1%}"
                                         "<br>busy %{customdata[1]:.0%}<extra></extra>"))
    fig = _layout(fig, "Requests routed per replica", "requests", x_title="replica", height=300)
    fig.update_xaxes(tickvals=list(range(len(replicas))), ticktext=labels)
    return fig


def transfer_timeline(transfers: Sequence[Mapping[str, Any]]) -> go.Figure:
    """One line per KV handoff from its start (decode blocks reserved) to its arrival, by decode replica."""
    xs: list[float | None] = []
    ys: list[str | None] = []
    for t in transfers:
        xs += [t["start_s"], t["done_s"], None]
        ys += [f"decode {t['decode']}"] * 2 + [None]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", marker={"size": 4}, hoverinfo="x+y"))
    return _layout(fig, f"KV transfers, prefill to decode (first {len(transfers)})", "", height=300)

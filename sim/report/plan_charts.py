"""Plotly figures for a search under an SLO (docs/PLAN.md): the Pareto chart of tokens/s per GPU
against tokens/s per user, one point per configuration that meets the SLO, the front joined."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

BINDING_COLOURS = {"kv": "#ef4444", "compute": "#2563eb", "token_budget": "#f59e0b", "max_num_seqs": "#10b981"}


def row_label(row: dict[str, Any], varied: Sequence[str]) -> str:
    """A configuration named by its GPU and the fields that differ between rows."""
    return " ".join([str(row.get("gpu", ""))] + [f"{k}={row.get(k)}" for k in varied if k != "gpu"])


def varied_fields(rows: Sequence[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    names = [k for k in rows[0].get("scenario", {}) if k in rows[0]]
    return [k for k in names if len({str(r.get(k)) for r in rows}) > 1]


def _rate_band(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Error bars on tokens/s per GPU from each row's 90% rate interval (the same ratio), or None."""
    if not any(r.get("max_rate_interval") for r in rows):
        return None
    up, down = [], []
    for r in rows:
        band, rate, y = r.get("max_rate_interval"), r["max_rate_per_s"], r["tok_s_per_gpu"]
        up.append(y * (band[1] / rate - 1) if band else 0.0)
        down.append(y * (1 - band[0] / rate) if band else 0.0)
    return dict(type="data", symmetric=False, array=up, arrayminus=down, thickness=1.2, width=4)


def _band_words(r: dict[str, Any]) -> str:
    band = r.get("max_rate_interval")
    return f" ({band[0]:.3g}-{band[1]:.3g}, {r.get('rate_interval_source') or 'first order'})" if band else ""


def pareto_figure(rows: Sequence[dict[str, Any]], pareto: Sequence[dict[str, Any]]) -> go.Figure:
    """x: tokens/s per user (1 / mean TPOT), y: output tokens/s per GPU at the max rate (bars: its 90%
    interval, sim/plan/rate_interval.py, the hover names how it was made); colour = binding."""
    varied = varied_fields(rows)
    fig = go.Figure()
    fit = [(i, r) for i, r in enumerate(rows) if r["max_rate_per_s"] > 0 and r["tok_s_per_user"] is not None]
    for binding in sorted({r["binding"] for _, r in fit}):
        pts = [(i, r) for i, r in fit if r["binding"] == binding]
        fig.add_trace(go.Scatter(
            x=[r["tok_s_per_user"] for _, r in pts], y=[r["tok_s_per_gpu"] for _, r in pts], mode="markers",
            name=f"{binding} binds", marker=dict(size=11, color=BINDING_COLOURS.get(binding, "#6b7280")),
            text=[f"row {i}: {row_label(r, varied)}<br>{r['max_rate_per_s']:.3g} req/s" + _band_words(r) for i, r in pts],
            hovertemplate="%{text}<br>%{x:.1f} tok/s/user, %{y:.0f} tok/s/GPU<extra></extra>",
            error_y=_rate_band([r for _, r in pts])))
    if pareto:
        fig.add_trace(go.Scatter(x=[p["tok_s_per_user"] for p in pareto], y=[p["tok_s_per_gpu"] for p in pareto],
                                 mode="lines", name="Pareto front", line=dict(color="#111827", dash="dot")))
    fig.update_layout(title="Throughput per GPU vs speed per user at the largest rate meeting the SLO", height=420,
                      template="plotly_white", margin=dict(l=60, r=20, t=50, b=40),
                      legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0.0))
    fig.update_xaxes(title_text="tokens/s per user (1 / mean TPOT)")
    fig.update_yaxes(title_text="output tokens/s per GPU")
    return fig

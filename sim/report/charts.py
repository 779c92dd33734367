"""Plotly figures drawn from the metrics frames (docs/METRICS.md column names).

The dashboard pages and the HTML report call the same functions, so a chart looks the same in
both. Functions take frames and plain dicts only (no Streamlit), and never compute metrics: they
draw what the simulator or the GPU backend measured. Bytes are shown in GiB (2^30).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

GIB = float(1 << 30)

# The five-way KV breakdown, bottom to top, and the colour of each band.
BREAKDOWN = (
    ("token_states_bytes", "token states", "#2563eb"),
    ("reserved_bytes", "reserved (not yet written)", "#f59e0b"),
    ("internal_frag_bytes", "internal fragmentation", "#ef4444"),
    ("external_frag_bytes", "external fragmentation", "#a855f7"),
    ("free_bytes", "free", "#d1d5db"),
)
WEIGHTS_COLOUR = "#4b5563"
LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end-to-end"))
LATENCY_UNITS = {"tpot_s": ("ms", 1000.0)}  # TPOT in ms like the headline figures; the others in seconds
PALETTE = ("#2563eb", "#ef4444", "#10b981", "#f59e0b", "#a855f7", "#0891b2")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")  # overlaid lines stay told apart
DECADES = 100.0  # an axis whose positive values span more than this ratio goes logarithmic


def spans_decades(values: Any) -> bool:
    """True when the positive values span more than DECADES (max / min): a linear axis would hide the small ones."""
    v = pd.to_numeric(pd.Series(np.asarray(values, dtype=float).ravel()), errors="coerce").to_numpy()
    v = v[np.isfinite(v) & (v > 0)]
    return bool(v.size) and float(v.max()) / float(v.min()) > DECADES


def _latency_unit(column: str) -> tuple[str, float]:
    return LATENCY_UNITS.get(column, ("seconds", 1.0))


def _layout(fig: go.Figure, title: str, y_title: str = "", x_title: str = "time (s)", height: int = 400) -> go.Figure:
    fig.update_layout(
        title=title, height=height, template="plotly_white", margin=dict(l=60, r=20, t=50, b=40),
        legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0.0),
        hovermode="x unified",
    )
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    return fig


# ----- one result -----------------------------------------------------------------------------

def memory_timeline(steps: pd.DataFrame, weights_bytes: float | None = None) -> go.Figure:
    """Stacked area: the KV pool split five ways over time, with the model weights as a band on top."""
    fig = go.Figure()
    t = steps["t_s"]
    for col, label, colour in BREAKDOWN:
        if col in steps:
            # no outline: an empty band (external fragmentation under paging) would paint its colour
            # along the top of the band below it and look like memory it is not
            fig.add_trace(go.Scatter(x=t, y=steps[col] / GIB, name=label, stackgroup="mem", mode="lines",
                                     line=dict(width=0, color=colour), fillcolor=colour))
    if weights_bytes:
        fig.add_trace(go.Scatter(x=t, y=np.full(len(t), weights_bytes / GIB), name="weights", stackgroup="mem",
                                 mode="lines", line=dict(width=0, color=WEIGHTS_COLOUR), fillcolor=WEIGHTS_COLOUR))
    return _layout(fig, "GPU memory over time (KV pool by use, weights on top)", "GiB")


def queue_and_batch(steps: pd.DataFrame) -> go.Figure:
    """Waiting requests above, running ones below, each on its own axis: a queue of a thousand must not
    flatten a batch of twenty. Running is a solid line; the batch of the latest step is dotted on top
    (it equals running between steps, so a solid line would hide running)."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=["waiting (queue)", "running"])
    panels = (("num_waiting", "waiting (queue)", "#ef4444", 1, "solid", 2),
              ("num_running", "running", "#2563eb", 2, "solid", 3),
              ("batch_size", "batch size (latest step)", "#10b981", 2, "dot", 2))
    for col, label, colour, row, dash, width in panels:
        if col in steps:
            fig.add_trace(go.Scatter(x=steps["t_s"], y=steps[col], name=label, mode="lines",
                                     line=dict(color=colour, dash=dash, width=width)), row=row, col=1)
    fig = _layout(fig, "Queue and running requests", height=460)
    fig.update_xaxes(title_text="", row=1, col=1)
    fig.update_yaxes(title_text="requests", row=1, col=1)
    fig.update_yaxes(title_text="requests", row=2, col=1)
    fig.update_layout(legend=dict(y=-0.15))
    return fig


def kv_usage(steps: pd.DataFrame) -> go.Figure:
    fig = go.Figure(go.Scatter(x=steps["t_s"], y=steps["kv_cache_usage_perc"] * 100, mode="lines",
                               name="KV cache usage", line=dict(color="#2563eb")))
    fig.update_yaxes(range=[0, 105])
    return _layout(fig, "KV cache usage (blocks or slots held)", "%")


def preemptions(steps: pd.DataFrame) -> go.Figure:
    """Preemptions per time bucket and their running total."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    counts = steps["num_preemptions"] if "num_preemptions" in steps else pd.Series(np.zeros(len(steps)))
    fig.add_trace(go.Bar(x=steps["t_s"], y=counts, name="per bucket", marker_color="#ef4444"))
    fig.add_trace(go.Scatter(x=steps["t_s"], y=counts.cumsum(), name="total", mode="lines",
                             line=dict(color="#1f2937")), secondary_y=True)
    return _layout(fig, "Preemptions", "preemptions")


def _ecdf(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(pd.to_numeric(values, errors="coerce").dropna().to_numpy())
    return v, (np.arange(1, len(v) + 1) / len(v)) if len(v) else np.array([])


def latency_cdfs(requests: pd.DataFrame, log_bounds: Mapping[str, Any] | None = None) -> go.Figure:
    """TTFT, TPOT and end-to-end latency CDFs side by side over completed requests (TPOT in ms, the others
    in seconds; an axis whose values span decades is logarithmic). `log_bounds` (the summary's
    interval_method.log_bounds) adds each curve's 90% band, drawn after the three curves."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[label for _, label in LATENCIES])
    bands = []
    for i, (col, label) in enumerate(LATENCIES, start=1):
        unit, scale = _latency_unit(col)
        if col in requests:
            x, y = _ecdf(requests[col])
            x = x * scale
            fig.add_trace(go.Scatter(x=x, y=y, name=label, mode="lines", line=dict(color=PALETTE[i - 1])), row=1, col=i)
            if log_bounds and col in log_bounds and len(x):
                bands.append((i, _band(x, y, log_bounds[col], label)))
            if spans_decades(x):
                fig.update_xaxes(type="log", row=1, col=i)
        fig.update_xaxes(title_text=unit + (" (log)" if col in requests and spans_decades(x) else ""), row=1, col=i)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    for i, band in bands:
        fig.add_trace(band, row=1, col=i)
    fig.update_layout(title="Latency CDFs (completed requests)" + (", shaded: 90% interval" if bands else ""),
                      height=340, template="plotly_white", showlegend=False, margin=dict(l=60, r=20, t=70, b=50))
    return fig


def _band(x: np.ndarray, y: np.ndarray, bounds: Any, label: str) -> go.Scatter:
    """The CDF shifted by the interval's log bounds, as one filled polygon (x x exp(lo) .. x x exp(hi))."""
    lo, hi = float(bounds[0]), float(bounds[1])
    xs = np.concatenate([x * np.exp(lo), (x * np.exp(hi))[::-1]])
    ys = np.concatenate([y, y[::-1]])
    return go.Scatter(x=xs, y=ys, fill="toself", mode="none", fillcolor="rgba(99, 110, 250, 0.15)",
                      name=f"{label} 90% interval", hoverinfo="skip")


# ----- several results (compare page) ---------------------------------------------------------

def overlay_timeline(named_steps: Mapping[str, pd.DataFrame], column: str, title: str, y_title: str,
                     scale: float = 1.0) -> go.Figure:
    """One line per scenario for one steps column (e.g. kv_cache_usage_perc, num_waiting); each scenario
    has its own colour and dash, so lines lying on top of one another stay visible."""
    fig = go.Figure()
    for i, (name, steps) in enumerate(named_steps.items()):
        if column in steps:
            fig.add_trace(go.Scatter(x=steps["t_s"], y=steps[column] * scale, name=name, mode="lines",
                                     line=dict(color=PALETTE[i % len(PALETTE)], dash=DASHES[i % len(DASHES)],
                                               width=2.5 if i == 0 else 2)))
    return _layout(fig, title, y_title)


def overlay_cdf(named_requests: Mapping[str, pd.DataFrame], column: str = "ttft_s") -> go.Figure:
    """One CDF per scenario over completed requests; a log x axis when the values span decades (a run
    at 3,000 s must not squash three runs at a few seconds into the y axis)."""
    label = dict(LATENCIES).get(column, column)
    unit, scale = _latency_unit(column)
    fig = go.Figure()
    every = []
    for i, (name, requests) in enumerate(named_requests.items()):
        if column in requests:
            x, y = _ecdf(requests[column])
            every.append(x * scale)
            fig.add_trace(go.Scatter(x=x * scale, y=y, name=name, mode="lines",
                                     line=dict(color=PALETTE[i % len(PALETTE)], dash=DASHES[i % len(DASHES)])))
    log = bool(every) and spans_decades(np.concatenate(every))
    fig = _layout(fig, f"{label} CDF (completed requests)", "fraction of requests", unit + (" (log)" if log else ""))
    if log:
        fig.update_xaxes(type="log")
    fig.update_layout(hovermode="closest")
    return fig


def breakdown_bars(named_summaries: Mapping[str, Mapping[str, Any]]) -> go.Figure:
    """Mean KV breakdown per scenario as 100% stacked bars (summary key kv_breakdown_mean)."""
    names = list(named_summaries)
    keys = ("token_states", "reserved", "internal_frag", "external_frag", "free")
    fig = go.Figure()
    totals = [sum(float(named_summaries[n].get("kv_breakdown_mean", {}).get(k) or 0) for k in keys) or 1.0 for n in names]
    for key, (_, label, colour) in zip(keys, BREAKDOWN, strict=True):
        values = [100 * float(named_summaries[n].get("kv_breakdown_mean", {}).get(key) or 0) / tot
                  for n, tot in zip(names, totals, strict=True)]
        fig.add_trace(go.Bar(x=names, y=values, name=label, marker_color=colour))
    fig.update_layout(barmode="stack")
    fig = _layout(fig, "Where the KV pool goes (time-averaged)", "% of KV capacity", "")
    fig.update_layout(hovermode="closest")
    return fig


# ----- traces ---------------------------------------------------------------------------------

def arrival_rate(trace_df: pd.DataFrame, buckets: int = 60) -> go.Figure:
    """Requests per second over time, in equal buckets across the trace."""
    arrival = trace_df["arrival_s"].to_numpy(dtype=float)
    end = float(arrival[-1]) if len(arrival) else 0.0
    width = max(end / buckets, 1e-9) if end > 0 else 1.0
    counts, edges = np.histogram(arrival, bins=max(1, min(buckets, len(arrival))), range=(0.0, max(end, width)))
    width = edges[1] - edges[0]
    fig = go.Figure(go.Bar(x=edges[:-1] + width / 2, y=counts / width, width=width, marker_color="#2563eb",
                           name="arrivals"))
    return _layout(fig, "Arrival rate", "requests / s")


def length_histograms(trace_df: pd.DataFrame) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=["input tokens", "output tokens"])
    fig.add_trace(go.Histogram(x=trace_df["input_tokens"], nbinsx=50, marker_color="#2563eb", name="input"), row=1, col=1)
    fig.add_trace(go.Histogram(x=trace_df["output_tokens"], nbinsx=50, marker_color="#10b981", name="output"),
                  row=1, col=2)
    fig.update_yaxes(title_text="requests", row=1, col=1)
    fig.update_xaxes(title_text="tokens")
    fig.update_layout(title="Request lengths", height=340, template="plotly_white", showlegend=False,
                      margin=dict(l=60, r=20, t=70, b=50))
    return fig


# ----- capacity planner -----------------------------------------------------------------------

def concurrency_curves(curves: pd.DataFrame, context_tokens: int | None = None) -> go.Figure:
    """Max concurrent sequences vs context length (log-log, ticks at 1, 10, 100, 1k); `curves` has columns
    label, context_tokens, max_concurrency. `context_tokens` marks the user's own context."""
    fig = go.Figure()
    for i, (label, part) in enumerate(curves.groupby("label", sort=False)):
        fig.add_trace(go.Scatter(x=part["context_tokens"], y=part["max_concurrency"], name=str(label),
                                 mode="lines+markers", line=dict(color=PALETTE[i % len(PALETTE)],
                                                                 dash=DASHES[i % len(DASHES)])))
    fig = _layout(fig, "Concurrent sequences that fit vs context length", "sequences (log)",
                  "context length per sequence, tokens (log)")
    fig.update_xaxes(type="log", dtick=1, tickformat="~s", minor=dict(showgrid=True))
    fig.update_yaxes(type="log", dtick=1, tickformat="~s", minor=dict(showgrid=True))
    if context_tokens:
        fig.add_vline(x=context_tokens, line=dict(color="#111827", dash="dash", width=1.5))
        # an annotation on a log axis is placed in log10 units (add_vline's own label is not: it lands off-chart)
        fig.add_annotation(x=math.log10(context_tokens), xref="x", y=1, yref="paper", yanchor="bottom",
                           text=f"your context: {context_tokens:,}", showarrow=False)
    fig.update_layout(hovermode="closest")
    return fig


def budget_pie(parts: Mapping[str, float], title: str = "GPU memory budget") -> go.Figure:
    """Where the HBM goes: weights, activations/overhead, KV, left unused (bytes -> GiB)."""
    labels: Sequence[str] = [k for k, v in parts.items() if v and v > 0]
    values = [parts[k] / GIB for k in labels]
    fig = go.Figure(go.Pie(labels=labels, values=values, hole=0.4, sort=False,
                           texttemplate="%{label}<br>%{value:.1f} GiB", marker=dict(colors=PALETTE)))
    fig.update_layout(title=title, height=360, template="plotly_white", margin=dict(l=20, r=20, t=50, b=20),
                      showlegend=False)
    return fig


def kv_groups_bar(parts: Mapping[str, Mapping[str, float]], title: str = "KV of one sequence by layer group") -> go.Figure:
    """One bar per KV group: what a sequence keeps vs what the same layers would keep holding every
    token (GiB). `parts`: {group label: {"kept": bytes, "all tokens": bytes}}."""
    labels = list(parts)
    fig = go.Figure()
    for i, key in enumerate(("kept", "all tokens")):
        fig.add_trace(go.Bar(y=labels, x=[parts[g][key] / GIB for g in labels], name=key, orientation="h",
                             marker=dict(color=PALETTE[i % len(PALETTE)])))
    fig = _layout(fig, title, "KV group", "GiB per sequence per GPU")
    fig.update_layout(barmode="group", height=160 + 60 * len(labels))
    return fig


GROUP_PART_NAMES = {"token_states": "token states", "reserved": "reserved (not yet written)",
                    "internal_frag": "internal fragmentation"}


def kv_group_breakdown(groups: Mapping[str, Mapping[str, float]], free_bytes: float = 0.0,
                       external_bytes: float = 0.0) -> go.Figure:
    """Mean KV pool per layer group (summary key kv_group_breakdown_mean): written token states,
    slots reserved for tokens still to come (contiguous runs) and held-but-never-written slots
    (fragmentation) of each group, stacked, with the shared free pages and the holes no waiting
    request fits (external fragmentation, contiguous runs) beside them (GiB): all bars add up to the pool."""
    labels = list(groups)
    parts = [p for p in ("token_states", "reserved", "internal_frag") if any(p in groups[g] for g in labels)]
    fig = go.Figure()
    for i, part in enumerate(parts):
        fig.add_trace(go.Bar(x=labels, y=[float(groups[g].get(part, 0)) / GIB for g in labels],
                             name=GROUP_PART_NAMES[part], marker=dict(color=PALETTE[i % len(PALETTE)])))
    if external_bytes:
        fig.add_trace(go.Bar(x=["external frag. (shared)"], y=[external_bytes / GIB], name="external fragmentation",
                             marker=dict(color="#8e6bbf")))
    if free_bytes:
        fig.add_trace(go.Bar(x=["free (shared)"], y=[free_bytes / GIB], name="free", marker=dict(color="#bbbbbb")))
    fig = _layout(fig, "KV pool by layer group (run mean)", "GiB", "KV group")
    fig.update_layout(barmode="stack")
    return fig

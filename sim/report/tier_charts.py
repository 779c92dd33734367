"""The KV tiers' chart: bytes held in the GPU pool and in each lower tier over a run, stacked
(summary key `tier_occupancy_series`, docs/TIERS.md). Only runs with KV tiers have it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sim.report.charts import _layout

GIB = float(1 << 30)
COLOURS = {"gpu": "#2563eb", "cpu": "#10b981", "nvme": "#f59e0b", "remote": "#8b5cf6"}


def tier_occupancy(summary: Mapping[str, Any], steps: pd.DataFrame) -> go.Figure | None:
    """Stacked area: KV bytes in use in the GPU pool (token states + internal fragmentation, from the
    steps frame, on the tiers' sample times), then each lower tier instance. None without tiers."""
    series = summary.get("tier_occupancy_series")
    if not isinstance(series, Mapping) or not series.get("t_s"):
        return None
    t = np.asarray(series["t_s"], dtype=float)
    fig = go.Figure()
    if {"t_s", "token_states_bytes", "internal_frag_bytes"} <= set(steps.columns) and len(steps):
        used = (steps["token_states_bytes"] + steps["internal_frag_bytes"]).to_numpy(dtype=float)
        gpu = np.interp(t, steps["t_s"].to_numpy(dtype=float), used)
        pd_fleet = any(str(name).startswith("decode/") for name in series)  # a P/D fleet's steps frame is its decode pool's
        label = "decode GPU pool (in use)" if pd_fleet else "GPU pool (in use)"
        fig.add_trace(go.Scatter(x=t, y=gpu / GIB, name=label, stackgroup="tiers", mode="lines",
                                 line=dict(width=0, color=COLOURS["gpu"]), fillcolor=COLOURS["gpu"]))
    for name, values in series.items():
        if name == "t_s":
            continue
        colour = next((COLOURS[part] for part in str(name).split("/") if part in COLOURS), "#64748b")  # "decode/cpu/replica0" too
        fig.add_trace(go.Scatter(x=t, y=np.asarray(values, dtype=float) / GIB, name=str(name), stackgroup="tiers",
                                 mode="lines", line=dict(width=0, color=colour), fillcolor=colour))
    return _layout(fig, "KV held per tier over time (GPU pool, CPU DRAM, NVMe, remote store)", "GiB")

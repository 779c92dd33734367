"""The Validate page's logic: read a measured vLLM run (bundled sample, a .zip or the files), replay
it with its own engine config (sim.fidelity.validate) and show measured vs simulated side by side."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from sim.fidelity.validate import SERIES
from sim.report import charts
from ui.runner import run_validate
from ui.validate_job import Files, Shown, files_digest

UNITS = {"TTFT": ("s", 1.0), "E2E": ("s", 1.0), "TPOT": ("ms", 1e3)}


def read_uploads(files: list[Any]) -> tuple[tuple[str, bytes], ...]:
    """(name, bytes) of the uploaded files, sorted by name (a stable cache key)."""
    return tuple(sorted((f.name, f.getvalue()) for f in files))


def validate_files(files: Files | None) -> Shown:
    """The replay of `files` (None: the bundled sample) from the server's worker pool: computed once
    per distinct upload for every visitor, with a progress bar, its place in line and a cancel button."""
    return run_validate(files, files_digest(files))


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison in readable units: seconds, milliseconds for TPOT, errors in percent."""
    rows = []
    for r in table.itertuples():
        unit, scale = UNITS.get(r.metric, ("", 1.0))
        label = f"{r.metric} ({unit})" if unit else r.metric
        rows.append({"metric": label, "stat": r.stat, "measured": round(r.measured * scale, 2),
                     "simulated": round(r.simulated * scale, 2), "error": f"{r.error:+.1%}"})
    return pd.DataFrame(rows)


def show(shown: Shown) -> None:
    cm = shown.cost_model
    st.subheader(f"Run {shown.source}")
    st.caption(shown.engine)
    st.caption(f"Step times: {cm.get('source')}" + (f" ({cm['detail']})" if cm.get("detail") else ""))
    means = shown.table[shown.table["stat"] == "mean"]
    cols = st.columns(len(means))
    for col, r in zip(cols, means.itertuples(), strict=True):
        unit, scale = UNITS.get(r.metric, ("", 1.0))
        col.metric(f"{r.metric} mean, simulated", f"{r.simulated * scale:,.2f} {unit}".strip(),
                   f"{r.error:+.1%} vs measured", delta_color="off")
    st.dataframe(display_table(shown.table), hide_index=True)
    series = shown.series
    named = {who: series.rename(columns={f"{who}_{col}": col for col, _ in SERIES}) for who in ("measured", "simulated")}
    left, right = st.columns(2)
    left.plotly_chart(charts.overlay_timeline(named, "num_running", "Running requests", "requests"), key="val-run")
    right.plotly_chart(charts.overlay_timeline(named, "num_waiting", "Waiting requests", "requests"), key="val-wait")
    st.plotly_chart(charts.overlay_timeline(named, "kv_cache_usage_perc", "KV cache usage", "% of blocks", 100.0),
                    key="val-kv")
    requests = {"measured": shown.measured, "simulated": shown.simulated}
    left, right = st.columns(2)
    left.plotly_chart(charts.overlay_cdf(requests, "ttft_s"), key="val-ttft")
    right.plotly_chart(charts.overlay_cdf(requests, "tpot_s"), key="val-tpot")

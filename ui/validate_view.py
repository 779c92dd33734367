"""The Validate page's logic: read a measured vLLM run (bundled sample, a .zip or the files), replay
it with its own engine config (sim.fidelity.validate) and show measured vs simulated side by side."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from sim.fidelity.run_record import RUN_FILES, RunError, load_run_bytes, load_run_dir, load_run_zip
from sim.fidelity.validate import SERIES
from sim.out import charts
from ui.pages import ROOT

SAMPLE_RUN = ROOT / "samples" / "vllm_run"
UNITS = {"TTFT": ("s", 1.0), "E2E": ("s", 1.0), "TPOT": ("ms", 1e3)}


@dataclass
class Shown:
    """What the page shows of one validation (all picklable, for st.cache_data)."""

    source: str
    engine: str
    cost_model: dict[str, Any]
    table: pd.DataFrame
    series: pd.DataFrame
    measured: pd.DataFrame
    simulated: pd.DataFrame


def read_uploads(files: list[Any]) -> tuple[tuple[str, bytes], ...]:
    """(name, bytes) of the uploaded files, sorted by name (a stable cache key)."""
    return tuple(sorted((f.name, f.getvalue()) for f in files))


@st.cache_data(max_entries=8, show_spinner=False)
def validate_files(files: tuple[tuple[str, bytes], ...] | None, digest: str) -> Shown:
    """Replay a run given as uploaded files (a .zip, or the three files and config.json); None = the sample.
    `digest` keys the cache (the bytes' hash), so reruns of the page cost nothing."""
    from sim.fidelity.validate import validate

    if files is None:
        run = load_run_dir(SAMPLE_RUN)
    elif len(files) == 1 and files[0][0].lower().endswith(".zip"):
        run = load_run_zip(files[0][1], files[0][0])
    else:
        named = {name.rsplit("/", 1)[-1]: data for name, data in files}
        missing = [f for f in RUN_FILES if f not in named]
        if missing:
            raise RunError(f"upload: add {', '.join(missing)} (or one .zip holding the run's files)")
        run = load_run_bytes(named["meta.json"], named["requests.jsonl"], named["timeseries.csv"],
                             named.get("config.json"), source="upload")
    v = validate(run)
    e = run.engine
    engine = (f"{e.device_name}, {e.model}, TP {e.tp}, vLLM {e.vllm_version or '?'}: {e.num_gpu_blocks:,} KV blocks of "
              f"{e.block_size}, max_num_seqs {e.max_num_seqs}, max_num_batched_tokens {e.max_batched_tokens}")
    return Shown(run.source, engine, v.result.summary["cost_model"], v.table, v.series, run.requests,
                 v.result.requests)


def files_digest(files: tuple[tuple[str, bytes], ...] | None) -> str:
    h = hashlib.sha256()
    for name, data in files or ():
        h.update(name.encode())
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


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

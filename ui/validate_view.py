"""The Validate page's logic: read a measured vLLM run (bundled sample, a .zip or the files), replay
it with its own engine config (sim.fidelity.validate) and show measured vs simulated side by side."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from sim.fidelity.validate import SERIES
from sim.report import charts
from ui.runner import run_validate
from ui.validate_job import Files, Overrides, Shown, files_digest  # noqa: F401  (files_digest: the page keys the fit by it)

FLAG_FIELDS = {"--gpu": "the GPU", "--model": "the model", "--num-gpu-blocks": "the KV blocks"}
UNITS = {"TTFT": ("s", 1.0), "E2E": ("s", 1.0), "TPOT": ("ms", 1e3)}


def read_uploads(files: list[Any]) -> tuple[tuple[str, bytes], ...]:
    """(name, bytes) of the uploaded files, sorted by name (a stable cache key)."""
    return tuple(sorted((f.name, f.getvalue()) for f in files))


def validate_files(files: Files | None, overrides: Overrides = (), fit: bool = False) -> Shown:
    """The replay of `files` (None: the bundled sample) from the server's worker pool: computed once
    per distinct upload (and engine overrides, and fit) for every visitor, with a progress bar, its
    place in line and a cancel button."""
    from sim.fidelity.run_record import RunError

    try:
        return run_validate(files, files_digest(files, overrides, fit), overrides, fit)
    except RunError as exc:  # the CLI's flags are this page's Engine fields
        text = str(exc)
        for flag, field in FLAG_FIELDS.items():
            text = text.replace(f"give {flag}", f"set {field} under 'Engine'")
        raise RunError(text) from None


def engine_form() -> Overrides:
    """What the run's files may not say: the GPU (never in a benchmark file, nor in `sim observe`'s
    record unless given), the model, the KV pool. Empty fields keep what the run says or assumes."""
    from models.gpus import list_gpus

    with st.expander("Engine: what the run's files do not say (GPU, model, KV blocks)"):
        c1, c2, c3 = st.columns(3)
        gpu = c1.selectbox("GPU", ["(from the run)", *list_gpus()], key="val_gpu")
        model = c2.text_input("Model (catalog name or HF id)", "", key="val_model", max_chars=200).strip()
        blocks = c3.number_input("KV blocks (0 = from the run / vLLM's accounting)", 0, 1 << 24, 0, key="val_blocks")
    out: list[tuple[str, Any]] = []
    if gpu != "(from the run)":
        out.append(("gpu", gpu))
    if model:
        out.append(("model", model))
    if blocks:
        out.append(("num_gpu_blocks", int(blocks)))
    return tuple(out)


def show_provenance(shown: Shown) -> None:
    """How the run was measured and what had to be assumed, before the figures."""
    if shown.observed:
        o = shown.observed
        fails = ", ".join(f"{n} {k}" for k, n in sorted((o.get("failures") or {}).items()))
        st.caption(f"Observed by `sim observe` at {o.get('url')} ({o.get('started_utc')}): {o.get('completed')} of "
                   f"{o.get('planned')} requests completed" + (f", failed: {fails}" if fails else "")
                   + (", interrupted" if o.get("interrupted") else "") + f"; {o.get('scrapes')} /metrics samples; "
                   "client-side times.")
    elif shown.failed:
        st.caption(f"{shown.failed} requests failed in the run and are left out.")
    if shown.assumed:
        st.caption("Assumed (not in the run's files; set them under Engine): "
                   + "; ".join(f"{k} = {v}" for k, v in shown.assumed.items()))


def fidelity_lines(shown: Shown) -> list[str]:
    """The KV pool vLLM's accounting predicts beside the measured one, and how many measured windows
    fall inside the simulated 90% intervals (docs/CALIBRATION.md)."""
    out = []
    p = shown.pool or {}
    if p.get("predicted") is not None:
        out.append(f"KV pool: {p['measured']:,} blocks measured, {p['predicted']:,} by vLLM {p['vllm_version']}'s "
                   f"start-up accounting ({p['error']:+.1%}); the replay uses the measured pool.")
    c = shown.coverage or {}
    if c.get("windows"):
        out.append(f"Intervals ({c['method']}, nominal {c['level']:.0%}): {c['inside']} of {c['windows']} measured "
                   f"10-request window means fall inside ({c['inside'] / c['windows']:.0%}).")
    return out


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
    for line in fidelity_lines(shown):
        st.caption(line)
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
    c1, c2, c3 = st.columns(3)
    c1.plotly_chart(charts.overlay_cdf(requests, "ttft_s"), key="val-ttft")
    c2.plotly_chart(charts.overlay_cdf(requests, "tpot_s"), key="val-tpot")
    c3.plotly_chart(charts.overlay_cdf(requests, "e2e_s"), key="val-e2e")


def show_profile(shown: Shown) -> None:
    """The profile fitted on the run: its fit, a download, and the switch that makes every page use it."""
    from ui import fitted_profile

    prof = shown.profile
    if prof is None:
        return
    fit = prof.get("fit", {})
    st.success(f"Profile fitted by {fit.get('replays')} replays: memory/decode x {fit.get('memory_scale', 0):.3g}, "
               f"compute/prefill x {fit.get('compute_scale', 0):.3g} of the roofline (squared log error "
               f"{fit.get('squared_log_error', 0):.3g}).")
    c1, c2 = st.columns(2)
    c1.download_button("Download the profile (JSON)", fitted_profile.profile_bytes(prof), "kvsim_profile.json",
                       "application/json", key="val-profile-dl")
    if c2.button("Use it in every page's step times", key="val-profile-use"):
        fitted_profile.activate(prof, shown.source.rsplit("/", 1)[-1])
        st.info("The scenario sidebar now times steps with this profile (untick it there to stop).")

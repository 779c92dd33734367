"""What the GPU run page draws: the live panel of a run in flight, each measured run beside its
simulation, and the reference experiments. The page (app_pages/gpu_run.py) is the widgets and these
calls; the run itself is ui/server/gpu_job.py, the labels ui/gpu_view.py.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from gpu_backend import telemetry
from sim.report import charts
from sim.run.metrics import SimResult
from sim.scenario import Scenario
from sim.trace import Trace
from ui import gpu_view
from ui.page_errors import stop_on_error
from ui.server.gpu_job import GpuRuns, experiment


@st.fragment(run_every=1.0)
def live(job: GpuRuns) -> None:
    """Progress, device memory and the step chart of the run in flight, every second; one rerun
    of the whole page when it finishes (the results below need it)."""
    if job.thread is None:
        return
    log = list(job.log)
    if not job.done:
        st.progress(float(job.frac), text=gpu_view.progress_text(log))
    sample = telemetry.read_now()
    if np.isfinite(sample.nvml_used_bytes):
        st.metric("GPU memory used (NVML)", f"{sample.nvml_used_bytes / 2**30:.2f} GiB")
    if log:
        st.line_chart(gpu_view.live_frame(log), x="Time (s)", y=["KV blocks in use", "Requests in the batch"],
                      height=220)
    if job.done and job.result is None and job.error:
        st.error(job.error)
    if job.done and not job.shown:
        job.shown = True
        st.rerun()


def measured_vs_simulated(label: str, result: SimResult, trace: Trace) -> None:
    """One measured run beside the simulation of the same requests: error table, timelines, CDFs."""
    from gpu_backend.overlay import overlay_table, simulate_like, times_not_comparable

    with stop_on_error("simulation failed", (Exception,)):
        sim = simulate_like(result, trace, bool(result.summary.get("offline")))
    m = result.summary
    st.subheader(f"Measured by {label} vs simulated")
    apart = times_not_comparable(m, result.scenario)
    if apart:
        st.info(apart)
    elif result.scenario.profile is None:
        st.caption(f"The simulation uses the roofline for {result.scenario.gpu}; calibrate it with "
                   "`python -m gpu_backend profile` and set the profile for a like-for-like time comparison.")
    st.dataframe(gpu_view.overlay_display(overlay_table(m, sim.summary, times=apart is None)), hide_index=True)
    if m.get("measured_by") == "vLLM":
        st.caption(f"vLLM {m['vllm_version']} on CPU: {m['num_blocks']} KV blocks of {m['block_size']} tokens; "
                   f"engine start {m['engine_start_s']:.1f} s (not in the timings)")
    else:
        st.caption(f"KV pool {m['kv_pool_bytes']:,} bytes, {m['num_blocks']} blocks (+1 padding), attention "
                   f"{m['attention']}, device {m['device']}")
    named = {f"measured: {label}": result.steps, "simulated": sim.steps}
    a, b = st.columns(2)
    a.plotly_chart(charts.overlay_timeline(named, "blocks_in_use", "KV blocks in use", "blocks"), key=f"gpu_blk_{label}")
    b.plotly_chart(charts.overlay_timeline(named, "batch_size", "Batch size", "requests"), key=f"gpu_bs_{label}")
    if "mem_allocated_bytes" in result.steps and result.steps["mem_allocated_bytes"].notna().any():
        st.plotly_chart(charts.overlay_timeline({"torch allocated": result.steps}, "mem_allocated_bytes",
                                                "Measured GPU memory", "GiB", scale=1 / 2**30), key=f"gpu_mem_{label}")
    reqs = {f"measured: {label}": result.requests, "simulated": sim.requests}
    if apart:  # latency CDFs of two devices say nothing about the simulator
        return
    for col, key in zip(st.columns(3), ("ttft_s", "tpot_s", "e2e_s"), strict=True):
        col.plotly_chart(charts.overlay_cdf(reqs, key), key=f"gpu_cdf_{key}_{label}")


def experiments(scenario: Scenario, device: str, dtype: str) -> None:
    """The reference experiments (gpu_backend/experiments.py), one at a time, on this device."""
    from gpu_backend.experiments import EXPERIMENTS

    st.subheader("Reference experiments, measured on this device")
    name = st.selectbox("Experiment", list(EXPERIMENTS), key="gpu_preset")
    st.caption(EXPERIMENTS[name].description)
    if not st.button("Run experiment", key="gpu_preset_go"):
        return
    with st.spinner(f"{name} on {device}"), stop_on_error(errors=(Exception,)):
        df = experiment(name, scenario, device, dtype)
    if df is None:
        st.warning("Another GPU run is in progress on this server; try again when it has finished.")
        return
    st.dataframe(df, hide_index=True)
    fig = gpu_view.experiment_figure(EXPERIMENTS[name], df)
    if fig is not None:
        st.plotly_chart(fig, key="gpu_preset_fig")

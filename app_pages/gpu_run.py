"""GPU run page: replay the current trace + scenario on a real model, live, then overlay it on the simulation.

Thin view: gpu_backend.executor does the run (in a background thread so the page stays live),
sim.run.engine the simulation, sim.out.charts the figures, gpu_backend.profile the article presets.
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import plotly.express as px
import streamlit as st

from gpu_backend import telemetry
from sim.out import charts

st.title("GPU run")
status = telemetry.gpu_status()
has_cuda = telemetry.cuda_available()
if status.present:
    st.success(f"GPU: {status.message}")
else:
    st.info(f"{status.message}. Runs use the CPU with a tiny model: slow, but the same code path.")

try:
    from ui.scenario_form import scenario_sidebar
    from ui.trace_picker import pick_trace

    trace = pick_trace("sidebar")
    scenario = scenario_sidebar()
except Exception as exc:  # noqa: BLE001 - shared widgets missing or failing: say so, never a traceback
    st.error(f"scenario widgets unavailable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    st.stop()
if trace is None or scenario is None:
    st.info("Choose a trace and a valid scenario in the sidebar.")
    st.stop()

c1, c2, c3, c4 = st.columns(4)
device = c1.selectbox("Device", ["cuda", "cpu"] if has_cuda else ["cpu"], key="gpu_device")
dtype = c2.selectbox("Model dtype", ["bf16", "fp16", "fp32"] if device == "cuda" else ["fp32", "bf16"], key="gpu_dtype")
max_req = c3.number_input("First N requests", 1, 100_000, 200 if device == "cuda" else 12, key="gpu_n")
offline = c4.checkbox("Offline (all at t=0)", value=device == "cpu", key="gpu_offline")
tiny = device == "cpu" and st.checkbox("Use the tiny test model on CPU (tiny-llama)", value=True, key="gpu_tiny")
run_scenario = scenario.replace(model="tiny-llama", kv_heads=None) if tiny else scenario
if device == "cpu" and run_scenario.kv_budget_gib is None:
    st.caption("No KV budget set: the CPU run uses a 64 MiB pool.")
run_trace = trace.with_df(trace.df.head(int(max_req)).copy(), f"first:{int(max_req)}") \
    if len(trace) > max_req else trace

state = st.session_state.setdefault("gpu_run", {})


def _start() -> None:
    from gpu_backend.executor import RunConfig, run

    log: list = []
    state.update(log=log, result=None, error=None, done=False, frac=0.0, offline=offline)

    def progress(frac: float) -> None:
        state["frac"] = frac

    def work() -> None:
        try:
            cfg = RunConfig(device=device, dtype=dtype, offline=offline, seed=run_scenario.seed)
            state["result"] = run(run_trace, run_scenario, cfg, on_step=log.append, progress=progress)
        except Exception as exc:  # noqa: BLE001 - shown as one line on the page
            state["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        finally:
            state["done"] = True

    state["thread"] = threading.Thread(target=work, name="kvsim-gpu-run", daemon=True)
    state["thread"].start()


running = bool(state.get("thread")) and not state.get("done", True)
if st.button("Run on " + device, type="primary", disabled=running, key="gpu_go"):
    _start()


@st.fragment(run_every=1.0)
def live() -> None:
    if not state.get("thread"):
        return
    log = list(state.get("log", []))
    if not state.get("done"):
        st.progress(float(state.get("frac", 0.0)),
                    text=f"{len(log)} steps, blocks in use {log[-1][7] if log else 0}")
    sample = telemetry.read_now()
    if np.isfinite(sample.nvml_used_bytes):
        st.metric("GPU memory used (NVML)", f"{sample.nvml_used_bytes / 2**30:.2f} GiB")
    if log:
        df = pd.DataFrame(log).iloc[:, [2, 3, 7]]
        df.columns = ["t_s", "batch_size", "blocks_in_use"]
        st.line_chart(df, x="t_s", y=["blocks_in_use", "batch_size"], height=220)
    if state.get("done") and state.get("result") is None and state.get("error"):
        st.error(state["error"])


live()

result = state.get("result") if state.get("done") else None
if result is not None:
    from sim.run.engine import simulate

    try:
        sim_trace = run_trace
        if state.get("offline"):  # the measured run ignored arrival times: so does the simulation
            sim_trace = run_trace.with_df(run_trace.df.assign(arrival_s=0.0), "offline")
        sim = simulate(sim_trace, result.scenario)
    except Exception as exc:  # noqa: BLE001
        st.error(f"simulation failed: {str(exc).splitlines()[0]}")
        st.stop()
    m, s = result.summary, sim.summary
    st.subheader("Measured vs simulated")
    if result.scenario.profile is None:
        st.caption(f"The simulation uses the roofline for {result.scenario.gpu}; calibrate it with "
                   "`python -m gpu_backend profile` and set the profile for a like-for-like time comparison.")

    def err(a, b):
        return None if a is None or b in (None, 0) else (a - b) / b

    rows = []
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        for stat in ("mean", "p50", "p90"):
            rows.append((f"{key} {stat}", m[key][stat], s[key][stat]))
    for key in ("throughput_tok_s", "mean_batch_size", "num_preemptions"):
        rows.append((key, m[key], s[key]))
    rows.append(("peak KV usage", m["kv_cache_usage_perc"]["peak"], s["kv_cache_usage_perc"]["peak"]))
    table = pd.DataFrame(rows, columns=["metric", "measured", "simulated"])
    table["error"] = [err(a, b) for _, a, b in rows]
    st.dataframe(table, hide_index=True)
    st.caption(f"KV pool {m['kv_pool_bytes']:,} bytes, {m['num_blocks']} blocks (+1 padding), attention "
               f"{m['attention']}, device {m['device']}")
    named = {"measured": result.steps, "simulated": sim.steps}
    a, b = st.columns(2)
    a.plotly_chart(charts.overlay_timeline(named, "blocks_in_use", "KV blocks in use", "blocks"), key="gpu_blk")
    b.plotly_chart(charts.overlay_timeline(named, "batch_size", "Batch size", "requests"), key="gpu_bs")
    if result.steps["mem_allocated_bytes"].notna().any():
        st.plotly_chart(charts.overlay_timeline({"torch allocated": result.steps}, "mem_allocated_bytes",
                                                "Measured GPU memory", "GiB", scale=1 / 2**30), key="gpu_mem")
    reqs = {"measured": result.requests, "simulated": sim.requests}
    for col, key in zip(st.columns(3), ("ttft_s", "tpot_s", "e2e_s"), strict=True):
        col.plotly_chart(charts.overlay_cdf(reqs, key), key=f"gpu_cdf_{key}")

st.divider()
st.subheader("Article 000 experiments, measured here")
from gpu_backend.profile import ARTICLE_PRESETS, run_article_preset  # noqa: E402

name = st.selectbox("Experiment", list(ARTICLE_PRESETS), key="gpu_preset")
st.caption(ARTICLE_PRESETS[name])
if st.button("Run experiment", key="gpu_preset_go"):
    from gpu_backend.executor import RunConfig

    base = run_scenario if run_scenario.kv_budget_gib else run_scenario.replace(kv_budget_gib=0.002)
    with st.spinner(f"{name} on {device}"):
        try:
            df = run_article_preset(name, base, RunConfig(device=device, dtype=dtype, offline=True))
        except Exception as exc:  # noqa: BLE001
            st.error(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            st.stop()
    st.dataframe(df, hide_index=True)
    if "kv_bytes_formula" in df:
        x = df.columns[0]
        st.plotly_chart(px.line(df, x=x, y=["kv_bytes_measured", "kv_bytes_formula"], markers=True,
                                title=f"{name}: measured vs formula"), key="gpu_preset_fig")
    elif "step_s" in df:
        st.plotly_chart(px.scatter(df, x="new_tokens", y="step_s", color="kind", log_x=True,
                                   title="Step time: prefill vs decode"), key="gpu_preset_fig")

"""Plan page (the landing page): how many users fit under an SLO, at what cost, and what binds."""

import streamlit as st

from ui.bounded import show_link_problems
from ui.page_errors import stop_on_error
from ui.plan_view import (
    MAX_AUTO_CONFIGS,
    drill_down,
    open_on_simulate,
    pick_row,
    search_form,
    search_may_start,
    show_plan,
    simulate_query,
    workload_line,
)
from ui.result_view import show_result
from ui.runner import run_search
from ui.trace_picker import pick_trace

st.title("Plan: how many users fit, at what cost, and why not more")
st.caption("For each configuration, the largest arrival rate at which a simulated replay of the workload meets "
           "every SLO (found to within 2%, each next rate read off how close the last runs came), its throughput per "
           "GPU and per user, its cost, and the limit that binds there (docs/PLAN.md).")
st.subheader("1. Workload: a trace of your traffic")  # the first hour's path: trace, model and GPUs, SLOs, answer
trace = pick_trace("main")
if trace is not None:
    st.caption(workload_line(trace))
form = search_form()
show_link_problems()
if trace is None or form is None:
    st.stop()
configs, options = form
st.subheader("4. The answer")
if len(configs) > MAX_AUTO_CONFIGS and not st.button(f"Search {len(configs)} configurations", key="plan_go"):
    st.info(f"{len(configs)} configurations: press the button to search them.")
    st.stop()
if not search_may_start(trace, configs, options):
    st.stop()
with stop_on_error():
    plan = run_search(trace, configs, options)
plan = show_plan(plan)
index = pick_row(plan)
if index is None:
    st.stop()
st.subheader("The chosen configuration at its largest rate")
with stop_on_error():
    snap = drill_down(trace, plan, index)
query = simulate_query(plan["rows"][index], st.query_params.to_dict())
if query is not None:  # same tab, same session: the trace (an upload by its server-side id), scenario and load
    open_on_simulate(query)
show_result(snap, key="plan")

"""Simulate page: one trace through one scenario; memory, queue and latency over time."""

import streamlit as st

from ui.bounded import show_input_problems, show_link_problems
from ui.page_errors import stop_on_error
from ui.result_view import reproduce_line, run_caption, show_result
from ui.runner import run_scenario
from ui.scenario_form import apply_changes, scenario_sidebar
from ui.trace_picker import pick_trace

st.title("Simulate")
trace = pick_trace("sidebar")
scenario = scenario_sidebar()
show_link_problems()
if trace is None or scenario is None:
    show_input_problems("Choose a trace and a valid scenario in the sidebar.")
    st.stop()

st.caption(run_caption(scenario, trace.source, len(trace)))
with stop_on_error():
    snap = run_scenario(trace, scenario)
show_result(snap, key="sim", apply_fix=apply_changes)
st.caption(reproduce_line(trace.digest(), scenario))

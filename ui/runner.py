"""Run a scenario on a trace for a page: through the server's worker pool, with progress and a place in line.

The run itself happens in ui/server/pool.py's worker processes, keyed by (trace digest, scenario
JSON): the same link opened twice, by two people or from two pages, is simulated once; the label
a page shows is not part of the key. This thread only polls and draws: a progress bar while the
run goes, its place in line while it waits, and a button that releases a queued run.
"""

from __future__ import annotations

import hashlib
import time

import streamlit as st

from sim.out.snapshot import Snapshot
from sim.scenario import Scenario
from sim.trace import Trace
from ui.server.pool import RunService, ServiceStats, run_key

POLL_S = 0.1


@st.cache_resource(show_spinner=False)
def run_service() -> RunService:
    """One pool per server process, shared by every session."""
    return RunService.from_env()


def server_stats() -> ServiceStats:
    return run_service().stats()


def run_scenario(trace: Trace, scenario: Scenario, label: str = "Simulating") -> Snapshot:
    """The result view for this trace and scenario; raises what the run raised (one-line user errors)."""
    service = run_service()
    key = run_key(trace, scenario)
    cancel_key = "cancel-run-" + hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    if st.session_state.get(cancel_key):  # clicked during the previous script run, which that click ended
        st.info(f"{label}: cancelled. Change a setting or reload the page to run it again.")
        st.stop()
    service.submit(trace, scenario)
    state = service.state(key)
    if state.phase == "done" and state.snapshot is not None:
        return state.snapshot
    bar = st.progress(0.0, text=f"{label}: starting")
    cancel = st.empty()
    finished = button_drawn = False
    try:
        while True:
            state = service.state(key)
            if state.phase == "done" and state.snapshot is not None:
                finished = True
                return state.snapshot
            if state.phase == "failed" and state.error is not None:
                finished = True
                raise state.error
            if state.phase == "gone":  # released by every watcher: submit again
                service.submit(trace, scenario)
            elif state.phase == "queued":
                bar.progress(0.0, text=f"{label}: queued, number {state.place} in line for a simulation worker")
                if not button_drawn:  # one widget per script run; a click ends this run and reruns the page
                    cancel.button("Cancel this queued run", key=cancel_key)
                    button_drawn = True
            else:
                bar.progress(state.fraction, text=f"{label}: {int(100 * state.fraction)}% of the trace")
            time.sleep(POLL_S)
    finally:
        bar.empty()
        cancel.empty()
        if not finished:  # the visitor left, changed a setting or cancelled: stop watching
            service.release(key)

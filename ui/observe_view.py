"""The GPU run page's "measure on my server (URL)": the form, the live counts, and the result drawn as
the Validate page draws a run (ui/validate_view.py). The work is ui/server/observe_job.py."""

from __future__ import annotations

import os

import streamlit as st

from sim.scenario import Scenario
from sim.trace import Trace
from ui.server.observe_job import ServerRun

ENV = "KVSIM_OBSERVE_URLS"  # "on": allow it on a dashboard that listens beyond loopback


def allowed() -> bool:
    """On a dashboard reachable from other machines the form would let visitors send traffic to any URL
    the server can reach; it is then off unless the operator sets KVSIM_OBSERVE_URLS=on."""
    from ui.server_notice import warn_if_exposed

    return not warn_if_exposed() or os.environ.get(ENV, "").strip().lower() in ("on", "1", "true", "yes")


def measure_on_my_server(trace: Trace, scenario: Scenario) -> None:
    st.subheader("Measure on my server (URL)")
    if not allowed():
        st.info(f"Measuring a server from this dashboard is off: it listens beyond this machine ({ENV}=on allows it).")
        return
    st.caption("Your own vLLM (or OpenAI-compatible) server replays the same requests at their arrival times, as "
               "`python -m sim observe` does (docs/VALIDATE.md); the record is then replayed by the simulator with the "
               "sidebar's GPU, model and scheduler limits as the server's, and shown side by side.")
    c1, c2 = st.columns([3, 2])
    url = c1.text_input("Server URL", "", key="obs_url", placeholder="http://127.0.0.1:8000", max_chars=300).strip()
    served = c2.text_input("Served model name (empty: the server's first)", "", key="obs_model", max_chars=300).strip()
    job: ServerRun = st.session_state.setdefault("obs_run", ServerRun())
    go = st.button(f"Measure {len(trace)} requests on {url or 'the server'}", key="obs_go",
                   disabled=job.running or not url)
    if go and not job.start(url, served or None, trace, scenario):
        st.warning("Another measurement is in progress on this dashboard; start yours when it has finished.")
    _live(job)
    if job.done and job.result is not None:
        from ui import validate_view

        validate_view.show_provenance(job.result)
        validate_view.show(job.result)


@st.fragment(run_every=1.0)
def _live(job: ServerRun) -> None:
    if job.thread is None:
        return
    if not job.done:
        done = job.completed + job.failed
        st.progress(done / max(job.planned, 1), text=f"{job.completed} of {job.planned} requests answered"
                    + (f", {job.failed} failed" if job.failed else ""))
    for note in job.notes[-3:]:
        st.caption(note)
    if job.done and job.error:
        st.error(job.error)
    if job.done and not job.shown:
        job.shown = True
        st.rerun()

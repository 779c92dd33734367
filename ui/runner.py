"""Run a scenario on a trace once per (trace digest, scenario) and keep the downsampled view.

The st.cache_data key is the trace digest and the scenario's JSON (both content hashes), so the
same link opened twice, or by two people, or the same scenario from two pages, reuses one run; the
Trace object and the progress label are not hashed (leading underscore: Streamlit skips them).
The progress bar is created inside the cached function (Streamlit replays elements made there)
and emptied before it returns, so a cache hit shows nothing stale.
"""

from __future__ import annotations

import streamlit as st

from sim.out.snapshot import Snapshot
from sim.scenario import Scenario
from sim.trace import Trace


@st.cache_data(show_spinner=False, max_entries=64)
def _run(trace_digest: str, scenario_json: str, _label: str, _trace: Trace) -> Snapshot:
    from sim.run.engine import simulate  # imported late: the engine is the heavy part

    scenario = Scenario.from_json(scenario_json)
    label = _label
    bar = st.progress(0.0, text=label)
    shown = [0]

    def progress(fraction: float) -> None:
        pct = int(100 * min(max(float(fraction), 0.0), 1.0))
        if pct >= shown[0] + 5:  # a few updates, not thousands
            shown[0] = pct
            bar.progress(pct / 100, text=f"{label}: {pct}% of the trace")

    try:
        result = simulate(_trace, scenario, progress=progress)
    finally:
        bar.empty()
    return Snapshot.from_result(result, _trace)


def run_scenario(trace: Trace, scenario: Scenario, label: str = "Simulating") -> Snapshot:
    """The result view for this trace and scenario, with a progress bar while a new run goes."""
    return _run(trace.digest(), scenario.to_json(), label, trace)

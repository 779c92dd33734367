"""Run a scenario (or a Plan search) for a page: through the server's worker pool, with progress and a place in line.

The work itself happens in ui/server/pool.py's worker processes, keyed by what determines its
answer (trace digest and scenario JSON; for a search, the grid and options too): the same link
opened twice, by two people or from two pages, is computed once; the label a page shows is not
part of the key. This thread only polls and draws: a progress bar while the job goes, its place
in line while it waits, and a button that releases a queued job.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import streamlit as st

from sim.plan.config_search import SearchOptions
from sim.report.snapshot import Snapshot
from sim.scenario import Scenario
from sim.trace import Trace
from ui.server.pool import RunKey, RunService, ServiceStats, run_key, search_key
from ui.validate_job import Files, Shown
from ui.work_budget import confirm_large_work, run_work

POLL_S = 0.1
PROBES_PER_CONFIG = 5  # a search's runs per configuration: 4-6 for a first one, 2-4 reusing a neighbour's answer (sim/plan/guided.py; 25 for 8 in docs/PERFORMANCE.md)


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
    if service.results.get(key) is None:  # a cached answer costs nothing
        confirm_large_work(run_work(trace, [scenario]), "run", "".join(key))
    resubmit = lambda: service.submit(trace, scenario)  # noqa: E731
    return _wait(service, resubmit(), label, resubmit, _percent_of_trace)


def run_scenarios(trace: Trace, scenarios: dict[str, Scenario], catch: tuple[type[Exception], ...]
                  ) -> dict[str, Snapshot | Exception]:
    """Label -> result (or the error of a type in `catch`) for several scenarios: all are submitted
    at once, so they share the pool's workers instead of running one after another."""
    service = run_service()
    new = [s for s in scenarios.values() if service.results.get(run_key(trace, s)) is None]
    confirm_large_work(run_work(trace, new), f"comparison of {len(scenarios)} scenarios",
                       "".join("".join(run_key(trace, s)) for s in new))
    keys = {label: service.submit(trace, scenario) for label, scenario in scenarios.items()}
    out: dict[str, Snapshot | Exception] = {}
    waiting = list(keys)
    try:
        while waiting:
            label = waiting.pop(0)
            scenario = scenarios[label]
            try:
                out[label] = _wait(service, keys[label], f"Simulating {label}",
                                   lambda s=scenario: service.submit(trace, s), _percent_of_trace)
            except catch as exc:
                out[label] = exc
    finally:
        for label in waiting:  # the visitor left or changed a setting: stop watching the rest
            service.release(keys[label])
    return out


def search_known(trace: Trace, configs: list[Scenario], options: SearchOptions) -> bool:
    """Whether the server holds this search's answer, or is computing it already (nothing starts here)."""
    from ui.server.pool import search_key

    return run_service().state(search_key(trace, configs, options)).phase in ("done", "running", "queued")


def run_search(trace: Trace, configs: list[Scenario], options: SearchOptions) -> dict[str, Any]:
    """A Plan search's dict (rows, best, Pareto) from the pool; raises what the search raised."""
    service = run_service()
    if service.results.get(search_key(trace, configs, options)) is None:
        confirm_large_work(run_work(trace, configs, PROBES_PER_CONFIG), f"search of {len(configs)} configurations",
                           "".join(search_key(trace, configs, options)))
    resubmit = lambda: service.submit_search(trace, configs, options)  # noqa: E731
    total = len(configs)
    return _wait(service, resubmit(), f"Searching {total} configurations", resubmit,
                 lambda f: f"{round(f * total)} of {total} configurations")


def run_validate(files: Files | None, digest: str, overrides: tuple[tuple[str, Any], ...] = (),
                 fit: bool = False) -> Shown:
    """A Validate page replay from the pool; raises what the replay raised (RunError: one line)."""
    service = run_service()
    resubmit = lambda: service.submit_validate(files, digest, overrides, fit)  # noqa: E731
    label = "Fitting a calibration profile (up to 20 replays)" if fit else "Replaying the run"
    return _wait(service, resubmit(), label, resubmit, lambda f: "replaying with its own engine config")


def _percent_of_trace(fraction: float) -> str:
    return f"{int(100 * fraction)}% of the trace"


def _wait(service: RunService, key: RunKey, label: str, resubmit: Callable[[], RunKey],
          describe: Callable[[float], str]) -> Any:
    """Poll a submitted job until it is done; progress bar, place in line and a cancel button meanwhile.
    The caller's watch on `key` is released here if this script run ends before the job does."""
    cancel_key = "cancel-run-" + hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    if st.session_state.get(cancel_key):  # clicked during the previous script run, which that click ended
        service.release(key)
        st.info(f"{label}: cancelled. Change a setting or reload the page to run it again.")
        st.stop()
    state = service.state(key)
    if state.phase == "done" and state.result is not None:
        return state.result
    bar = st.progress(0.0, text=f"{label}: starting")
    cancel = st.empty()
    finished = button_drawn = False
    try:
        while True:
            state = service.state(key)
            if state.phase == "done" and state.result is not None:
                finished = True
                return state.result
            if state.phase == "failed" and state.error is not None:
                finished = True
                raise state.error
            if state.phase == "gone":  # released by every watcher: submit again
                resubmit()
            elif state.phase == "queued":
                bar.progress(0.0, text=f"{label}: queued, number {state.place} in line for a simulation worker")
                if not button_drawn:  # one widget per script run; a click ends this run and reruns the page
                    cancel.button("Cancel this queued run", key=cancel_key)
                    button_drawn = True
            else:
                bar.progress(state.fraction, text=f"{label}: {describe(state.fraction)}")
            time.sleep(POLL_S)
    finally:
        if not finished:  # the visitor left, changed a setting or cancelled: stop watching (first: the
            service.release(key)  # st calls below raise again when Streamlit is stopping this run)
        bar.empty()
        cancel.empty()

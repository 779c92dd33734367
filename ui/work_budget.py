"""How much work a page is about to start, and a click to confirm it when that is more than a page
should start by itself.

Every input of a page can come from a link (the widgets are bound to the URL), and anyone can send
a link: `?trace_src=synthetic&trace_synth=n=2000000` asks for two million requests, minutes of a
server core. Each value is within its own bounds, yet the product is not. So before a run is handed
to the worker pool its work is estimated as requests x steps (each request lives through one step
per output token plus one per prefill chunk of max_batched_tokens: sim.guard.work.work_estimate),
and above PAGE_WORK_BUDGET the page says how large it is and waits for "Start it anyway". A result
already computed (cached) needs no confirmation, nor does work a visitor has confirmed once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import streamlit as st

from sim.guard.limits import PAGE_WORK_BUDGET, SECONDS_PER_MILLION_STEPS
from sim.guard.work import work_estimate
from sim.scenario import Scenario
from sim.trace import Trace

CONFIRMED = "work_confirmed"  # session_state: ids of the large runs this visitor started on purpose


def run_work(trace: Trace, scenarios: Iterable[Scenario], repeats: int = 1) -> int:
    """Request-steps of running each scenario `repeats` times on the trace (a search's probes)."""
    return sum(work_estimate(trace, s) for s in scenarios) * repeats


def confirm_large_work(work: int, what: str, ident: str) -> None:
    """Return at once when `work` is within the budget or was confirmed; otherwise say how large it
    is, offer the button, and stop the page (st.stop) until it is pressed."""
    if work <= PAGE_WORK_BUDGET:
        return
    key = hashlib.sha256(f"{ident}/{work}".encode()).hexdigest()[:24]
    confirmed: set[str] = st.session_state.setdefault(CONFIRMED, set())
    if key in confirmed:
        return
    minutes = work / 1e6 * SECONDS_PER_MILLION_STEPS / 60
    st.warning(f"This {what} is large: about {work:,} request-steps (each request counted once per step it lives "
               f"through), over the {PAGE_WORK_BUDGET:,} a page starts by itself; about {minutes:,.0f} minutes of a "
               "server core. Links can ask for anything: start it only if you meant to, or use fewer requests "
               "(\"Use only the first N requests\" on the Trace panel).", icon=":material/hourglass_top:")
    if st.button("Start it anyway", key=f"confirm-{key}"):
        confirmed.add(key)
        return
    st.stop()

"""Bounded number widgets that say their bounds and never drop a bad link value silently.

Streamlit quietly discards a URL value outside a widget's range (`?max_len=2000000`,
`?cap_users=99999999999`) and shows the default, so a shared link can show an answer to a
question nobody asked. `number()` checks the URL value first: a value that is not a number or is
out of range is recorded with its bound, removed from the URL, and the widget falls back to its
default; `show_link_problems()` then says so in the main area, above the result it affects.
`choice()` does the same for a selectbox, radio or multiselect value that is not one of its options.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import streamlit as st

PROBLEMS = "link_problems"  # session_state: messages about link values that were not used


def _fmt(v: float) -> str:
    return f"{v:,g}" if abs(v) < 1e6 else f"{v:,.0f}"


def link_problem(key: str, raw: str, lo: float, hi: float) -> str | None:
    """The message for one URL value, or None when it is a number within [lo, hi]."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return f"The link's {key}={raw!r} is not a number; using the default instead."
    if not math.isfinite(value) or not lo <= value <= hi:
        return f"The link's {key}={raw} is out of range ({_fmt(lo)} to {_fmt(hi)}); using the default instead."
    return None


def checked(key: str, lo: float, hi: float) -> None:
    """The link check of `number` alone, for a URL-bound number widget whose label is kept as it is."""
    raw = st.query_params.get(key)
    if raw is not None:
        message = link_problem(key, raw, lo, hi)
        if message:
            _record(message)
            del st.query_params[key]


def number(where: Any, label: str, lo: float, hi: float, default: float, *, key: str, slider: bool = False,
           **kwargs: Any) -> Any:
    """A number_input (or slider) bound to the URL whose label states its bounds (see module doc)."""
    checked(key, lo, hi)
    if slider:
        return where.slider(label, lo, hi, default, key=key, bind="query-params", **kwargs)
    return where.number_input(f"{label} ({_fmt(lo)} to {_fmt(hi)})", lo, hi, default, key=key,
                              bind="query-params", **kwargs)


def _record(message: str) -> None:
    problems = st.session_state.setdefault(PROBLEMS, [])
    if message not in problems:
        problems.append(message)


def choice(key: str, options: Sequence[Any]) -> None:
    """Call before a URL-bound selectbox, radio or multiselect: a link value that is not one of its
    options is named (Streamlit would drop it silently and show the default) and removed from the URL."""
    values = st.query_params.get_all(key)
    names = {str(o) for o in options}
    bad = [v for v in values if v not in names]
    if bad:
        shown = ", ".join(str(o) for o in options) if len(names) <= 12 else f"{len(names)} choices on the form"
        _record(f"The link's {key}={bad[0][:60]!r} is not one of the choices ({shown}); using the default instead.")
        del st.query_params[key]


def show_link_problems() -> None:
    """Every link value this session could not use, in the main area (kept until the page is reloaded)."""
    for message in st.session_state.get(PROBLEMS, []):
        st.warning(message, icon=":material/link_off:")


def show_input_problems(fallback: str) -> None:
    """Why a page has no result, in its main area: the trace's and the scenario's one-line errors
    (also shown in the sidebar beside the input), else `fallback`."""
    shown = False
    for key, what in (("trace_problem", "Trace"), ("scenario_problem", "Scenario")):
        message = st.session_state.get(key)
        if message:
            st.error(f"{what}: {message}")
            shown = True
    if not shown:
        st.info(fallback)

"""The one way a page reports bad input: one line in the main area, then the page stops.

Every input error of the project is a ValueError (SpecError, ScenarioError, TraceError, GpuError,
RunError, SloError, SnapshotError, ...), so pages catch that family here instead of each writing
its own `except (...)` tuple; the message goes through public_error (one line, no server paths).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from sim.guard.text import public_error

INPUT_ERRORS: tuple[type[Exception], ...] = (ValueError,)


@contextmanager
def stop_on_error(what: str = "", errors: tuple[type[BaseException], ...] = INPUT_ERRORS) -> Iterator[None]:
    """Run the block; on one of `errors`, show "what: message" (or the message) and stop the page."""
    try:
        yield
    except errors as exc:
        st.error(f"{what}: {public_error(exc)}" if what else public_error(exc))
        st.stop()


@contextmanager
def error_shown(what: str = "", errors: tuple[type[BaseException], ...] = INPUT_ERRORS) -> Iterator[None]:
    """Run the block; on one of `errors`, show the one line and carry on with the rest of the page
    (a part of the page failed, not the page: a snapshot link, an upload, a delete)."""
    try:
        yield
    except errors as exc:
        st.error(f"{what}: {public_error(exc)}" if what else public_error(exc))

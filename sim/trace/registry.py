"""Known trace formats. Adding one = a file in formats/ defining FORMAT, plus one line here
(or `register_trace_format(FORMAT)` from outside).

Detection order matters only when two formats could both match a header; the specific ones come
first and the generic format (the catch-all) always last.
"""

from __future__ import annotations

from models.registry import Registry
from sim.trace.formats import azure, burstgpt, generic, mooncake, splitwise, vidur
from sim.trace.model import TraceFormat

CATCH_ALL = generic.FORMAT.name

FORMATS: Registry[TraceFormat] = Registry("trace format", (
    (f.name, f) for f in (azure.FORMAT, burstgpt.FORMAT, mooncake.FORMAT, vidur.FORMAT, splitwise.FORMAT, generic.FORMAT)
))


def register_trace_format(fmt: TraceFormat) -> TraceFormat:
    """Add a format under its own name; it is tried before the catch-all generic format."""
    FORMATS.register(fmt.name, fmt)
    FORMATS.register(CATCH_ALL, FORMATS.unregister(CATCH_ALL))
    return fmt

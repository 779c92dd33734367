"""Request traces: load any supported format into one canonical Trace, generate synthetic ones,
and transform them. See docs/TRACES.md for formats, columns, limits and the synthetic spec syntax."""

from sim.trace.loader import DEFAULT_MAX_BYTES, load_trace, load_trace_bytes
from sim.trace.model import Trace, TraceError, TraceFormat
from sim.trace.registry import FORMATS

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FORMATS",
    "Trace",
    "TraceError",
    "TraceFormat",
    "load_trace",
    "load_trace_bytes",
]

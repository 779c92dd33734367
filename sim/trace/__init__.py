"""Request traces: load any supported format into one canonical Trace, generate synthetic ones,
and transform them. See docs/TRACES.md for formats, columns, limits and the synthetic spec syntax."""

from sim.trace.loader import DEFAULT_MAX_BYTES, load_trace, load_trace_bytes, resolve_trace
from sim.trace.model import Trace, TraceError, TraceFormat
from sim.trace.registry import FORMATS
from sim.trace.synthetic import (
    PRESET_TARGETS,
    LengthDist,
    SyntheticSpec,
    parse_synthetic_spec,
    preset,
    synthetic,
)
from sim.trace.transforms import all_at_once, clamp_context, speedup, subsample, window

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FORMATS",
    "PRESET_TARGETS",
    "LengthDist",
    "SyntheticSpec",
    "Trace",
    "TraceError",
    "TraceFormat",
    "all_at_once",
    "clamp_context",
    "load_trace",
    "load_trace_bytes",
    "parse_synthetic_spec",
    "preset",
    "resolve_trace",
    "speedup",
    "subsample",
    "synthetic",
    "window",
]

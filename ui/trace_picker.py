"""The trace picker: a bundled sample, an uploaded file or a synthetic spec, and an optional cap on
the number of requests. Every choice except the uploaded bytes is bound to the URL, so a link
reopens the same workload; an upload is kept in the session so it survives page switches.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st

from sim.guard.limits import MAX_DASHBOARD_REQUESTS, MAX_UPLOAD_ROWS
from sim.guard.text import plain, public_error
from sim.trace import Trace, TraceError, load_trace, load_trace_bytes
from sim.trace.synthetic import parse_synthetic_spec
from ui import bounded
from ui.defaults import DEFAULT_SAMPLE
from ui.server.lru import ByteLRU, cache_bytes_from_env

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
DEFAULT_SYNTH = "preset=sharegpt-like,n=500,rate=4,seed=1"
UPLOAD_LIMIT_MB = 100
SOURCES = ("sample", "upload", "synthetic")
TRACE_CACHE_ENV = "KVSIM_TRACE_CACHE_MIB"
DEFAULT_TRACE_CACHE_MIB = 256
PROBLEM_KEY = "trace_problem"  # session_state: why the last pick_trace() returned None, for the main area
UPLOAD_KEY = "uploaded_trace"  # session_state: (name, bytes) of the last good upload
TRACE_ID = "trace_id"  # URL: the server-side id of an uploaded trace, so a link reopens it (until evicted)


def sample_names() -> list[str]:
    return sorted(p.name for p in SAMPLES.iterdir() if p.suffix in (".csv", ".jsonl"))


@st.cache_resource(show_spinner=False)
def trace_cache() -> ByteLRU[Trace]:
    """Parsed traces shared by every session of this server, bounded by bytes (KVSIM_TRACE_CACHE_MIB)."""
    return ByteLRU(cache_bytes_from_env(TRACE_CACHE_ENV, DEFAULT_TRACE_CACHE_MIB))


def _load_sample(name: str) -> Trace:
    return trace_cache().get_or_make(("sample", name), lambda: load_trace(SAMPLES / name))


def _load_upload(data: bytes, name: str) -> Trace:
    """Parsed in bounded memory; at most MAX_UPLOAD_ROWS rows (the trace's warnings say so)."""
    key = ("upload", hashlib.sha256(data).hexdigest(), name)
    return trace_cache().get_or_make(key, lambda: load_trace_bytes(data, name, max_rows=MAX_UPLOAD_ROWS))


@st.cache_resource(show_spinner=False)
def upload_store() -> ByteLRU[tuple[str, bytes]]:
    """Uploaded trace files by id (the first 16 hex digits of their SHA-256), shared by the server's
    sessions and bounded like the trace cache: a link carries the id, never the bytes."""
    return ByteLRU(cache_bytes_from_env(TRACE_CACHE_ENV, DEFAULT_TRACE_CACHE_MIB))


def upload_id(name: str, data: bytes) -> str:
    """Keep an upload on the server and return its id (for the URL)."""
    tid = hashlib.sha256(data).hexdigest()[:16]
    upload_store().put(tid, (name, data))
    return tid


def _from_link() -> tuple[str, bytes] | None:
    """The upload a link's trace_id names, when this server still holds it."""
    tid = st.query_params.get(TRACE_ID)
    return upload_store().get(tid) if tid else None


def _load_synthetic(spec: str) -> Trace:
    return synthetic_for_dashboard(spec)


def synthetic_for_dashboard(spec: str) -> Trace:
    """A synthetic spec from a widget or a link, bounded to what one page may generate on the server."""
    parsed = parse_synthetic_spec(spec)
    if parsed.n > MAX_DASHBOARD_REQUESTS:  # a crafted link must not make the server generate 50M rows
        raise TraceError(f"synthetic spec: n={parsed.n:,} is over the dashboard's limit of {MAX_DASHBOARD_REQUESTS:,} "
                         "requests (the command line takes more)")
    return trace_cache().get_or_make(("synthetic", spec), parsed.generate)


def pick_trace(where: str = "main") -> Trace | None:
    """Draw the picker (in the main area or the sidebar) and return the chosen Trace, or None after an error."""
    box = st.sidebar.expander("Trace", expanded=False) if where == "sidebar" else st.container()
    st.session_state.pop(PROBLEM_KEY, None)
    with box:
        bounded.choice("trace_src", SOURCES)
        source = st.radio("Trace source", SOURCES, key="trace_src", horizontal=True, bind="query-params")
        trace: Trace | None = None
        try:
            if source == "sample":
                names = sample_names()
                default = names.index(DEFAULT_SAMPLE) if DEFAULT_SAMPLE in names else 0
                bounded.choice("trace_sample", names)
                name = st.selectbox("Bundled sample", names, index=default, key="trace_sample", bind="query-params")
                trace = _load_sample(name)
            elif source == "upload":
                up = st.file_uploader("Trace file (CSV or JSONL, any supported format)", type=["csv", "jsonl", "json", "txt"],
                                      key="trace_file", max_upload_size=UPLOAD_LIMIT_MB)
                kept = (up.name, up.getvalue()) if up is not None else _from_link() or st.session_state.get(UPLOAD_KEY)
                if kept is None:
                    gone = " The trace this link names is no longer on the server." if st.query_params.get(TRACE_ID) else ""
                    st.info(f"Upload a trace file, or pick a bundled sample.{gone}")
                    return None
                name, data = kept
                trace = _load_upload(data, name)
                if st.session_state.get(UPLOAD_KEY) != kept or TRACE_ID not in st.session_state:  # new: id it once
                    st.session_state[UPLOAD_KEY] = kept
                    st.session_state[TRACE_ID] = upload_id(name, data)
                if st.query_params.get(TRACE_ID) != st.session_state[TRACE_ID]:
                    # Only when it changes: each write sends the server's copy of the whole address, which
                    # on a rerun of the same page predates the widget values the browser has just written
                    # there (a toggle vanished from the address bar once under load).
                    st.query_params[TRACE_ID] = st.session_state[TRACE_ID]
                if up is None:
                    st.caption(f"Using the uploaded {plain(name)}")
            else:
                spec = st.text_input("Synthetic spec", value=DEFAULT_SYNTH, key="trace_synth", bind="query-params",
                                     help="key=value pairs: preset, n, rate, arrival, cv, input, output, max_len, seed")
                trace = _load_synthetic(spec)
        except TraceError as exc:
            st.error(public_error(exc))
            st.session_state[PROBLEM_KEY] = public_error(exc)
            return None
        for warning in trace.warnings:
            if "rows capped" in warning:
                st.warning(plain(public_error(warning)))
        limit = bounded.number(st, "Use only the first N requests (0 = all)", 0, 10_000_000, 0, step=100,
                               key="trace_first")
        return trace.first(int(limit))  # for quick runs

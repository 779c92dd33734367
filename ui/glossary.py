"""One glossary expander, the same on every page (definitions in sim/report/glossary.py)."""

from __future__ import annotations

import streamlit as st

from sim.report.glossary import KV_BYTES, KV_PARTS, TERMS


def show_glossary(kv_parts: bool = True, terms: bool = False) -> None:
    """An expander defining the KV pool's parts and/or the planner's terms, one sentence each, and what a
    token costs (bytes per token, int8 vs fp8) on every page."""
    with st.expander("What the words mean", expanded=False):
        rows = (KV_PARTS if kv_parts else ()) + (TERMS if terms else ()) + KV_BYTES
        st.markdown("\n".join(f"- **{name}**: {text}" for name, text in rows))

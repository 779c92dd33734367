"""One warning in the server log when the dashboard listens beyond this machine (docs/DASHBOARD.md)."""

from __future__ import annotations

import logging

import streamlit as st

LOOPBACK = ("127.", "localhost", "::1")


@st.cache_resource(show_spinner=False)
def warn_if_exposed() -> bool:
    """Log once per server process; True when the address is not loopback."""
    address = str(st.get_option("server.address") or "")
    exposed = not address.startswith(LOOPBACK)
    if exposed:
        logging.getLogger("kvsim").warning(
            "kvsim dashboard listening on %r, not 127.0.0.1: anyone who can reach this port can use it, open "
            "snapshot links and list public snapshots; GPU runs can be switched off with KVSIM_GPU_RUNS=off",
            address or "all interfaces")
    return exposed

"""Words on the pages a first-time user reads without help: the glossary expander and the KV pool line.
Only the pages and streamlit are imported, so bench/why_audit.py can run these on the code before
the fixes they check."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGES = Path(__file__).resolve().parent.parent / "app_pages"
COMPARE, SIMULATE = str(PAGES / "compare.py"), str(PAGES / "simulate.py")


def test_compare_explains_each_kv_part():
    """Issue 17: nothing on Compare explained internal fragmentation vs reserved."""
    at = AppTest.from_file(COMPARE, default_timeout=120)
    at.query_params["trace_first"] = "20"
    at.run()
    glossary = next(e for e in at.expander if e.label == "What the words mean")
    text = " ".join(m.value for m in glossary.markdown)
    for part in ("token states", "reserved (not yet written)", "internal fragmentation", "external fragmentation"):
        assert f"**{part}**" in text


def test_a_contiguous_run_is_not_said_in_blocks():
    """Issue 17: "28,006 blocks of 16 tokens" was shown for a contiguous run, which reserves token slots."""
    at = AppTest.from_file(SIMULATE, default_timeout=120)
    at.query_params.update({"trace_first": "20", "paging": "contiguous"})
    at.run()
    pool = next(c.value for c in at.caption if c.value.startswith("KV pool:"))
    assert "token slots per replica, reserved contiguously" in pool and "blocks of" not in pool

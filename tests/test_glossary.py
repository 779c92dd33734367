"""The glossary: one sentence per KV part and per planner term, in the expander every page shows."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

COMPARE = str(Path(__file__).resolve().parent.parent / "app_pages" / "compare.py")


def test_compare_explains_each_kv_part():
    """Issue 17: nothing on Compare explained internal fragmentation vs reserved."""
    at = AppTest.from_file(COMPARE, default_timeout=120)
    at.query_params["trace_first"] = "20"
    at.run()
    glossary = next(e for e in at.expander if e.label == "What the words mean")
    text = " ".join(m.value for m in glossary.markdown)
    for part in ("token states", "reserved (not yet written)", "internal fragmentation", "external fragmentation"):
        assert f"**{part}**" in text

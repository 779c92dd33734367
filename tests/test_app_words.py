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


def test_the_token_share_says_what_it_is():
    """Issue 17: "KV holding tokens (mean)" on the headline; it is the pool's share holding token states."""
    at = AppTest.from_file(SIMULATE, default_timeout=120)
    at.query_params["trace_first"] = "20"
    at.run()
    labels = [m.label for m in at.metric]
    assert "KV holding tokens (mean)" not in labels and "KV pool holding token states (avg)" in labels


def test_capacity_answers_in_one_sentence_first():
    """Issue 17: the answer ("126 sequences") was only in a table cell, under a "KV B/token/GPU" column."""
    at = AppTest.from_file(str(PAGES / "capacity.py"), default_timeout=60)
    at.query_params.update(cap_models="qwen2.5-7b", cap_gpus="h100-sxm")
    at.run()
    assert at.markdown[0].value == ("### qwen2.5-7b on one h100-sxm at 8,192-token context (bf16 KV): "
                                    "126 concurrent sequences; 1 GPU for 100 users.")
    assert all("KV B/token/GPU" not in table.value.columns for table in at.dataframe)

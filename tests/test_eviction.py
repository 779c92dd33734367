"""Bounding KV by eviction (models/eviction.py): the memory and batch-size gain, never the quality."""

from __future__ import annotations

import json

import pytest

from models.eviction import QUALITY_NOTE, Eviction, parse_eviction
from models.spec import SpecError, load_spec
from sim.cli.kv import kv_report
from sim.run.engine import simulate
from sim.scenario import Scenario, ScenarioError
from sim.trace.synthetic import synthetic


def test_parse_the_three_policies_and_refuse_bad_text():
    assert parse_eviction("window:4096") == Eviction("window", 4096)
    assert parse_eviction("streaming:4+2044") == Eviction("streaming", 2048, sinks=4)
    assert parse_eviction("H2O:1024") == Eviction("h2o", 1024)
    assert parse_eviction(None) is None and parse_eviction("") is None
    for bad in ("window", "window:x", "streaming:4", "lru:10", "h2o:0"):
        with pytest.raises(ValueError, match="kv eviction"):
            parse_eviction(bad)
    with pytest.raises(ScenarioError, match="kv eviction"):
        Scenario(kv_eviction="window:-3")
    with pytest.raises(SpecError, match="kv eviction"):
        load_spec("llama-3-8b").with_eviction("nope:1")


def test_cap_bounds_every_token_keeping_group_and_leaves_states():
    layer = 8 * 128 * 2 * 2
    capped = kv_report("llama-3.1-8b", kv_eviction="streaming:4+2044")
    assert capped["per_sequence_bytes"]["131072"] == 32 * 2048 * layer  # a sequence never keeps more than 2,048 tokens
    assert capped["per_sequence_bytes"]["2048"] == kv_report("llama-3.1-8b")["per_sequence_bytes"]["2048"]
    assert capped["note"] == QUALITY_NOTE
    oss = load_spec("gpt-oss-20b").with_eviction("window:64")
    assert [g.tokens_kept(8192) for g in oss.groups] == [64, 64]  # the cap binds under the 128-token window too
    nxt = load_spec("qwen3-next-80b-a3b")
    assert nxt.with_eviction("h2o:1024").groups[1] == nxt.groups[1]  # a linear-attention state has nothing to evict


def test_capacity_cli_reports_the_gain_and_the_quality_note(capsys):
    from sim.__main__ import main

    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--contexts", "32768",
                 "--kv-eviction", "window:4096", "--json"]) == 0
    capped = json.loads(capsys.readouterr().out)
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--contexts", "32768", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert capped["rows"][0]["max_concurrent"] >= 8 * plain["rows"][0]["max_concurrent"]
    assert capped["note"] == QUALITY_NOTE and "note" not in plain


def test_simulated_run_holds_more_sequences_with_a_window():
    trace = synthetic(200, rate=30.0, input="lognormal:mean=3000:sigma=0.5", output="lognormal:mean=300:sigma=0.5", seed=2)
    base = Scenario(model="llama-3.1-8b", gpu="h100-sxm", kv_budget_gib=2.0, max_num_seqs=512)
    plain = simulate(trace, base)
    capped = simulate(trace, base.replace(kv_eviction="window:512"))
    assert capped.steps["num_running"].max() > 2 * plain.steps["num_running"].max()
    assert capped.summary["completed"] == plain.summary["completed"] == 200
    assert capped.summary["kv_eviction"] == {"policy": "window:512", "note": QUALITY_NOTE}
    assert "kv_eviction" not in plain.summary

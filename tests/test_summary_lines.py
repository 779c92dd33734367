"""The CLI summary's fleet, P/D, prefix-cache and tier lines (sim/report/summary_lines.py), and the
P/D summary keys they read: each pool's figures from that pool, never one pool's beside another's."""

from __future__ import annotations

import pytest

from sim.cli.run import format_summary
from sim.fleet.pd import PDFleet
from sim.fleet.replay import simulate
from sim.report import summary_lines
from sim.scenario import Scenario
from sim.trace import load_trace

BASE = Scenario(model="llama-3.1-8b", gpu="h100-sxm", max_model_len=32768, prefix_caching=True)


@pytest.fixture(scope="module")
def mooncake(samples_dir):
    return load_trace(samples_dir / "mooncake_small.jsonl").first(60)


def test_fleet_text_names_the_router_its_imbalance_and_each_replica(mooncake):
    s = simulate(mooncake, BASE.replace(replicas=3, router="least-outstanding")).summary
    lines = format_summary(s).splitlines()
    assert f"fleet: 3 replicas behind least-outstanding, routing imbalance {s['routing_imbalance']:.2f} (max / mean requests routed)" in lines
    rows = [line for line in lines if line.startswith("  replica ")]
    assert [int(row.split(": ")[1].split()[0]) for row in rows] == [r["routed"] for r in s["fleet"]["replicas"]]
    kv = next(line for line in lines if line.startswith("KV "))
    assert f"over 3 replicas ({s['num_blocks']} blocks of 16 each)" in kv  # the GiB are the fleet's, the blocks one replica's
    assert f"({s['prefix_cache_hits']:,} of {s['prefix_cache_queries']:,})" in next(x for x in lines if x.startswith("prefix cache"))


def test_a_long_fleet_lists_its_first_replicas_and_counts_the_rest(mooncake, monkeypatch):
    s = simulate(mooncake, BASE.replace(replicas=3, router="round-robin", prefix_caching=False)).summary
    monkeypatch.setattr(summary_lines, "REPLICAS_LISTED", 2)
    lines = summary_lines.fleet_lines(s)
    assert sum(line.startswith("  replica ") for line in lines) == 2
    assert lines[-1] == "  ... 1 more replicas (--json lists them all)"
    assert not any(line.startswith("prefix cache") for line in format_summary(s).splitlines())  # nothing looked up
    assert not any("prefix hits" in line for line in lines)


def test_pd_text_gives_transfers_and_each_pools_own_imbalance(mooncake):
    s = simulate(mooncake, BASE.replace(pd="1:2", decode_router="random")).summary
    text = format_summary(s)
    assert f"P/D 1:2 on 3 GPUs, KV over rdma-400g: {s['kv_transfers']:,} transfers, {s['kv_transfer_bytes'] / 2**30:.2f} GiB" in text
    decode = next(p for p in s["fleet"]["pools"] if p["role"] == "decode")
    assert f"decode pool: 2 x TP1 behind random, routing imbalance {decode['routing_imbalance']:.2f}" in text
    assert "over the decode pool's 2 replicas" in text and "prefix cache (the prefill pool's)" in text
    assert decode["num_preemptions"] == s["num_preemptions"]  # the summary's count is the decode pool's
    from sim.cli.compare import format_table, row

    prefill = next(p for p in s["fleet"]["pools"] if p["role"] == "prefill")
    both = f"{prefill['routing_imbalance']:.2f}/{decode['routing_imbalance']:.2f}"
    assert row("pd", s)["imbalance"] == both and both in format_table([row("pd", s)])  # sim compare's column


def test_decode_replicas_count_their_own_cache_hits(mooncake):
    """vLLM's decode side asks its local prefix cache before the connector: its PrefixCacheStats
    count that look-up, so a decode replica's hit rate is what it did not receive."""
    fleet = PDFleet(mooncake, BASE.replace(pd="1:2"))
    fleet.run()
    s = fleet.result("t", 0.0).summary
    hits = sum(rep.sched.prefix_hits for rep in fleet.decode.s.replicas)
    assert hits == s["pd_decode_hit_tokens"] > 0
    assert any(r["prefix_cache_hit_rate"] > 0 for r in s["fleet"]["replicas"] if r["pool"] == "decode")


def test_pd_tier_keys_are_the_prefill_pools_hits_and_both_pools_bytes(mooncake):
    fleet = PDFleet(mooncake, BASE.replace(pd="1:2", kv_budget_gib=1.0, cpu_tier_gib=20.0))
    fleet.run()
    s = fleet.result("t", 0.0).summary
    stacks_p, stacks_d = fleet.prefill.s.tiers.stacks, fleet.decode.s.tiers.stacks
    assert s["tier_hit_rate"]["gpu"] == pytest.approx(s["prefix_cache_hit_rate"])
    assert s["tier_hit_tokens"]["cpu"] == sum(st.hit_tokens.get("cpu", 0) for st in stacks_p) > 0
    assert s["tier_bytes_moved"]["cpu"]["store"] == sum(st.bytes_moved["cpu"]["store"] for st in [*stacks_p, *stacks_d])
    assert {k.split("/")[0] for k in s["tier_occupancy"]} == {"prefill", "decode"}
    series = s["tier_occupancy_series"]
    assert set(series) - {"t_s"} == set(s["tier_occupancy"])  # both pools' instances
    for role, sim_ in (("prefill", fleet.prefill), ("decode", fleet.decode)):  # each pool's own samples, held between
        for t, occ in dict(sim_._tier_occupancy).items():  # the last sample at each time
            i = series["t_s"].index(t)
            assert all(series[f"{role}/{name}"][i] == occ[name] for name in occ)
    assert series["t_s"] == sorted(set(series["t_s"])) and max(series["prefill/cpu/replica0"]) > 0
    line = next(x for x in format_summary(s).splitlines() if x.startswith("KV tiers"))
    assert f"GPU {s['tier_hit_rate']['gpu']:.1%}, CPU {s['tier_hit_rate']['cpu']:.1%}" in line


def test_merged_series_holds_each_pools_last_sample():
    from sim.fleet.pd import merged_series

    out = merged_series({"a": {"t_s": [1.0, 3.0], "x": [10, 30]}, "b": {"t_s": [0.5, 2.0, 3.0], "x": [5, 20, 40]},
                         "c": {"t_s": []}})
    assert out == {"t_s": [0.5, 1.0, 2.0, 3.0], "a/x": [0, 10, 10, 30], "b/x": [5, 5, 20, 40]}

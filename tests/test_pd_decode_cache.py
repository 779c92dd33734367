"""P/D decode side asks its own prefix cache first (vLLM's scheduler, then the NIXL connector for
the rest): only the blocks the decode replica lacks move, per KV group (sim/core/remote_kv.py,
sim/fleet/pd.py transfer_bytes)."""

from __future__ import annotations

import pytest

from sim.core.remote_kv import reserve_head
from sim.core.routing.routers import RoundRobin
from sim.fleet.pd import PDFleet, transfer_bytes
from sim.fleet.replay import simulate
from sim.run.deployment import Deployment
from sim.run.engine import build
from sim.scenario import Scenario
from sim.trace.model import Trace

PER_TOKEN = 32 * 8 * 128 * 2 * 2  # llama-3.1-8b bf16: layers x kv heads x head dim x (K, V) x bytes
SC = Scenario(model="llama-3.1-8b", gpu="h100-sxm", max_model_len=4096, prefix_caching=True, pd="1:1")


def turns(second_arrival: float = 5.0) -> Trace:
    """A 64-token prompt, then (after it finished) a 96-token prompt that begins with it (16-token hash blocks)."""
    return Trace.build([0.0, second_arrival], [64, 96], [4, 4], format="mooncake", source="turns.jsonl",
                       prefix_hashes=[[1, 2, 3, 4], [1, 2, 3, 4, 5, 6]], prefix_block_size=16)


def test_decode_replica_receives_only_the_blocks_it_lacks():
    res = simulate(turns(), SC)
    rows = dict(res_rows(res))
    # request 0: nothing cached on the decode side, all 64 tokens move. Its 4 blocks are cached there
    # (keys given at the reservation; the last block fills with the recomputed last token), freed, parked.
    assert rows[0] == 64 * PER_TOKEN == 8_388_608
    # request 1: its first 4 blocks (64 tokens) hit locally; tokens 64..95 move
    assert rows[1] == (96 - 64) * PER_TOKEN == 4_194_304
    assert res.summary["kv_transfer_bytes"] == 12_582_912
    assert res.summary["pd_decode_hit_tokens"] == 64
    assert res.summary["completed"] == 2


def test_without_prefix_caching_the_whole_prompt_moves():
    res = simulate(turns(), SC.replace(prefix_caching=False))
    assert res.summary["kv_transfer_bytes"] == (64 + 96) * PER_TOKEN
    assert res.summary["pd_decode_hit_tokens"] == 0


def test_transfer_bytes_per_kv_group_past_the_local_hit():
    """gpt-oss-20b: full-attention layers send every token past the hit; the 128-token sliding-window
    layers send their window's tokens past the hit (min(128, prompt - hit))."""
    dep = Deployment.resolve(Scenario(model="gpt-oss-20b", gpu="h100-sxm", max_model_len=32768))
    full = sum(g.bytes_per_token("bf16", 1) for g in dep.spec.groups if g.window_tokens is None)
    window = [g for g in dep.spec.groups if g.window_tokens is not None]
    assert window and all(g.window_tokens == 128 for g in window)
    slide = sum(g.bytes_per_token("bf16", 1) for g in window)
    assert transfer_bytes(dep, 20000, 19968) == 32 * full + 32 * slide
    assert transfer_bytes(dep, 20000, 16000) == 4000 * full + 128 * slide
    assert transfer_bytes(dep, 20000, 0) == transfer_bytes(dep, 20000) == 20000 * full + 128 * slide


def res_rows(res):
    return [(t["req"], t["bytes"]) for t in res.summary["fleet"]["transfers"]]


def test_decode_pool_runs_the_decode_router():
    """The decode pool's own simulation is built with --decode-router (one router object, asked at
    each handoff; a state-free one pre-routes nothing): kv-precise sends the second turn to the decode
    replica that caches the first, round-robin to the other one, which receives the whole prompt."""
    sc = SC.replace(pd="1:2")
    fleet = PDFleet(turns(), sc.replace(decode_router="round-robin"))
    assert fleet.decode.router_name == "round-robin" and isinstance(fleet.decode.router, RoundRobin)
    assert all(rep.arrivals == [] for rep in fleet.decode.s.replicas)  # nothing pre-split before the clock
    rr = simulate(turns(), sc.replace(decode_router="round-robin"))
    kv = simulate(turns(), sc.replace(decode_router="kv-precise"))
    assert [p["router"] for p in rr.summary["fleet"]["pools"]] == ["round-robin", "round-robin"]
    assert [p["router"] for p in kv.summary["fleet"]["pools"]] == ["round-robin", "kv-precise"]
    assert [t["decode"] for t in rr.summary["fleet"]["transfers"]] == [0, 1]
    assert [t["decode"] for t in kv.summary["fleet"]["transfers"]] == [0, 0]
    assert (rr.summary["pd_decode_hit_tokens"], kv.summary["pd_decode_hit_tokens"]) == (0, 64)
    assert rr.summary["kv_transfer_bytes"] == (64 + 96) * PER_TOKEN
    assert kv.summary["kv_transfer_bytes"] == (64 + 32) * PER_TOKEN


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_decode_side_reserves_only_the_window_of_a_sliding_group(prefix_caching):
    """gpt-oss-20b (a full and a 128-token sliding-window group, 16-token blocks, one page a block):
    a 16,000-token prompt handed over holds 15,999 loaded tokens (the last is recomputed). vLLM's
    allocate_slots with num_external_computed_tokens takes blocks only past the skipped ones
    (SlidingWindowManager.get_num_blocks_to_allocate: skipped = (15,999 - 128 + 1) // 16 = 992 of
    ceil(15,999 / 16) = 1,000), so the decode replica reserves 1,000 + 8 blocks, not 2 x 1,000."""
    dep = Deployment.resolve(Scenario(model="gpt-oss-20b", gpu="h100-sxm", max_model_len=32768,
                                      prefix_caching=prefix_caching))
    sched = build(Trace.build([0.0], [16000], [8], format="synthetic", source="one.jsonl"), dep).replicas[0].sched
    assert [(m.label, m.pages, m.block_size) for m in sched.alloc.managers] == [("full", 1, 16), ("sliding(128)", 1, 16)]
    free = sched.alloc.num_free_blocks
    sched.add_remote_request(0, 16000)
    assert reserve_head(sched, 0, 0.0)
    assert free - sched.alloc.num_free_blocks == 1000 + 8


def test_two_long_prompts_share_a_decode_pool_that_holds_one_whole_prompt_per_group():
    """A 2,020-page decode pool and two 12,000-token gpt-oss-20b prompts handed over together: each
    reserves 750 full-attention + 8 sliding-window pages (the window, as vLLM's null-padded external
    blocks), so both fit at once; reserving the whole prompt in both groups (1,500 pages each) made the
    second wait for the first to finish."""
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", max_model_len=32768, prefix_caching=True, pd="1:1",
                  kv_budget_gib=0.74)
    trace = Trace.build([0.0, 0.0], [12000, 12000], [50, 50], format="synthetic", source="two.jsonl")
    s = simulate(trace, sc).summary
    assert s["num_blocks"] == 2020 and s["completed"] == 2
    assert s["pd_waited_for_blocks"] == 0


@pytest.mark.parametrize(("interval", "hit_tokens"), [(None, 1024), (0, 0)])
def test_decode_side_keys_a_sliding_group_as_vllms_retention_interval_says(interval, hit_tokens):
    """gpt-oss-20b P/D, a 1,024-token turn then a 1,536-token turn that begins with it (16-token hash
    blocks). The decode side holds the first turn's window only: blocks 56..63 (skipped: (1,023 - 127)
    // 16 = 56). Keyed densely (interval None) they serve the second turn a 1,024-token hit. Under
    vLLM's default interval 0 a sliding group keys only the 8 blocks before the replay boundary
    1,023 (floored to 1,008: blocks 55..62, reachable_block_mask); block 55 never reached the decode
    side, so no 8 contiguous blocks are cached and the whole second prompt moves (a prompt ending
    inside a block, below, keeps a complete tail)."""
    trace = Trace.build([0.0, 5.0], [1024, 1536], [4, 4], format="mooncake", source="turns.jsonl",
                        prefix_hashes=[list(range(1, 65)), list(range(1, 97))], prefix_block_size=16)
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", max_model_len=4096, prefix_caching=True, pd="1:1",
                  prefix_cache_retention_interval=interval)
    s = simulate(trace, sc).summary
    dep = Deployment.resolve(sc.replace(pd=None))
    assert s["completed"] == 2 and s["pd_decode_hit_tokens"] == hit_tokens
    assert s["kv_transfer_bytes"] == transfer_bytes(dep, 1024) + transfer_bytes(dep, 1536, hit_tokens)


def test_decode_side_keeps_a_complete_tail_when_the_prompt_ends_inside_a_block():
    """The same under interval 0 with a 1,030-token first turn: the replay boundary 1,029 floors to
    1,024 (tail blocks 56..63) and the handoff brought blocks (1,030 - 128) // 16 = 56 on, so the
    second turn (1,536 tokens, the first 64 hash blocks shared) hits 1,024 tokens there."""
    trace = Trace.build([0.0, 5.0], [1030, 1536], [4, 4], format="mooncake", source="turns.jsonl",
                        prefix_hashes=[list(range(1, 65)), list(range(1, 97))], prefix_block_size=16)
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", max_model_len=4096, prefix_caching=True, pd="1:1")
    assert simulate(trace, sc).summary["pd_decode_hit_tokens"] == 1024

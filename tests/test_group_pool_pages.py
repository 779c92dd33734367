"""The simulator's pool for full + sliding models has vLLM 0.32's padded KV cache groups, by hand.

vLLM splits every layer type into KV cache groups of `group_size` layers, the fewest layers of any
type or the most when the most is under 1.5 x the fewest, the last group of a type padded with
empty layers; each group takes one block of group_size layer pages per block index
(vllm/v1/core/kv_cache_utils.py `_get_kv_cache_groups_uniform_page_size`, `get_num_blocks`:
available // page_size // group_size). Gemma-3-27B (10 full + 52 sliding(1024) layers, 16 kv heads
of 128): groups of 10, the sliding layers 6 groups (60 layers, 8 padding), a block 10 x 16 tokens
x 2 (K, V) x 16 x 128 x 2 B = 1,310,720 B. kvsim's pool had a page of the two groups' greatest
common divisor (2 layers' pages), so it held 52 sliding layers' bytes, not vLLM's 60.
"""

from __future__ import annotations

import pytest

from models.gpus import get_gpu
from models.spec import load_spec
from sim.core.kv.group_managers import make_managers
from sim.memory.capacity import capacity_table
from sim.memory.vllm_profile import add_vllm_pool
from sim.run.deployment import Deployment
from sim.scenario import Scenario

GiB = 1 << 30
BLOCK = 10 * 16 * 2 * 16 * 128 * 2  # 10 layers' pages of 16 tokens: 1,310,720 B
CONTEXTS = (1000, 2048, 8192)


def vllm_blocks(n: int) -> int:
    """vLLM's blocks for a sequence of n tokens at its peak: the full group cdiv(n, 16), each of the
    6 sliding groups the blocks a 1,024-token window straddles, cdiv(1023, 16) + 1 = 65 at most."""
    blocks = -(-n // 16)
    return blocks + 6 * min(blocks, -(-1023 // 16) + 1)


def driven_peak(pool, n: int) -> int:
    """Most pages one request holds while it grows to n tokens, one token a step."""
    free = pool.num_free_blocks
    pool.allocate(0, 1, n)
    peak = free - pool.num_free_blocks
    for _ in range(n - 1):
        assert pool.append(0, 1)
        peak = max(peak, free - pool.num_free_blocks)
    pool.free(0)
    return peak


def test_gemma3_pool_pages_are_vllms_padded_groups():
    page, managers = make_managers(load_spec("gemma-3-27b").groups, 16, "bf16", 1)
    assert page == BLOCK and [(m.kind, m.pages) for m in managers] == [("full", 1), ("sliding", 6)]
    assert [vllm_blocks(n) for n in CONTEXTS] == [63 + 6 * 63, 128 + 6 * 65, 512 + 6 * 65]


def test_gemma3_simulator_pool_equals_the_capacity_side():
    """Pages per request at 1K, 2K and 8K tokens, the pool's pages and the sequences that fit equal
    `sim capacity`'s (kv_per_seq_bytes, max_concurrent); a budget of num_gpu_blocks blocks gives a
    pool of num_gpu_blocks pages."""
    spec, gpu = load_spec("gemma-3-27b"), get_gpu("h100-sxm")
    table = add_vllm_pool(capacity_table(spec, gpu, CONTEXTS), spec, gpu)
    a = table["assumptions"]
    assert a["vllm_memory"]["bytes_per_block"] == BLOCK
    dep = Deployment.resolve(Scenario(model="gemma-3-27b", gpu="h100-sxm"))
    pool = dep.make_allocator()
    assert pool.page_bytes == BLOCK and pool.num_free_blocks == dep.kv_budget_bytes // BLOCK
    for row in table["rows"]:
        n = row["context"]
        pages = driven_peak(pool, n)
        assert pages == vllm_blocks(n) == row["vllm_blocks_per_seq"]
        assert pages * pool.page_bytes == row["kv_per_seq_bytes"]
        assert pool.num_free_blocks // pages == row["max_concurrent"]
    blocks = a["num_gpu_blocks"]
    exact = Deployment.resolve(Scenario(model="gemma-3-27b", gpu="h100-sxm", kv_budget_gib=(blocks + 0.5) * BLOCK / GiB))
    assert exact.make_allocator().num_free_blocks == blocks


@pytest.mark.parametrize("model,layers", [("gpt-oss-20b", 12), ("gpt-oss-120b", 18)])
def test_gpt_oss_equal_groups_unpadded(model, layers):
    """gpt-oss: as many full as sliding(128) layers, one group of each, no padding: a page is one
    group's block (layers x 16 tokens x 2 x 8 kv heads x 64 x 2 B), each group's block one page."""
    page, managers = make_managers(load_spec(model).groups, 16, "bf16", 1)
    assert page == layers * 16 * 2 * 8 * 64 * 2 and [m.pages for m in managers] == [1, 1]

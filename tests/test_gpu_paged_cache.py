"""The KV pool: bytes equal ModelSpec's formula exactly, writes land where block tables say, the
padding block absorbs nothing real, and the paged and contiguous allocators drive one pool."""

from __future__ import annotations

import pytest
import torch

from gpu_backend.executor import ModelRunner
from gpu_backend.model_loader import load_model
from gpu_backend.paged_cache import PagedKVCache, blocks_for_budget, cuda_kv_budget_bytes
from models.spec import load_spec
from sim.core.kv.contiguous import ContiguousAllocator
from sim.core.kv.paged import PagedAllocator
from tests.test_gpu_attention import expected_tokens, paged_generate, prompts, reference_model


@pytest.mark.parametrize("kv_dtype", ["fp32", "fp16", "bf16", "fp8", "int8"])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_pool_bytes_equal_formula(kv_dtype, kv_heads):
    spec = load_spec("tiny-llama").with_kv_heads(kv_heads)
    cache = PagedKVCache.from_budget(spec, kv_dtype, 16, 3_000_000)
    slots = cache.num_blocks * cache.block_size
    assert cache.pool_bytes == spec.kv_bytes_per_token(kv_dtype) * slots + spec.kv_fixed_bytes(kv_dtype)
    assert cache.num_blocks == blocks_for_budget(spec, kv_dtype, 16, 3_000_000)
    assert cache.pool_bytes <= 3_000_000 < cache.pool_bytes + spec.kv_bytes_per_token(kv_dtype) * 16
    assert cache.usable_blocks == cache.num_blocks - 1


def test_budget_too_small_is_one_line_error():
    with pytest.raises(ValueError, match="at least 2"):
        PagedKVCache.from_budget(load_spec("tiny-llama"), "fp16", 16, 100)


def test_cuda_budget_arithmetic():
    assert cuda_kv_budget_bytes(80 << 30, 0.9, 20 << 30) == int((80 << 30) * 0.9) - (20 << 30)


@pytest.mark.parametrize("kv_dtype", ["fp32", "int8", "fp8"])
def test_write_then_gather_and_padding_block(kv_dtype):
    cache = PagedKVCache(2, 9, 4, 2, 8, kv_dtype)
    table = [5, 2, 7]  # allocator ids, deliberately scattered
    k = torch.randn(10, 2, 8)
    v = torch.randn(10, 2, 8)
    cache.write(1, torch.tensor(cache.slots(table, 0, 10)), k, v)
    gk, gv = cache.gather(1, torch.tensor([PagedKVCache.physical(table)]))
    tol = 0 if kv_dtype == "fp32" else 0.2
    assert torch.allclose(gk[0, :10], k, atol=tol) and torch.allclose(gv[0, :10], v, atol=tol)
    assert cache.k[:, 0].float().abs().sum() == 0  # padding block untouched
    assert cache.k[0].float().abs().sum() == 0  # other layer untouched
    sk, sv = cache.gather_slots(1, torch.tensor(cache.slots(table, 3, 6)))
    assert torch.equal(sk, gk[0, 3:6]) and torch.equal(sv, gv[0, 3:6])


def test_swap_blocks_roundtrip():
    cache = PagedKVCache(2, 6, 4, 2, 8, "int8")
    cache.write(0, torch.tensor(cache.slots([1], 0, 4)), torch.randn(4, 2, 8), torch.randn(4, 2, 8))
    saved = cache.read_blocks([1])
    cache.write_blocks([0], saved)
    assert torch.equal(cache.k[:, 1], cache.k[:, 2]) and torch.equal(cache.v_scale[:, 1], cache.v_scale[:, 2])


def test_paged_and_contiguous_on_one_pool():
    """Same pool object, two allocators in turn: both give generate()'s tokens, contiguous tables
    are runs of consecutive ids, paged tables interleave across requests."""
    loaded = load_model("tiny-llama", seed=1)
    spec = loaded.spec
    cache = PagedKVCache(spec.num_layers, 64, 4, spec.num_kv_heads, spec.head_dim, "fp32")
    runner = ModelRunner(loaded, cache, "sdpa")
    ps = prompts(11)
    want = expected_tokens(reference_model(loaded), ps)
    tables = {}
    for name, alloc in (("paged", PagedAllocator(cache.usable_blocks, 4, 1)),
                        ("contiguous", ContiguousAllocator(cache.usable_blocks, 4, 1))):
        assert paged_generate(runner, ps, 10, alloc=alloc, keep=True) == want
        tables[name] = [alloc.block_table(r) for r in range(len(ps))]
    for t in tables["contiguous"]:
        assert t == list(range(t[0], t[0] + len(t)))
    assert any(t != list(range(t[0], t[0] + len(t))) for t in tables["paged"])

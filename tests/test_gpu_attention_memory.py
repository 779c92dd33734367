"""Attention that scales, checked by construction on the meta device: one attention step's peak
transient memory for 256 sequences x 2,048 tokens of context (an 8B model's layer: 32 query heads,
8 kv heads, head_dim 128, bf16) stays within 2x the KV it reads, and a long prefill in the same
step does not pad the decodes to its length. Per-step metadata is built without reading any device
tensor back (on meta such a read fails), and equals a per-token reference."""

from __future__ import annotations

import pytest
import torch

from gpu_backend.attention import paged_attention_forward
from gpu_backend.batch import SeqChunk, build_batch
from gpu_backend.paged_cache import PagedKVCache
from tests.memory_probe import PeakProbe

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16


class _Layer:
    layer_idx = 0


def meta_step(contexts: list[int], new: list[int], kv_dtype: str = "bf16"):
    """Peak transient bytes of one layer's paged attention, and the bytes of KV it reads."""
    blocks = [-(-c // BLOCK) for c in contexts]
    cache = PagedKVCache(1, sum(blocks) + 1, BLOCK, KV_HEADS, HEAD_DIM, kv_dtype, torch.bfloat16, "meta")
    firsts = [sum(blocks[:i]) for i in range(len(blocks))]
    chunks = [SeqChunk(list(range(f, f + b)), c - n, n) for f, b, c, n in zip(firsts, blocks, contexts, new, strict=True)]
    batch = build_batch(cache, chunks, "sdpa", HEADS)
    t = sum(new)
    q = torch.empty(1, HEADS, t, HEAD_DIM, dtype=torch.bfloat16, device="meta")
    k = torch.empty(1, KV_HEADS, t, HEAD_DIM, dtype=torch.bfloat16, device="meta")
    v = torch.empty_like(k)
    existing = [cache.k, cache.v, q, k, v] + [x for x in (cache.k_scale, cache.v_scale) if x is not None]
    with PeakProbe(*existing) as probe:
        out, _ = paged_attention_forward(_Layer(), q, k, v, None, scaling=HEAD_DIM**-0.5, kvsim_batch=batch)
        assert out.shape == (1, t, HEADS, HEAD_DIM)
        del out
    kv_read = sum(contexts) * cache.pool_bytes // (cache.num_blocks * BLOCK)
    return probe.peak, kv_read


def test_decode_256_by_2048_within_twice_the_kv_read():
    peak, kv_read = meta_step([2048] * 256, [1] * 256)
    assert kv_read == 256 * 2048 * 2 * KV_HEADS * HEAD_DIM * 2  # K and V, bf16: 2 GiB per layer
    assert peak <= 2 * kv_read, f"peak {peak / 2**30:.2f} GiB vs KV read {kv_read / 2**30:.2f} GiB"


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_quantised_decode_within_twice_the_kv_read(kv_dtype):
    peak, kv_read = meta_step([2048] * 256, [1] * 256, kv_dtype)
    assert peak <= 2 * kv_read


def test_long_prefill_does_not_pad_the_decodes():
    """255 decodes at 2,048 tokens and one 4,096-token prefill: the old path padded every request's
    queries to 4,096 rows; grouped, the step stays within 2x the KV it reads."""
    peak, kv_read = meta_step([2048] * 255 + [4096], [1] * 255 + [4096])
    assert peak <= 2 * kv_read


def test_metadata_builds_on_meta_without_host_reads():
    cache = PagedKVCache(1, 600, BLOCK, KV_HEADS, HEAD_DIM, "bf16", torch.bfloat16, "meta")
    chunks = [SeqChunk(list(range(2 * i, 2 * i + 2)), 20, 1) for i in range(200)] + [SeqChunk(list(range(400, 410)), 0, 150)]
    batch = build_batch(cache, chunks, "sdpa", HEADS)  # any .item()/.tolist() of a device tensor raises on meta
    assert batch.slot_mapping.shape == (350,) and batch.num_tokens == 350


def test_metadata_equals_per_token_reference():
    cache = PagedKVCache(1, 40, 4, 2, 8)
    chunks = [SeqChunk([7, 3, 9], 5, 1), SeqChunk([1, 2, 0, 4], 0, 13), SeqChunk([11, 12], 2, 3)]
    batch = build_batch(cache, chunks, "sdpa", 4)
    want = [s for c in chunks for s in cache.slots(c.block_table, c.start, c.context_len)]
    assert batch.slot_mapping.tolist() == want
    assert batch.token_pos.tolist() == [p for c in chunks for p in range(c.start, c.context_len)]
    covered = sorted(i for g in batch.groups for i in g.out_index.tolist())
    assert covered == list(range(batch.num_tokens))  # every query row written exactly once

"""Paged attention plugged into transformers through AttentionInterface.

A step's tokens (prefill chunks and decode tokens of many requests) are packed into ONE sequence
(batch 1, total tokens T) with per-token position_ids, so the model applies RoPE correctly to a
ragged batch. The model calls `paged_attention_forward` once per layer with q/k/v shaped
[1, heads, T, head_dim] after RoPE; we write the new K/V into the pool through the step's slot
mapping and attend over each request's blocks through its block table. `PagedBatch` (built once
per step, shared by all layers) travels in the model's **kwargs as `kvsim_batch`.

Two paths compute the same thing:
- "sdpa" (portable, CPU and CUDA): gather each request's blocks into a padded [B, ctx, ...]
  tensor and call scaled_dot_product_attention with a per-request causal mask and enable_gqa.
- "flex" (chosen automatically on CUDA): gather only the real context tokens into one packed
  key sequence and run FlexAttention with a document-causal block mask (no padding work). Its
  logic is tested on CPU in eager mode; the compiled CUDA kernel has NOT been run on hardware in
  this project. If it raises, the step falls back to "sdpa" once and stays there (logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from gpu_backend.paged_cache import PAD_BLOCK, PagedKVCache

ATTN_NAME = "kvsim_paged"
log = logging.getLogger(__name__)


@dataclass
class SeqChunk:
    """One request's share of a step: `num_new` tokens at positions [start, start + num_new)."""

    block_table: list[int]  # allocator block ids, token order
    start: int
    num_new: int

    @property
    def context_len(self) -> int:
        return self.start + self.num_new


@dataclass
class PagedBatch:
    """Per-step attention metadata (index tensors on the model's device)."""

    cache: PagedKVCache
    impl: str
    slot_mapping: torch.Tensor  # [T] pool slot of each packed token
    block_tables: torch.Tensor  # [B, max_blocks] pool block ids (padding -> PAD_BLOCK)
    query_start_loc: list[int]  # B + 1 offsets into the packed tokens
    context_lens: list[int]  # tokens in the cache for each request after this step's writes
    q_pos: torch.Tensor  # [B, max_q] position of each query (0 for padding)
    q_index: torch.Tensor  # [B, max_q] packed token index (0 for padding)
    q_valid: torch.Tensor  # [B, max_q] bool
    _masks: dict = field(default_factory=dict, repr=False)
    _flex: dict = field(default_factory=dict, repr=False)

    @property
    def num_tokens(self) -> int:
        return self.query_start_loc[-1]

    def padded_mask(self, window: int | None) -> torch.Tensor:
        """[B, 1, max_q, ctx] bool: key position <= query position (and within the sliding window)."""
        if window not in self._masks:
            ctx = self.block_tables.shape[1] * self.cache.block_size
            kpos = torch.arange(ctx, device=self.q_pos.device)
            qpos = self.q_pos.unsqueeze(-1)
            allowed = kpos <= qpos
            if window:
                allowed &= kpos > qpos - window
            self._masks[window] = allowed.unsqueeze(1)
        return self._masks[window]


def build_batch(cache: PagedKVCache, chunks: list[SeqChunk], impl: str | None = None) -> PagedBatch:
    """Turn the step's chunks into index tensors (one host->device copy each)."""
    dev, bs = cache.device, cache.block_size
    slots: list[int] = []
    starts = [0]
    for c in chunks:
        if c.context_len > len(c.block_table) * bs:
            raise ValueError(f"block table of {len(c.block_table)} blocks cannot hold {c.context_len} tokens")
        slots += cache.slots(c.block_table, c.start, c.context_len)
        starts.append(starts[-1] + c.num_new)
    max_blocks = max(-(-c.context_len // bs) for c in chunks)
    tables = [PagedKVCache.physical(c.block_table[: -(-c.context_len // bs)]) for c in chunks]
    tables = [t + [PAD_BLOCK] * (max_blocks - len(t)) for t in tables]
    max_q = max(c.num_new for c in chunks)
    q_pos = [[c.start + i if i < c.num_new else 0 for i in range(max_q)] for c in chunks]
    q_index = [[s + i if i < c.num_new else 0 for i in range(max_q)] for c, s in zip(chunks, starts[:-1], strict=True)]
    q_valid = [[i < c.num_new for i in range(max_q)] for c in chunks]

    def t(x, dtype=torch.long):
        return torch.tensor(x, dtype=dtype, device=dev)

    return PagedBatch(cache=cache, impl=impl or default_impl(dev), slot_mapping=t(slots),
                      block_tables=t(tables), query_start_loc=starts,
                      context_lens=[c.context_len for c in chunks], q_pos=t(q_pos), q_index=t(q_index),
                      q_valid=t(q_valid, torch.bool))


def default_impl(device: torch.device) -> str:
    return "flex" if torch.device(device).type == "cuda" else "sdpa"


_flex_broken = False


def paged_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                            sliding_window=None, kvsim_batch: PagedBatch | None = None, **kwargs):
    """AttentionInterface entry: q/k/v [1, heads, T, head_dim] -> ([1, T, heads, head_dim], None)."""
    global _flex_broken
    if kvsim_batch is None:
        raise RuntimeError(f"{ATTN_NAME} attention needs kvsim_batch=PagedBatch in the model call")
    batch, layer = kvsim_batch, module.layer_idx
    # Write this step's K/V: [1, kv_heads, T, d] -> [T, kv_heads, d].
    batch.cache.write(layer, batch.slot_mapping, key[0].transpose(0, 1), value[0].transpose(0, 1))
    if batch.impl == "flex" and not _flex_broken:
        try:
            return _flex_path(batch, layer, query, scaling, sliding_window), None
        except Exception as exc:  # noqa: BLE001 - fall back to the portable path, once, loudly
            _flex_broken = True
            log.warning("FlexAttention path failed (%s); using the portable SDPA path from now on", exc)
    return _sdpa_path(batch, layer, query, scaling, sliding_window), None


def _sdpa_path(batch: PagedBatch, layer: int, query: torch.Tensor, scaling, window) -> torch.Tensor:
    k, v = batch.cache.gather(layer, batch.block_tables)  # [B, ctx, kv_heads, d]
    k, v = k.transpose(1, 2), v.transpose(1, 2)  # [B, kv_heads, ctx, d]
    q = query[0][:, batch.q_index].permute(1, 0, 2, 3)  # [heads, B, max_q, d] -> [B, heads, max_q, d]
    out = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=batch.padded_mask(window),
                                         scale=scaling, enable_gqa=q.shape[1] != k.shape[1])
    return out.transpose(1, 2)[batch.q_valid].unsqueeze(0)  # [1, T, heads, d]


# --- FlexAttention (fast path on CUDA) -----------------------------------------------------------

def _flex_meta(batch: PagedBatch, window: int | None):
    """Packed-key metadata: pool slots of every context token, and the document-causal block mask."""
    if window in batch._flex:
        return batch._flex[window]
    from torch.nn.attention.flex_attention import create_block_mask

    dev, bs = batch.cache.device, batch.cache.block_size
    kv_slots, kv_seq, kv_pos, q_seq, q_pos = [], [], [], [], []
    for i, ctx in enumerate(batch.context_lens):
        table = batch.block_tables[i].tolist()
        kv_slots += [table[p // bs] * bs + p % bs for p in range(ctx)]
        kv_seq += [i] * ctx
        kv_pos += list(range(ctx))
        n = batch.query_start_loc[i + 1] - batch.query_start_loc[i]
        q_seq += [i] * n
        q_pos += list(range(ctx - n, ctx))
    kv_seq_t, kv_pos_t = torch.tensor(kv_seq, device=dev), torch.tensor(kv_pos, device=dev)
    q_seq_t, q_pos_t = torch.tensor(q_seq, device=dev), torch.tensor(q_pos, device=dev)

    def mask_mod(b, h, qi, ki):
        ok = (q_seq_t[qi] == kv_seq_t[ki]) & (kv_pos_t[ki] <= q_pos_t[qi])
        if window:
            ok = ok & (kv_pos_t[ki] > q_pos_t[qi] - window)
        return ok

    block_mask = create_block_mask(mask_mod, None, None, len(q_seq), len(kv_seq), device=dev)
    meta = (torch.tensor(kv_slots, device=dev), block_mask)
    batch._flex[window] = meta
    return meta


_compiled_flex = None


def _flex_fn(device: torch.device):
    """Compiled FlexAttention on CUDA (the fused kernel); eager elsewhere (reference speed)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention, dynamic=True)
    return _compiled_flex


def _flex_path(batch: PagedBatch, layer: int, query: torch.Tensor, scaling, window) -> torch.Tensor:
    kv_slots, block_mask = _flex_meta(batch, window)
    k, v = batch.cache.gather_slots(layer, kv_slots)  # [N, kv_heads, d]
    k = k.transpose(0, 1).unsqueeze(0).to(query.dtype)
    v = v.transpose(0, 1).unsqueeze(0).to(query.dtype)
    out = _flex_fn(batch.cache.device)(query, k, v, block_mask=block_mask, scale=scaling,
                                       enable_gqa=query.shape[1] != k.shape[1])
    return out.transpose(1, 2)  # [1, T, heads, d]


def register() -> str:
    """Register the paged attention with transformers (idempotent); returns its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, paged_attention_forward)
    return ATTN_NAME

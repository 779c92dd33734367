"""Paged attention plugged into transformers through AttentionInterface.

A step's tokens (prefill chunks and decode tokens of many requests) are packed into ONE sequence
(batch 1, total tokens T) with per-token position_ids, so the model applies RoPE correctly to a
ragged batch. The model calls `paged_attention_forward` once per layer with q/k/v shaped
[1, heads, T, head_dim] after RoPE; we write the new K/V into the pool through the step's slot
mapping and attend over each request's blocks through its block table. `PagedBatch` (built once
per step by gpu_backend.batch, shared by all layers) reaches the layers through `step_context`
(one context per step, as nano-vllm does), so families whose layers pass no **kwargs work too.

Two paths compute the same thing:
- "sdpa" (default everywhere): requests sorted by context and grouped (gpu_backend.batch.plan_groups)
  so a group pads little and its gathered K/V stays under a byte cap; per group, gather the blocks
  and call scaled_dot_product_attention with the GQA query heads folded into query rows (no K/V
  repeat, no enable_gqa: a masked fused kernel applies on CUDA). No padding to the longest request
  of the step, bounded transient memory (tests/test_gpu_attention_memory.py).
- "flex" (opt-in, CUDA): gather only the real context tokens into one packed key sequence and run
  FlexAttention with a document-causal block mask, built compiled on CUDA (no dense mask). Its logic
  is tested on CPU in eager mode; the compiled kernel has NOT run on hardware in this project. If it
  raises, the process falls back to "sdpa" and the step reports the path that really ran.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import torch.nn.functional as F

from gpu_backend.batch import Group, PagedBatch, SeqChunk, build_batch  # noqa: F401 - re-exported

ATTN_NAME = "kvsim_paged"
IMPLS = ("sdpa", "flex")
log = logging.getLogger(__name__)
_current: ContextVar[PagedBatch | None] = ContextVar("kvsim_batch", default=None)


@contextmanager
def step_context(batch: PagedBatch) -> Iterator[PagedBatch]:
    """Make `batch` the step every paged attention layer reads until the block ends."""
    token = _current.set(batch)
    try:
        yield batch
    finally:
        _current.reset(token)


def default_impl(device: torch.device) -> str:
    """The grouped SDPA path: its memory is bounded by construction and its kernels are stock torch."""
    return "sdpa"


class _FlexState:
    """Whether FlexAttention failed in this process, and why (reported, never hidden)."""

    failure: str | None = None


def flex_failure() -> str | None:
    """Why FlexAttention was abandoned in this process (None while it has not failed)."""
    return _FlexState.failure


def paged_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                            sliding_window=None, kvsim_batch: PagedBatch | None = None, **kwargs):
    """AttentionInterface entry: q/k/v [1, heads, T, head_dim] -> ([1, T, heads, head_dim], None)."""
    batch = kvsim_batch or _current.get()
    if batch is None:
        raise RuntimeError(f"{ATTN_NAME} attention needs a PagedBatch: run the model inside step_context(batch)")
    layer = module.layer_idx
    # Write this step's K/V: [1, kv_heads, T, d] -> [T, kv_heads, d].
    batch.cache.write(layer, batch.slot_mapping, key[0].transpose(0, 1), value[0].transpose(0, 1))
    if batch.impl == "flex" and _FlexState.failure is None:
        try:
            out = _flex_path(batch, layer, query, scaling, sliding_window)
            batch.used.add("flex")
            return out, None
        except Exception as exc:  # noqa: BLE001 - fall back to the portable path, once, loudly
            _FlexState.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log.warning("FlexAttention path failed (%s); using the SDPA path from now on", _FlexState.failure)
    batch.used.add("sdpa")
    return _sdpa_path(batch, layer, query, scaling, sliding_window), None


# --- grouped SDPA (default) -------------------------------------------------------------------------

def _sdpa_path(batch: PagedBatch, layer: int, query: torch.Tensor, scaling, window) -> torch.Tensor:
    heads, t, d = query.shape[1], query.shape[2], query.shape[3]
    kv_heads = batch.cache.num_kv_heads
    g = heads // kv_heads
    q_all = query[0].transpose(0, 1)  # [T, heads, d] (a view)
    out = query.new_empty(t, heads, d)
    for grp in batch.groups:
        out.index_copy_(0, grp.out_index, _group_attention(batch, grp, layer, q_all, scaling, window, g))
    return out.unsqueeze(0)


def _group_attention(batch: PagedBatch, grp: Group, layer: int, q_all: torch.Tensor, scaling, window,
                     g: int) -> torch.Tensor:
    """One group: [rows, ctx] gathered K/V, queries folded to [rows, kv_heads, g * q_len, d]."""
    bs = batch.cache.block_size
    k, v = batch.cache.gather(layer, batch.block_tables[grp.rows, : grp.ctx // bs])  # [b, ctx, kv, d]
    b, q_len = grp.q_index.shape
    kv_heads, d = k.shape[2], k.shape[3]
    q = q_all[grp.q_index.reshape(-1)].view(b, q_len, kv_heads, g, d)  # packed rows -> [b, q_len, kv, g, d]
    q = q.permute(0, 2, 3, 1, 4).reshape(b, kv_heads, g * q_len, d)
    kpos = torch.arange(grp.ctx, device=k.device)
    allowed = kpos <= grp.q_pos.unsqueeze(-1)  # [b, q_len, ctx]
    if window:
        allowed &= kpos > grp.q_pos.unsqueeze(-1) - window
    mask = allowed.unsqueeze(1).expand(b, g, q_len, grp.ctx).reshape(b, 1, g * q_len, grp.ctx)
    o = F.scaled_dot_product_attention(q, k.transpose(1, 2).to(q.dtype), v.transpose(1, 2).to(q.dtype),
                                       attn_mask=mask, scale=scaling)  # [b, kv, g * q_len, d]
    o = o.view(b, kv_heads, g, q_len, d).permute(0, 3, 1, 2, 4).reshape(b * q_len, kv_heads * g, d)
    return o[grp.valid_rows]


# --- FlexAttention (opt-in) ----------------------------------------------------------------------------

def _flex_meta(batch: PagedBatch, window: int | None):
    """Packed-key metadata from the batch's tensors (no host loop, no sync) and the document-causal
    block mask, created compiled on CUDA so the full [T, N] mask never exists."""
    if window in batch.flex_cache:
        return batch.flex_cache[window]
    from torch.nn.attention.flex_attention import create_block_mask

    dev, bs, n_kv = batch.cache.device, batch.cache.block_size, batch.num_context_tokens
    b = len(batch.context_lens)
    kv_seq = torch.repeat_interleave(torch.arange(b, device=dev), batch.context_lens_t, output_size=n_kv)
    kv_start = torch.cumsum(batch.context_lens_t, 0) - batch.context_lens_t
    kv_pos = torch.arange(n_kv, device=dev) - kv_start[kv_seq]
    kv_slots = batch.block_tables[kv_seq, kv_pos // bs] * bs + kv_pos % bs
    q_seq, q_pos = batch.token_seq, batch.token_pos

    def mask_mod(bb, h, qi, ki):
        ok = (q_seq[qi] == kv_seq[ki]) & (kv_pos[ki] <= q_pos[qi])
        if window:
            ok = ok & (kv_pos[ki] > q_pos[qi] - window)
        return ok

    block_mask = create_block_mask(mask_mod, None, None, batch.num_tokens, n_kv, device=dev,
                                   _compile=dev.type == "cuda")
    batch.flex_cache[window] = (kv_slots, block_mask)
    return batch.flex_cache[window]


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

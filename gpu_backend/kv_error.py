"""Accuracy harness for quantised KV: the measured error of a quantised pool against a reference pool.

Kept apart from quant.py (the storage formats) because it drives the attention and the model runner,
which themselves store K/V through quant.py: one direction of imports, no cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpu_backend.attention import SeqChunk, build_batch, paged_attention_forward
from gpu_backend.executor import ModelRunner
from gpu_backend.paged_cache import PagedKVCache

# --- measuring the error --------------------------------------------------------------------------

@dataclass(frozen=True)
class QuantError:
    """Error of an approximation against a reference: max |diff| and ||diff|| / ||ref||."""

    max_abs: float
    rel_l2: float

    def as_dict(self) -> dict[str, float]:
        return {"max_abs": self.max_abs, "rel_l2": self.rel_l2}


def measure_error(reference: torch.Tensor, approx: torch.Tensor) -> QuantError:
    ref, app = reference.double(), approx.double()
    diff = app - ref
    denom = ref.norm().item() or 1.0
    return QuantError(max_abs=diff.abs().max().item(), rel_l2=diff.norm().item() / denom)


# --- measured error of a quantised pool against a reference pool -----------------------------------

def attention_output_error(kv_dtype: str, reference_kv: str = "fp32", *, tokens: int = 256, kv_heads: int = 2,
                           heads: int = 4, head_dim: int = 64, seed: int = 0) -> QuantError:
    """Paged attention over Gaussian K/V stored as `kv_dtype` vs stored as `reference_kv`
    (the same 32-token causal prefill of one request, 256 context tokens)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, tokens, head_dim, generator=g)
    k = torch.randn(1, kv_heads, tokens, head_dim, generator=g)
    v = torch.randn(1, kv_heads, tokens, head_dim, generator=g)

    class _Layer:
        layer_idx = 0

    outs = []
    for name in (reference_kv, kv_dtype):
        cache = PagedKVCache(1, tokens // 16 + 1, 16, kv_heads, head_dim, name)
        batch = build_batch(cache, [SeqChunk(list(range(tokens // 16)), 0, tokens)], "sdpa")
        out, _ = paged_attention_forward(_Layer(), q, k, v, None, scaling=head_dim**-0.5, kvsim_batch=batch)
        outs.append(out)
    return measure_error(outs[0], outs[1])


def logits_error(loaded, kv_dtype: str, prompt_ids: list[list[int]], new_tokens: int,
                 reference_kv: str = "fp32", block_size: int = 16) -> QuantError:
    """Logits of `loaded` with its KV stored as `kv_dtype` vs `reference_kv`, over a ragged prefill
    and `new_tokens` decode steps. Teacher-forced: both runs are fed the reference's greedy tokens,
    so the error is that of the KV storage alone, not of diverging samples."""
    spec = loaded.spec
    per_req = -(-(max(map(len, prompt_ids)) + new_tokens) // block_size)
    tables = [list(range(i * per_req, (i + 1) * per_req)) for i in range(len(prompt_ids))]
    runners = [ModelRunner(loaded, PagedKVCache(spec.num_layers, per_req * len(prompt_ids) + 1, block_size,
                                                spec.num_kv_heads, spec.head_dim, name, loaded.dtype, loaded.device),
                           "sdpa") for name in (reference_kv, kv_dtype)]
    chunks = [SeqChunk(t, 0, len(p)) for t, p in zip(tables, prompt_ids, strict=True)]
    feed = [list(p) for p in prompt_ids]
    ref_all, got_all = [], []
    for _ in range(new_tokens + 1):
        ref, got = (r.logits(chunks, feed) for r in runners)
        ref_all.append(ref)
        got_all.append(got)
        feed = [[t] for t in ref.argmax(-1).tolist()]
        chunks = [SeqChunk(c.block_table, c.context_len, 1) for c in chunks]
    return measure_error(torch.cat(ref_all), torch.cat(got_all))

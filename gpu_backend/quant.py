"""Quantised KV storage: int8 with a scale per token per kv head, fp8 e4m3 with a scale per layer.

The byte layout is exactly the one models/kv_dtypes.py counts, so a measured pool and a simulated
capacity agree to the byte:
- int8: values int8 [.., head_dim] plus one fp32 scale per (token, kv head) for K and for V.
  The scale is amax(|row|) / 127 so every row uses the full int8 range (symmetric, round to nearest).
- fp8 e4m3: values float8_e4m3fn plus one fp32 scale per layer for K and one for V. A per-layer
  scale cannot follow each token, so it is calibrated once, on the first write to that layer:
  amax / (448 / FP8_HEADROOM). Later values larger than the calibrated range saturate at +-448
  (clamped, never inf/NaN); the headroom makes that rare for activations of a steady model.
int4 is counted by the simulator but not stored by the backend (no packed int4 kernel here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.kv_dtypes import get_kv_dtype

INT8_MAX = 127.0
FP8_MAX = 448.0  # largest finite float8_e4m3fn
FP8_HEADROOM = 4.0  # calibrated fp8 scale leaves room for values 4x the first batch's amax
MIN_SCALE = 1e-8  # an all-zero row still gets a finite, positive scale

STORAGE_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
    "int8": torch.int8,
}


class UnsupportedKVDtype(ValueError):
    """The simulator knows this KV dtype but the backend cannot store it (one-line message)."""


def storage_dtype(kv_dtype: str) -> torch.dtype:
    """torch dtype of the pool tensors for a KV dtype name (aliases accepted)."""
    name = get_kv_dtype(kv_dtype).name
    if name not in STORAGE_DTYPES:
        raise UnsupportedKVDtype(f"KV dtype {name!r} is simulated only; the GPU backend stores "
                                 f"{', '.join(STORAGE_DTYPES)}")
    return STORAGE_DTYPES[name]


def is_quantised(kv_dtype: str) -> bool:
    return get_kv_dtype(kv_dtype).name in ("fp8", "int8")


# --- int8, scale per row (token x kv head) ----------------------------------------------------

def quantise_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., head_dim] -> (int8 values [..., head_dim], fp32 scales [...])."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1) / INT8_MAX).clamp_min(MIN_SCALE)
    q = torch.round(xf / scale.unsqueeze(-1)).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def dequantise_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (q.float() * scale.unsqueeze(-1)).to(dtype)


# --- fp8 e4m3, one scale per layer ---------------------------------------------------------------

def fp8_scale_for(x: torch.Tensor) -> torch.Tensor:
    """The per-layer scale calibrated from the first values written (a 0-d fp32 tensor)."""
    amax = x.detach().float().abs().amax()
    return (amax * FP8_HEADROOM / FP8_MAX).clamp_min(MIN_SCALE)


def quantise_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (x.float() / scale).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def dequantise_fp8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (q.float() * scale).to(dtype)


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
    from gpu_backend.attention import SeqChunk, build_batch, paged_attention_forward
    from gpu_backend.paged_cache import PagedKVCache

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
    from gpu_backend.attention import SeqChunk
    from gpu_backend.executor import ModelRunner
    from gpu_backend.paged_cache import PagedKVCache

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

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

"""Quantised KV storage: round-trip bounds per element, and the measured error of attention output
and logits against fp32 and fp16 pools (bounds about 2x the measured values in docs/GPU_BACKEND.md)."""

from __future__ import annotations

import pytest
import torch

from gpu_backend import kv_error, quant
from gpu_backend.model_loader import load_model


def test_int8_roundtrip_within_half_a_step():
    x = torch.randn(64, 4, 32, generator=torch.Generator().manual_seed(0)) * 3
    q, scale = quant.quantise_int8(x)
    assert q.dtype == torch.int8 and scale.shape == (64, 4) and scale.dtype == torch.float32
    back = quant.dequantise_int8(q, scale, torch.float32)
    assert ((back - x).abs() <= scale.unsqueeze(-1) / 2 + 1e-6).all()
    assert q.abs().amax(-1).eq(127).all()  # every row uses the full range


def test_int8_zero_row_is_finite():
    q, scale = quant.quantise_int8(torch.zeros(2, 8))
    assert torch.isfinite(quant.dequantise_int8(q, scale, torch.float32)).all()


def test_fp8_relative_error_and_saturation():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    scale = quant.fp8_scale_for(x)
    back = quant.dequantise_fp8(quant.quantise_fp8(x, scale), scale, torch.float32)
    normal = x.abs() > scale * 2**-6  # e4m3 normal range: 3 mantissa bits, relative step 2^-3
    assert ((back - x).abs()[normal] <= x.abs()[normal] * 2**-4 + 1e-7).all()
    big = quant.dequantise_fp8(quant.quantise_fp8(x * 100, scale), scale, torch.float32)
    assert torch.isfinite(big).all() and big.abs().max() <= quant.FP8_MAX * scale + 1e-6


def test_int4_is_rejected_with_one_line():
    with pytest.raises(quant.UnsupportedKVDtype, match="simulated only"):
        quant.storage_dtype("int4")


# Bounds on the measured error (max |diff|, ||diff||/||ref||); measured values in the comments.
ATTN_BOUNDS = {"int8": (0.04, 0.016), "fp8": (0.3, 0.075), "bf16": (0.02, 0.005)}  # 0.016/0.0079, 0.15/0.037, 0.0071/0.0021
LOGIT_BOUNDS = {"int8": (0.005, 0.004), "fp8": (0.025, 0.026), "bf16": (0.0015, 0.0015)}  # 0.0023/0.0020, 0.011/0.013


@pytest.mark.parametrize("reference", ["fp32", "fp16"])
@pytest.mark.parametrize("kv_dtype", list(ATTN_BOUNDS))
def test_attention_output_error_bounded(kv_dtype, reference):
    err = kv_error.attention_output_error(kv_dtype, reference)
    max_abs, rel = ATTN_BOUNDS[kv_dtype]
    assert 0 < err.rel_l2 <= rel and err.max_abs <= max_abs


@pytest.fixture(scope="module")
def tiny():
    g = torch.Generator().manual_seed(0)
    return load_model("tiny-llama", seed=3), [torch.randint(3, 256, (n,), generator=g).tolist() for n in (9, 40, 100)]


@pytest.mark.parametrize("kv_dtype", list(LOGIT_BOUNDS))
def test_logits_error_bounded(tiny, kv_dtype):
    loaded, prompts = tiny
    for reference in ("fp32", "fp16"):
        err = kv_error.logits_error(loaded, kv_dtype, prompts, 16, reference)
        max_abs, rel = LOGIT_BOUNDS[kv_dtype]
        assert 0 < err.rel_l2 <= rel and err.max_abs <= max_abs


def test_same_dtype_has_zero_error(tiny):
    loaded, prompts = tiny
    assert kv_error.logits_error(loaded, "fp16", prompts, 4, "fp16").max_abs == 0.0

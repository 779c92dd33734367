"""Step time per KV group and MoE weight streaming (roofline), against hand-computed figures."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from models.gpus import get_gpu
from models.spec import load_spec
from sim.run.deployment import Deployment
from sim.scenario import Scenario
from sim.timing.cost_model import CostModel

H100 = get_gpu("h100-sxm")
BW = 3350e9 * 0.84  # H100 HBM x its measured streaming efficiency (models/gpus.py)
ATTN_PEAK = 989.4e12 * 0.6


def roofline(model: str, spec=None, **scenario) -> CostModel:
    sc = Scenario(model=model, gpu="h100-sxm", cost_source="roofline", **scenario)
    return CostModel.from_scenario(spec or Deployment.model_of(sc), H100, sc)


def all_full(name: str):
    """The same model with every layer treated as full attention (the pre-groups step cost)."""
    return dataclasses.replace(load_spec(name), kv_groups=())


def test_gpt_oss_120b_decode_at_8k_reads_about_half_the_kv_of_all_full():
    """18 full layers read 8,192 tokens, 18 sliding layers their 128-token window; 8 KV heads x 64
    dims x K,V x 2 bytes = 2,048 B per layer per token, 36,864 B per group."""
    d, c = 32, 8192
    grouped = roofline("gpt-oss-120b").decode_attention(d, d * c, max)
    full = roofline("gpt-oss-120b", spec=all_full("gpt-oss-120b")).decode_attention(d, d * c, max)
    by_hand = ((d * c + d) * 36_864 + (d * 128 + d) * 36_864) / BW  # both memory-bound
    assert grouped == pytest.approx(by_hand, rel=1e-12)
    assert full == pytest.approx((d * c + d) * 73_728 / BW, rel=1e-12)
    assert grouped / full == pytest.approx((8193 + 129) / (2 * 8193), rel=1e-12)  # 0.508: about half


def test_gemma_3_27b_local_layers_read_their_1024_window():
    """Gemma-3-27B: 62 layers, 52 sliding(1024) + 10 global; 16 KV heads x 128 dims: 8,192 B per layer."""
    spec = load_spec("gemma-3-27b")
    kinds = {g.kind: g.num_layers for g in spec.groups}
    assert kinds == {"full": 10, "sliding": 52}
    d, c = 8, 16384
    t = roofline("gemma-3-27b").decode_attention(d, d * c, max)
    assert t == pytest.approx(((d * c + d) * 10 * 8192 + (d * 1024 + d) * 52 * 8192) / BW, rel=1e-12)


def test_llama_4_scout_chunked_layers_read_the_current_chunk():
    """36 chunked(8192) + 12 global layers, 8 KV heads x 128 dims: 4,096 B per layer per token. One
    sequence at 10,000 tokens reads 10,000 mod 8,192 = 1,808 tokens in its chunked layers; a batch
    past the first chunk reads half a chunk per sequence."""
    cm = roofline("llama-4-scout")
    one = cm.decode_attention(1, 10_000, max)
    assert one == pytest.approx(((10_000 + 1) * 12 * 4096 + (1808 + 1) * 36 * 4096) / BW, rel=1e-12)
    batch = cm.decode_attention(4, 4 * 10_000, max)
    assert batch == pytest.approx(((4 * 10_000 + 4) * 12 * 4096 + (4 * 4096 + 4) * 36 * 4096) / BW, rel=1e-12)
    inside = cm.decode_attention(4, 4 * 3000, max)  # inside the first chunk every layer reads it all
    assert inside == pytest.approx((4 * 3000 + 4) * 48 * 4096 / BW, rel=1e-12)


def test_qwen3_next_linear_layers_cost_the_same_at_any_context():
    """Only the 12 full layers (2 KV heads x 256 dims: 2,048 B per layer) grow with context; the 36
    Gated DeltaNet layers read and write their state (conv 3 x 8,192 x 2 B + recurrent 32 x 128 x
    128 x 2 B per layer) once per sequence per step."""
    cm = roofline("qwen3-next-80b-a3b")
    state = 36 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 2)
    (g_state,) = [g for g in cm.attn_groups if g.kind == "state"]
    assert g_state.state_bytes == state
    d = 16
    short, long = cm.decode_attention(d, d * 1024, max), cm.decode_attention(d, d * 65536, max)
    assert long - short == pytest.approx(d * (65536 - 1024) * 12 * 2048 / BW, rel=1e-9)
    assert short == pytest.approx((d * 1024 + d) * 12 * 2048 / BW + 2 * state * d / BW, rel=1e-12)


def test_mla_reads_the_latent_and_prefills_decompressed():
    """DeepSeek-V3 at TP8: 61 layers x 576 latent values x 2 B = 70,272 B per token on every rank;
    decode FLOPs per pair 2 x 16 heads x (2 x 512 + 64) per layer, prefill 2 x 16 x (128 + 64 + 128)."""
    cm = roofline("deepseek-v3", tp=8)
    assert cm.kv_bytes_per_token == 70_272 and cm.attn_groups == ()
    assert cm.attn_flops_per_pair == 61 * 2 * 16 * (2 * 512 + 64)
    assert cm.prefill_attn_flops_per_pair == 61 * 2 * 16 * (128 + 64 + 128)
    d, c = 64, 4096
    assert cm.decode_attention(d, d * c, max) == pytest.approx((d * c + d) * 70_272 / BW, rel=1e-12)


def test_moe_decode_streams_only_the_experts_its_tokens_touch():
    """Qwen3-30B-A3B: 48 MoE layers x 128 experts of 3 x 2048 x 768 params, 8 per token. One token
    reads 8 of 128 experts per layer; 64 tokens 1 - (120/128)^64 = 98.4% of them."""
    spec = load_spec("qwen3-30b-a3b")
    cm = roofline("qwen3-30b-a3b")
    experts = 48 * 128 * 3 * 2048 * 768
    assert cm.expert_weight_bytes == experts * 2 and cm.expert_share == 8 / 128
    other = (spec.num_params - experts) * 2 * (spec.num_params - spec.param_breakdown()["embedding"] - experts) / (
        spec.num_params - experts)
    assert cm.weight_bytes == pytest.approx(other, rel=1e-12)
    assert cm.streamed_weight_bytes(1) == pytest.approx(other + experts * 2 * 8 / 128, rel=1e-12)
    assert cm.streamed_weight_bytes(64) == pytest.approx(other + experts * 2 * (1 - (120 / 128) ** 64), rel=1e-12)
    dense_like = spec.weight_bytes("bf16") * (spec.num_params - spec.param_breakdown()["embedding"]) / spec.num_params
    assert cm.streamed_weight_bytes(1) < 0.2 * dense_like  # a batch-1 decode step reads ~3B of 30.5B params
    assert cm.streamed_weight_bytes(8192) == pytest.approx(cm.weight_bytes + cm.expert_weight_bytes)


def test_gpt_oss_native_experts_stream_as_mxfp4():
    cm = roofline("gpt-oss-120b", weight_dtype="native")
    experts = 36 * 128 * (3 * 2880 * 2880 + 2 * 2880 + 2880)
    assert cm.expert_weight_bytes == pytest.approx(experts * 4.25 / 8)


@pytest.mark.parametrize("model", ["gpt-oss-120b", "llama-4-scout", "qwen3-next-80b-a3b", "gemma-3-27b"])
def test_grouped_scalar_and_vectorised_decode_are_bit_identical(model):
    cm = roofline(model)
    for b, c0 in ((1, 7000), (24, 24 * 900), (24, 24 * 9000)):
        times = cm.decode_step_times(40, b, c0)
        assert [cm.step_time(b, c0 + b * j) for j in range(40)] == times.tolist()


def test_grouped_prefill_pairs_by_hand():
    """gpt-oss sliding layers: a 1,000-token prompt's query t attends to min(t, 128) tokens."""
    cm = roofline("gpt-oss-120b")
    (sliding,) = [g for g in cm.attn_groups if g.kind == "sliding"]
    assert sliding.pairs_per_chunk(1000, 0) == sum(min(t, 128) for t in range(1, 1001))
    assert sliding.pairs_per_chunk(100, 900) == sum(min(t, 128) for t in range(901, 1001))
    scout = roofline("llama-4-scout")
    (chunked,) = [g for g in scout.attn_groups if g.kind == "chunked"]
    assert chunked.pairs_per_chunk(3000, 7000) == sum((t - 1) % 8192 + 1 for t in range(7001, 10001))
    # a grouped prefill costs less attention than the same model all-full
    full = roofline("gpt-oss-120b", spec=all_full("gpt-oss-120b"))
    p = 8192
    assert cm.prefill_attention(p, 0, p * (p + 1) // 2, 1, max) < 0.6 * full.prefill_attention(p, 0, p * (p + 1) // 2, 1, max)


def test_eviction_cap_bounds_what_each_step_reads():
    capped = CostModel.from_scenario(load_spec("llama-3-8b").with_eviction("window:1024"), H100,
                                     Scenario(model="llama-3-8b", cost_source="roofline", kv_eviction="window:1024"))
    plain = roofline("llama-3-8b")
    assert plain.attn_groups == ()
    d = 8
    assert capped.decode_attention(d, d * 20_000, max) == pytest.approx((d * 1024 + d) * 131_072 / BW, rel=1e-12)
    assert capped.decode_attention(d, d * 500, max) == plain.decode_attention(d, d * 500, max)


def test_all_full_models_keep_the_one_group_formula():
    cm = roofline("llama-3-8b")
    d, kd = 16, 16 * 3000
    assert cm.decode_attention(d, kd, max) == max(cm.attn_flops_per_pair * kd / ATTN_PEAK, (kd + d) * 131_072 / BW)
    assert np.isfinite(cm.step_time(0, 0, 512, 0, 512 * 513 // 2, 1))


def test_moe_decode_floor_reads_only_the_touched_experts():
    """DeepSeek-V3 native (fp8) on 8 H200s at batch 1: non-expert bytes + 8 of 256 routed experts per layer."""
    from sim.memory.capacity import bandwidth_floor_s

    spec, gpu = load_spec("deepseek-v3"), get_gpu("h200")
    experts = 58 * 256 * 3 * 7168 * 2048  # fp8: 1 byte per parameter
    one = bandwidth_floor_s(spec, gpu, batch=1, context=0, tp=8, weight_dtype="native", include_weights=True)
    by_hand = -(-(spec.num_params - experts + experts * 8 / 256) // 8) / 4.8e12
    assert one == pytest.approx(by_hand, rel=1e-9)
    full = bandwidth_floor_s(spec, gpu, batch=4096, context=0, tp=8, weight_dtype="native")
    assert full == pytest.approx(spec.num_params / 8 / 4.8e12, rel=1e-6)  # a large batch touches every expert
    dense = load_spec("llama-3-8b")
    assert bandwidth_floor_s(dense, gpu, batch=1) == bandwidth_floor_s(dense, gpu, batch=64)  # dense: all weights

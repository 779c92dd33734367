"""MoE and MLA parameter counts from the catalog configs, against hand-computed and published figures."""

from __future__ import annotations

import pytest

from models.spec import WEIGHT_BYTES, load_spec


def test_mixtral_8x7b_by_hand():
    h, inter, layers, vocab = 4096, 14336, 32, 32000
    attn = h * (4096 + 2 * 1024) + 4096 * h
    moe = h * 8 + 8 * 3 * h * inter  # router + 8 SwiGLU experts
    total = 2 * vocab * h + layers * (attn + moe + 2 * h) + h
    active = total - layers * 6 * 3 * h * inter  # 2 of 8 experts per token
    spec = load_spec("mixtral-8x7b")
    assert spec.num_params == total == 46_702_792_704
    assert spec.active_params == active


def test_deepseek_v3_mla_and_experts_by_hand():
    h, heads, layers = 7168, 128, 61
    q = h * 1536 + 1536 + 1536 * heads * (128 + 64)
    kv = h * (512 + 64) + 512 + 512 * heads * (128 + 128)
    attn = q + kv + heads * 128 * h
    expert = 3 * h * 2048
    moe_layer = h * 256 + 256 * expert + expert  # router, 256 routed, 1 shared of the same width
    dense_layer = 3 * h * 18432
    total = 2 * 129280 * h + layers * (attn + 2 * h) + h + 3 * dense_layer + 58 * moe_layer
    spec = load_spec("deepseek-v3")
    assert spec.num_params == total
    assert spec.active_params == total - 58 * 248 * expert
    assert round(spec.num_params / 1e9) == 671 and round(spec.active_params / 1e9) == 38  # "671B, 37B activated"


@pytest.mark.parametrize(("name", "total_b", "active_b"), [
    ("gpt-oss-120b", 116.8, 5.7), ("gpt-oss-20b", 20.9, 4.2), ("qwen3-30b-a3b", 30.5, 3.35),
    ("qwen3-235b-a22b", 235.1, 22.2), ("llama-4-scout", 107.8, 17.2), ("llama-4-maverick", 400.7, 17.2),
])
def test_published_moe_sizes(name, total_b, active_b):
    spec = load_spec(name)
    assert spec.num_params / 1e9 == pytest.approx(total_b, abs=0.05)
    assert spec.active_params / 1e9 == pytest.approx(active_b, abs=0.05)


def test_shipped_dtypes_and_expert_weight_bytes():
    oss = load_spec("gpt-oss-120b")
    assert oss.shipped_dtypes == ("bf16", "mxfp4")
    experts = 36 * 128 * (3 * 2880 * 2880 + 2 * 2880 + 2880)
    assert oss.expert_params == experts
    native = oss.weight_bytes("native")
    assert native == -(-((oss.num_params - experts) * 2 + experts * WEIGHT_BYTES["mxfp4"]) // 1)
    assert 60e9 < native < 66e9  # the checkpoint is about 65 GB on disk
    assert load_spec("deepseek-v3").weight_bytes("native") == load_spec("deepseek-v3").num_params  # fp8: 1 B each
    assert load_spec("llama-3-8b").weight_bytes("native") == load_spec("llama-3-8b").weight_bytes("bf16")


def test_compute_terms_use_active_experts_and_mla_latents():
    dense = load_spec("llama-3-8b")
    parts = dense.param_breakdown()
    assert dense.linear_params_per_token == parts["attention"] + parts["mlp"]
    assert dense.attention_flops_per_pair(2) == 4.0 * 32 * 16 * 128
    mix = load_spec("mixtral-8x7b")
    assert mix.linear_params_per_token == mix.param_breakdown()["attention"] + mix.param_breakdown()["mlp"] - (
        32 * 6 * 3 * 4096 * 14336)
    ds = load_spec("deepseek-v3")
    assert ds.attention_flops_per_pair(8) == 61 * 2 * 16 * (2 * 512 + 64)


def test_roofline_reads_the_spec_terms():
    from models.gpus import get_gpu
    from sim.scenario import Scenario
    from sim.timing.roofline import roofline_terms

    spec = load_spec("qwen3-30b-a3b")
    terms = roofline_terms(spec, get_gpu("h100-sxm"), Scenario(model="qwen3-30b-a3b", tp=2))
    assert terms["matmul_flops_per_token"] == 2.0 * spec.linear_params_per_token / 2
    assert terms["matmul_flops_per_token"] < 0.2 * 2.0 * spec.num_params / 2  # 3.3B of 30.5B active


def test_expert_parallel_imbalance_scales_only_the_routed_part():
    spec = load_spec("qwen3-30b-a3b")
    routed = 48 * 8 * 3 * 2048 * 768
    assert spec.routed_params_per_token == routed
    even = spec.matmul_params_per_rank(4)
    assert spec.matmul_params_per_rank(4, expert_parallel=True, imbalance=1.0) == even
    assert spec.matmul_params_per_rank(4, expert_parallel=True, imbalance=1.5) == pytest.approx(even + 0.5 * routed / 4)
    assert spec.matmul_params_per_rank(4, expert_parallel=False, imbalance=1.5) == even  # TP splits every expert
    dense = load_spec("llama-3-8b")
    assert dense.matmul_params_per_rank(2, True, 3.0) == dense.linear_params_per_token / 2


def test_scenario_expert_options_reach_the_roofline():
    from models.gpus import get_gpu
    from sim.scenario import Scenario, ScenarioError
    from sim.timing.roofline import roofline_terms

    spec, gpu = load_spec("qwen3-30b-a3b"), get_gpu("h100-sxm")
    base = Scenario(model="qwen3-30b-a3b", tp=4)
    ep = base.replace(expert_parallel=True, expert_imbalance=1.5)
    assert roofline_terms(spec, gpu, ep)["matmul_flops_per_token"] > roofline_terms(spec, gpu, base)["matmul_flops_per_token"]
    with pytest.raises(ScenarioError, match="expert_imbalance"):
        base.replace(expert_imbalance=0.5)

"""NemotronH (models/nemotron_h.py): one block a layer, counted by hand from vLLM's module shapes
(vllm 0.32 model_executor/models/nemotron_h.py, layers/mamba/mamba_mixer2.py, mamba_utils.py)."""

from __future__ import annotations

import json

import pytest

from models.kv_groups import FullAttention, State
from models.spec import SpecError, load_spec, spec_from_config
from sim.memory.vllm_pool import pool_layout
from sim.memory.vllm_profile import vllm_memory_profile

# A small NemotronH: Mamba, MoE, attention, MoE, Mamba, MLP.
TINY = {
    "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "hybrid_override_pattern": "ME*EM-",
    "num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 100, "intermediate_size": 96, "tie_word_embeddings": False,
    "mamba_num_heads": 8, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 16, "conv_kernel": 4,
    "use_conv_bias": True, "use_bias": False,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1,
    "moe_shared_expert_intermediate_size": 48, "mlp_bias": False,
}
# By hand, TP1, h = 64:
MAMBA = 64 * (2 * 64 + 2 * 2 * 16 + 8) + (128 * 4 + 128) + 3 * 8 + 64 + 64 * 64  # in_proj, conv1d + bias, A D dt, norm, out
ATTENTION = 64 * 64 + 2 * 64 * 32 + 64 * 64  # q, k and v (2 kv heads x 16), o; no biases
MLP = 64 * 96 + 96 * 64  # up + down (relu2, not gated)
MOE = (64 * 4 + 4) + 4 * (2 * 64 * 32) + 2 * 64 * 48  # router + e_score_correction_bias, 4 experts, shared expert
STATE_LAYER = 3 * (64 + 2 * 2 * 16) * 2 + 8 * 8 * 16 * 4  # conv window (kernel - 1) x conv_dim bf16, ssm fp32


def test_tiny_parameters_count_each_block_once():
    spec = spec_from_config(TINY)
    assert MAMBA == 17_624 and MOE == 22_788
    assert spec.num_params == 2 * 100 * 64 + 2 * MAMBA + ATTENTION + MLP + 2 * MOE + 7 * 64 == 118_648
    assert (spec.num_attention_layers, spec.num_linear_layers, spec.ffn_layer_count, spec.sublayers) == (1, 2, 3, 6)
    assert spec.moe is not None and spec.moe.moe_layers == 2 and not spec.moe.expert_gated
    # a token computes with 2 of the 4 experts
    assert spec.active_params == spec.num_params - 2 * 2 * (2 * 64 * 32)


def test_tiny_kv_is_its_attention_block_and_mamba_state():
    spec = spec_from_config(TINY)
    assert STATE_LAYER == 4_864
    assert spec.groups == (FullAttention(1, num_kv_heads=2, head_dim=16), State(2, bytes_per_layer=STATE_LAYER))
    assert spec.kv_bytes_per_token() == 2 * 16 * 2 * 2
    assert spec.kv_per_sequence_bytes(1000) == 1000 * 128 + 2 * STATE_LAYER
    assert spec.groups[1].layer_bytes(tp=2) == STATE_LAYER // 2  # two groups split with the heads


def test_one_group_gives_every_rank_its_own_b_and_c():
    spec = spec_from_config({**TINY, "n_groups": 1})
    state = spec.groups[1]
    assert state.layer_bytes(tp=1) == 3 * (64 + 2 * 16) * 2 + 8 * 8 * 16 * 4
    # vLLM pads the groups to the TP degree (extra_groups_for_head_shards: 1 + 1), then splits conv_dim
    assert state.layer_bytes(tp=2) == 3 * (64 + 2 * 2 * 16) // 2 * 2 + 4 * 8 * 16 * 4 == 2_432


def test_the_ssm_state_dtype_is_the_configs_or_float32():
    half = spec_from_config({**TINY, "mamba_ssm_cache_dtype": "bfloat16"})
    assert half.groups[1].layer_bytes() == 3 * 128 * 2 + 8 * 8 * 16 * 2
    with pytest.raises(SpecError, match="mamba_ssm_cache_dtype"):
        spec_from_config({**TINY, "mamba_ssm_cache_dtype": "int3"})


def test_transformers_5_block_list_reads_as_the_pattern():
    names = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}
    listed = {k: v for k, v in TINY.items() if k not in ("hybrid_override_pattern", "num_hidden_layers")}
    listed["layers_block_type"] = [names[b] for b in TINY["hybrid_override_pattern"]]
    a, b = spec_from_config(TINY), spec_from_config(listed)
    assert (a.num_params, a.groups, a.num_layers) == (b.num_params, b.groups, b.num_layers)


@pytest.mark.parametrize("bad, message", [
    ({"hybrid_override_pattern": "ME*EM"}, "5 blocks for 6 layers"),
    ({"hybrid_override_pattern": "ME*EMX"}, "unknown block"),
    ({"hybrid_override_pattern": "MEMEM-"}, "no attention block"),
    ({"mamba_num_heads": 0}, "mamba_num_heads"),
])
def test_bad_patterns_are_one_line(bad, message):
    with pytest.raises(SpecError, match=message) as exc:
        spec_from_config({**TINY, **bad})
    assert "\n" not in str(exc.value)


def test_nemotron_3_nano_from_its_published_config():
    spec = load_spec("nemotron-3-nano-30b-a3b")
    # 23 Mamba, 23 MoE and 6 attention blocks; the model card's 31.6B total parameters
    assert (spec.num_linear_layers, spec.moe.moe_layers, spec.num_attention_layers) == (23, 23, 6)
    assert round(spec.num_params / 1e9, 1) == 31.6
    assert spec.kv_bytes_per_token() == 6 * 2 * 128 * 2 * 2
    # conv (3 x (4,096 + 2 x 8 x 128) bf16) + ssm (64 heads x 64 x 128 float32, the config's dtype)
    assert spec.groups[1].layer_bytes() == 3 * 6144 * 2 + 64 * 64 * 128 * 4 == 2_134_016


def test_vllm_raises_the_attention_block_to_hold_a_mamba_layer():
    spec = load_spec("nemotron-3-nano-30b-a3b")
    layout = pool_layout(spec, "bf16", tp=1, block_size=16)
    # cdiv(2,134,016 B, 16 x 1,024 B a token) x 16 = 2,096 tokens (platforms/interface.py _align_hybrid_block_size)
    assert layout.block_size == 2096
    # groups of 6 layers (the fewer type): 1 attention group, cdiv(23, 6) = 4 state groups; a sequence of
    # 2,096 tokens or fewer takes one block in each
    assert layout.group_size == 6 and len(layout.groups) == 5
    assert layout.blocks_per_sequence(2096) == 5 and layout.blocks_per_sequence(2097) == 6


def test_vllm_weights_have_no_rope_cache_and_the_profile_runs():
    from models.gpus import get_gpu

    prof = vllm_memory_profile(load_spec("nemotron-3-nano-30b-a3b"), get_gpu("h100-sxm"), tp=1)
    # NemotronH's attention has no rotary embedding: the weights are the parameters in bf16
    assert prof.weights_bytes == 2 * load_spec("nemotron-3-nano-30b-a3b").num_params
    assert prof.num_gpu_blocks > 0


def test_pipeline_stages_hold_their_own_blocks():
    spec = load_spec("nemotron-3-nano-30b-a3b")
    first, last = spec.pipeline_stage(0, 26, True, False), spec.pipeline_stage(26, 26, False, True)
    assert first.num_params + last.num_params == spec.num_params
    assert first.ffn_layer_count + last.ffn_layer_count == 23
    assert first.num_attention_layers + last.num_attention_layers == 6
    assert first.num_linear_layers + last.num_linear_layers == 23


def test_a_replay_runs_at_vllms_block_size():
    from sim.fleet.replay import simulate
    from sim.scenario import Scenario
    from sim.trace import parse_synthetic_spec

    trace = parse_synthetic_spec("synthetic:n=60,rate=20,input=3000,output=40,seed=1").generate()
    result = simulate(trace, Scenario(model="nemotron-3-nano-30b-a3b", gpu="h100-sxm", prefix_caching=True))
    s = result.summary
    assert s["completed"] == 60 and s["block_size"] == 2096
    assert set(s["kv_group_breakdown_mean"]) == {"full", "state"}


def test_infinity_is_read_only_where_kvsim_never_looks(tmp_path):
    path = tmp_path / "config.json"
    text = json.dumps({**TINY, "time_step_limit": [0.0, 1.0]}).replace("1.0]", "Infinity]")
    path.write_text(text)
    assert load_spec(str(path)).num_params == 118_648
    path.write_text(json.dumps({**TINY, "time_step_limit": [0.0, 1e308]}))
    assert load_spec(str(path)).num_params == 118_648
    path.write_text(json.dumps({**TINY, "rope_theta": 1.0}).replace('"rope_theta": 1.0', '"rope_theta": Infinity'))
    with pytest.raises(SpecError, match="rope_theta: Infinity is not a number") as exc:
        load_spec(str(path))
    assert "\n" not in str(exc.value)


def test_an_uploaded_config_with_infinity_in_an_unread_field_is_kept(tmp_path, monkeypatch):
    from sim.guard.uploads import UPLOAD_ENV, store_config

    monkeypatch.setenv(UPLOAD_ENV, str(tmp_path))
    data = json.dumps({**TINY, "time_step_limit": [0.0, 1.0]}).replace("1.0]", "Infinity]").encode()
    path, spec = store_config(data, "nemotron.json")
    assert spec.num_params == 118_648 and load_spec(str(path)).num_params == 118_648


def test_nemotron_nano_9b_v2_block_size_as_vllm_logged_it():
    """vllm#24280 (an NVIDIA engineer, 2025-09): hybrid Mamba models get large attention pages, "672
    tokens for nvidia/NVIDIA-Nemotron-Nano-9B-v2". That vLLM (before the NemotronH config update read
    in 0.17.1; 0.11.0 has none) kept the SSM state in the model dtype: bf16 here. The shapes are
    the model's published config.json."""
    nano_9b = {"model_type": "nemotron_h", "hidden_size": 4480, "intermediate_size": 15680, "num_hidden_layers": 56,
               "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
               "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
               "mamba_num_heads": 128, "mamba_head_dim": 80, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4,
               "mamba_ssm_cache_dtype": "bfloat16"}
    spec = spec_from_config(nano_9b)
    assert (spec.num_attention_layers, spec.num_linear_layers, spec.ffn_layer_count) == (4, 27, 25)
    assert pool_layout(spec, "bf16", tp=1, block_size=16).block_size == 672


@pytest.mark.parametrize("config, block, pad, padding_layers", [
    # Nemotron-3-Nano-30B-A3B's layout (Nemotron-Cascade-2-30B-A3B-NVFP4 shares it) with fp8 KV, vLLM 0.19-0.20
    # start-up logs: "Setting attention block size to 4176 tokens", "Padding mamba page size by 0.19%",
    # "Add 1 padding layers, may waste at most 4.35%"
    ("nemotron-3-nano-30b-a3b", 4176, "0.19%", 1),
    # Nemotron-3-Nano-4B-FP8 (fp8 KV, the SSM state in float16 as its config names it; shapes from
    # mlc-llm's NemotronH test), vLLM 0.13.0 on a GB10: "Setting attention block size to 992 tokens",
    # "Padding mamba page size by 0.35%", "Add 3 padding layers, may waste at most 14.29%"
    ({"model_type": "nemotron_h", "hidden_size": 3136, "intermediate_size": 12544, "num_hidden_layers": 42,
      "hybrid_override_pattern": "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-", "num_attention_heads": 40,
      "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072, "mamba_num_heads": 96, "mamba_head_dim": 80,
      "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4, "mamba_ssm_cache_dtype": "float16"}, 992, "0.35%", 3),
])
def test_fp8_kv_block_sizes_as_vllm_logged_them(config, block, pad, padding_layers):
    spec = load_spec(config) if isinstance(config, str) else spec_from_config(config)
    layout = pool_layout(spec, "fp8", tp=1, block_size=16)
    assert layout.block_size == block and layout.padding_layers == padding_layers
    assert any(f"padded {pad}" in note for note in layout.notes)

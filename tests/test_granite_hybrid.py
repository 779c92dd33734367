"""Granite-4.0-H (GraniteMoeHybridForCausalLM): Mamba-2 and attention layers, each with its MoE and
shared MLP, read through models/mamba2.py. The config is transformers' own example for the model
(docs "GraniteMoeHybrid"); the counts below are by hand from vLLM 0.32's module shapes
(model_executor/models/granitemoehybrid.py, granitemoeshared.py, layers/mamba/mamba_mixer2.py)."""

from __future__ import annotations

from models.kv_groups import FullAttention, State
from models.spec import spec_from_config
from sim.memory.vllm_pool import pool_layout
from sim.memory.vllm_weights import rope_cache_bytes

GRANITE = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": False, "hidden_size": 512,
    "intermediate_size": 1024, "layer_types": ["mamba", "mamba", "mamba", "attention", "mamba", "mamba", "mamba",
                                               "attention"],
    "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_head": 128, "mamba_d_state": 128,
    "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 8, "mamba_proj_bias": False,
    "max_position_embeddings": 4096, "model_type": "granitemoehybrid", "num_attention_heads": 8,
    "num_experts_per_tok": 2, "num_hidden_layers": 8, "num_key_value_heads": 8, "num_local_experts": 8,
    "position_embedding_type": "nope", "rms_norm_eps": 1e-05, "shared_intermediate_size": 512,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 49152,
}
MAMBA = 512 * (1024 + 1280 + 8) + (1280 * 4 + 1280) + 3 * 8 + 1024 + 1024 * 512  # in_proj, conv1d + bias, A D dt, norm, out
ATTENTION = 4 * 512 * 512  # q, k, v (8 kv heads of 64), o
MOE = 512 * 8 + 8 * 3 * 512 * 1024 + 3 * 512 * 512  # router, 8 gated experts, the gated shared MLP


def test_parameters_count_every_layers_mixer_and_moe():
    spec = spec_from_config(GRANITE)
    assert spec.num_params == 49152 * 512 + 6 * MAMBA + 2 * ATTENTION + 8 * MOE + 17 * 512 == 144_552_080
    assert (spec.num_attention_layers, spec.num_linear_layers, spec.ffn_layer_count) == (2, 6, 8)


def test_kv_is_two_attention_layers_and_six_bf16_states():
    spec = spec_from_config(GRANITE)
    state = 3 * 1024 * 2 + 8 * 128 * 128 * 2  # conv over x in bf16, the SSM state in the model dtype (vLLM's "auto")
    assert spec.groups == (FullAttention(2, num_kv_heads=8, head_dim=64),
                           State(6, bytes_per_layer=state, replicated_bytes=3 * 2 * 128 * 2))
    assert spec.kv_bytes_per_token() == 2 * 8 * 64 * 2 * 2


def test_vllms_block_and_no_rope_cache():
    spec = spec_from_config(GRANITE)
    # cdiv(269,824 B, 16 x 2,048 B a token) x 16 = 144 tokens
    assert pool_layout(spec, "bf16", tp=1, block_size=16).block_size == 144
    assert rope_cache_bytes(spec) == 0  # position_embedding_type "nope"


def test_a_dense_granite_hybrid_uses_its_shared_mlp():
    dense = spec_from_config({**GRANITE, "num_local_experts": 0})
    assert dense.moe is None and dense.num_params == 49152 * 512 + 6 * MAMBA + 2 * ATTENTION + 8 * 3 * 512 * 512 + 17 * 512

"""ERNIE-4.5's experts read under their own names (models/ernie_moe.py), counted to the parameter.

The base config is transformers' Ernie4_5_MoeConfig defaults, which are ERNIE-4.5-21B-A3B-PT's (its
auto_docstring checkpoint): 28 layers, 64 routed experts of 1,536, 6 per token, 2 shared, the first
layer dense. Before, such a config was refused (models/unmodelled.py's unread_experts).
"""

from __future__ import annotations

import pytest

from models.spec import SpecError, spec_from_config

ERNIE_21B = {  # Ernie4_5_MoeConfig() as transformers 5.23 writes it, less the bookkeeping keys
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "vocab_size": 103424,
    "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28, "num_attention_heads": 20,
    "num_key_value_heads": 4, "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "tie_word_embeddings": True, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
    "use_bias": False, "moe_intermediate_size": 1536, "moe_k": 6, "moe_num_experts": 64,
    "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": -1, "moe_layer_interval": 1,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
}
H, L, E, W = 2560, 28, 64, 1536
ROUTER = H * E + E  # gate (no bias) + e_score_correction_bias, per MoE layer


def test_hand_count_of_the_21b():
    """Attention 28 x (q 2560x2560 + k, v 2560x512 + o) + norms; layer 0 a dense gated MLP of 12,288;
    27 MoE layers of 64 experts + 2 shared (one gated MLP of 3,072) + the router; tied embedding."""
    spec = spec_from_config(ERNIE_21B)
    attention = L * (H * 2560 + 2 * H * 512 + 2560 * H)
    norms = L * 2 * H + H
    dense = 3 * H * 12288
    moe = 27 * (E * 3 * H * W + 3 * H * 2 * W + ROUTER)
    assert spec.num_params == attention + norms + dense + moe + 103424 * H == 21_825_437_888
    assert spec.moe.moe_layers == 27 and spec.moe.experts_per_tok == 6
    assert spec.active_params == spec.num_params - 27 * (E - 6) * 3 * H * W
    assert spec.kv_bytes_per_token() == 2 * L * 4 * 128 * 2  # plain GQA: 4 kv heads of 128


def test_router_is_float32_in_the_weight_bytes():
    spec = spec_from_config(ERNIE_21B)
    assert spec.fp32_router_params == 27 * ROUTER
    assert spec.weight_bytes("bf16") == 2 * spec.num_params + 2 * 27 * ROUTER


def test_use_bias_as_vllm_builds_it():
    """ernie45_moe.py: q/k/v biases on every layer and biases on the dense MLP, none on o_proj or experts."""
    plain, biased = spec_from_config(ERNIE_21B), spec_from_config({**ERNIE_21B, "use_bias": True})
    assert biased.num_params - plain.num_params == L * (2560 + 2 * 512) + (2 * 12288 + H)


@pytest.mark.parametrize("extra", [
    {},
    {"moe_layer_interval": 2, "moe_layer_start_index": 3, "moe_layer_end_index": 20},
    {"moe_num_shared_experts": 0, "tie_word_embeddings": False},
])
def test_param_count_equals_transformers(extra):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Ernie4_5_MoeConfig"):
        pytest.skip("this transformers has no ERNIE-4.5 MoE")
    cfg = {**ERNIE_21B, **extra}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.Ernie4_5_MoeConfig(**cfg))
    assert spec_from_config(cfg).num_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("extra, message", [
    ({"moe_num_experts": [64, 64], "moe_intermediate_size": [1536, 512]}, "ERNIE-4.5-VL's text and vision experts"),
    ({"moe_layer_interval": 0}, "moe_layer_interval must be at least 1"),
    ({"moe_k": "six"}, "moe_k must be an integer"),
])
def test_fields_kvsim_cannot_read_are_refused_in_one_line(extra, message):
    with pytest.raises(SpecError, match=message) as exc:
        spec_from_config({**ERNIE_21B, **extra}, source="config.json")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("config.json: ")

"""Llama-like decoders that differ from Llama in named ways (models/llama_variants.py), and decoders
kvsim refuses by model_type (models/unmodelled.py), against transformers' own models.

Each variant's default config (transformers' AutoConfig.for_model) and the options that change its
weights are built by transformers on the meta device and counted: kvsim's count must be equal. Before
these entries such configs read as Llama: StarCoder2 +37%, Phi-2 +28%, and Cohere, OLMo, GLM-4,
Seed-OSS, StableLM, Exaone-4 and MiniMax-M2 off by their norms and biases.
"""

from __future__ import annotations

import pytest

from models.llama_variants import VARIANTS
from models.spec import SpecError, spec_from_config
from models.unmodelled import UNMODELLED_TYPES

OPTIONS = [  # (model_type, config fields that change the weights)
    ("cohere", {"use_qk_norm": True}), ("stablelm", {"use_qkv_bias": True, "use_parallel_residual": True}),
    ("stablelm", {"qk_layernorm": True}), ("phi", {"qk_layernorm": True}), ("seed_oss", {"attention_out_bias": True}),
    ("starcoder2", {"use_bias": False}), ("glm4", {"attention_bias": False}),
    ("glm4_moe_lite", {}),  # MoE layers from transformers 5's mlp_layer_types ("dense" / "sparse")
    ("glm4_moe", {"use_qk_norm": True, "attention_bias": True}),  # GLM-4.5's own config says both
    ("qwen2_moe", {}),  # transformers 5 writes sliding_window 0 for a window switched off
]


def _hf(model_type: str, extra: dict):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    try:
        config = transformers.AutoConfig.for_model(model_type, **extra)
    except ValueError:
        pytest.skip(f"this transformers has no {model_type}")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    cfg = {k: v for k, v in config.to_dict().items() if not k.startswith("_")}
    return {**cfg, "model_type": model_type}, sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type, extra", [(t, {}) for t in sorted(VARIANTS)] + OPTIONS)
def test_param_count_equals_transformers(model_type, extra):
    cfg, real = _hf(model_type, extra)
    assert spec_from_config(cfg).num_params == real


def test_starcoder2_by_hand():
    """StarCoder2-3B's shapes: 30 layers, hidden 3,072, 24 heads of 128, 2 kv heads, MLP 12,288 (c_fc +
    c_proj with biases), LayerNorms with bias, biases on q/k/v/o, a tied 49,152-token embedding."""
    cfg = {"model_type": "starcoder2", "hidden_size": 3072, "num_hidden_layers": 30, "num_attention_heads": 24,
           "num_key_value_heads": 2, "intermediate_size": 12288, "vocab_size": 49152, "use_bias": True,
           "tie_word_embeddings": True, "max_position_embeddings": 16384}
    h, kv = 3072, 2 * 128
    attention = h * (h + 2 * kv) + (h + 2 * kv) + h * h + h
    mlp = 2 * h * 12288 + 12288 + h
    norms = 2 * 2 * h
    assert spec_from_config(cfg).num_params == 30 * (attention + mlp + norms) + 2 * h + 49152 * h


@pytest.mark.parametrize("model_type", sorted(UNMODELLED_TYPES))
def test_decoders_kvsim_does_not_model_are_refused_by_type(model_type):
    cfg = {"model_type": model_type, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 128, "intermediate_size": 96}
    with pytest.raises(SpecError, match=f"model_type {model_type} .* is not modelled by kvsim") as exc:
        spec_from_config(cfg, source="config.json")
    assert "\n" not in str(exc.value)

"""Llama-like decoders whose weights differ from Llama's in small, named ways, one entry per model_type.

models/spec.py reads a decoder it does not know as Llama (q/k/v/o without biases, a gated MLP, two
RMSNorms a layer). These architectures have Llama's shapes but not all of its weights; each entry
says what differs, read in transformers' modeling file of that model_type (vLLM's model file builds
the same checkpoint tensors). tests/test_llama_variants.py checks every entry to the parameter
against transformers' model of the default config (and of the options below where they change the
count). The values are keyword overrides of models.spec._Layout; `flag(key, default)` reads a
boolean config field (one-line error on anything else).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Flag = Callable[[str, bool], bool]
Overrides = Callable[[dict[str, Any], Flag], dict[str, Any]]


def _cohere(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """Command-R/A (cohere, cohere2): attention and MLP in parallel after one LayerNorm without bias;
    use_qk_norm: LayerNorms over all q heads and all k heads (cohere's CohereLayerNorm((heads, head_dim)))."""
    bias = flag("attention_bias", False)
    return {"norms_per_layer": 1, "qkv_bias": bias, "o_bias": bias, "qk_norm_full": flag("use_qk_norm", False)}


def _olmo(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """OLMo (v1): LayerNorms without any weight (OlmoLayerNorm), so none counted."""
    return {"norms_per_layer": 0, "final_norm": False}


def _olmo2(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """OLMo-2/3, OLMoE, FlexOlmo: norms after attention and MLP (two a layer, as Llama's count), and q/k
    RMSNorms over all heads (q_norm of heads x head_dim, k_norm of kv heads x head_dim)."""
    return {"qk_norm_full": True}


def _per_head_qk_norm(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """Exaone-4 and its MoE, Hunyuan v3: per-head q/k RMSNorms of head_dim (as Qwen3's)."""
    return {"qk_norm": True}


def _stablelm(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """StableLM: LayerNorms with bias; q/k/v biases (use_qkv_bias), none on o; one norm a layer with
    use_parallel_residual; qk_layernorm: a LayerNorm of head_dim (no bias) per q head and per k head."""
    return {"norm_bias": True, "qkv_bias": flag("use_qkv_bias", False), "o_bias": False,
            "norms_per_layer": 1 if flag("use_parallel_residual", False) else 2,
            "qk_norm_full": flag("qk_layernorm", False)}


def _seed_oss(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """Seed-OSS: q/k/v biases (attention_bias) and an o_proj bias of its own (attention_out_bias)."""
    return {"qkv_bias": flag("attention_bias", False), "o_bias": flag("attention_out_bias", False)}


def _glm(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """GLM-4 (glm): q/k/v biases (attention_bias), none on o_proj."""
    return {"qkv_bias": flag("attention_bias", False), "o_bias": False}


def _glm4_moe(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """GLM-4.5/4.6/4.7 (glm4_moe): q/k/v biases (attention_bias), none on o_proj; use_qk_norm: per-head
    q/k RMSNorms."""
    return {**_glm(cfg, flag), "qk_norm": flag("use_qk_norm", False)}


def _glm4(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """GLM-4-0414 (glm4): as glm, and two more RMSNorms a layer (post_self_attn, post_mlp)."""
    return {**_glm(cfg, flag), "norms_per_layer": 4}


def _minimax_m2(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """MiniMax-M2: q and k normalised over all heads together (q_norm of heads x head_dim), built whatever
    use_qk_norm says (its configs say true, qk_norm_type "per_layer"; vLLM's minimax_m2.py and
    transformers' build them unconditionally)."""
    return {"qk_norm_full": True}


def _starcoder2(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """StarCoder2: an MLP of c_fc + c_proj (not gated), biases on every projection (use_bias) and
    LayerNorms with bias."""
    bias = flag("use_bias", True)
    return {"mlp_gated": False, "qkv_bias": bias, "o_bias": bias, "mlp_bias": bias, "norm_bias": True}


def _phi(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """Phi-1/1.5/2: attention and MLP in parallel after one LayerNorm with bias, fc1 + fc2 (not gated)
    with biases, biases on q/k/v/dense, a bias on the LM head; qk_layernorm: one LayerNorm of head_dim
    with bias for q and one for k."""
    return {"norms_per_layer": 1, "norm_bias": True, "mlp_gated": False, "qkv_bias": True, "o_bias": True,
            "mlp_bias": True, "lm_head_bias": True, "qk_norm": flag("qk_layernorm", False)}


def _arcee(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """Arcee (AFM): up + down with ReLU^2 (not gated)."""
    return {"mlp_gated": False}


def _apertus(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """Apertus: up + down with xIELU (not gated; the activation's two learned scalars per layer) and
    per-head q/k RMSNorms."""
    return {"mlp_gated": False, "qk_norm": True, "mlp_act_params": 2}


def _persimmon(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """Persimmon (and Fuyu's decoder): a fused q/k/v and a dense with biases, a squared-ReLU MLP with biases
    (not gated), LayerNorms with bias; qk_layernorm: one LayerNorm of head_dim with bias for q and one for k."""
    return {"mlp_gated": False, "qkv_bias": True, "o_bias": True, "mlp_bias": True, "norm_bias": True,
            "qk_norm": flag("qk_layernorm", True)}


def _nanochat(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """nanochat: fc1 + fc2 (not gated), RMSNorms and q/k norms without weights."""
    return {"mlp_gated": False, "norms_per_layer": 0, "final_norm": False}


def _jais2(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """Jais-2: up + down with relu2 (not gated), LayerNorms with bias, attention_bias on q/k/v/o and
    mlp_bias on the MLP."""
    bias = flag("attention_bias", False)
    return {"mlp_gated": False, "norm_bias": True, "qkv_bias": bias, "o_bias": bias}


def _ernie(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """ERNIE-4.5 (dense and MoE): use_bias puts biases on q/k/v and the dense MLP, none on o_proj (vLLM's
    ernie45.py, ernie45_moe.py); its experts are read in models/ernie_moe.py."""
    bias = flag("use_bias", False)
    return {"qkv_bias": bias, "mlp_bias": bias}


def _phimoe(cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """Phi-3.5-MoE: LayerNorms with bias; q/k/v/o biases (attention_bias)."""
    bias = flag("attention_bias", True)
    return {"norm_bias": True, "qkv_bias": bias, "o_bias": bias}


VARIANTS: dict[str, Overrides] = {
    "cohere": _cohere, "cohere2": _cohere, "cohere2_moe": _cohere,
    "olmo": _olmo, "olmo2": _olmo2, "olmo3": _olmo2, "olmoe": _olmo2, "flex_olmo": _olmo2,
    "ernie4_5": _ernie, "ernie4_5_moe": _ernie,
    "phimoe": _phimoe, "persimmon": _persimmon, "nanochat": _nanochat, "jais2": _jais2,
    "exaone4": _per_head_qk_norm, "exaone_moe": _per_head_qk_norm, "hy_v3": _per_head_qk_norm,
    "stablelm": _stablelm,
    "seed_oss": _seed_oss,
    "glm": _glm, "glm4": _glm4, "glm4_moe": _glm4_moe,
    "minimax_m2": _minimax_m2,
    "starcoder2": _starcoder2,
    "phi": _phi,
    "arcee": _arcee,
    "apertus": _apertus,
}


def variant_overrides(model_type: str, cfg: dict[str, Any], flag: Flag) -> dict[str, Any]:
    """The _Layout overrides of a Llama-like model_type ({} for Llama itself or one not listed)."""
    rule = VARIANTS.get(model_type)
    return rule(cfg, flag) if rule is not None else {}

"""Config fields that change a model's KV cache or weights in ways kvsim does not model.

models/spec.py reads an unknown decoder as Llama-like, which is right for most of them. A config
with one of these fields is not: read as Llama it would give KV bytes and weights that look right
and are not (every layer an attention layer, one head count for all). So such a config is refused in
one line naming the field, before any figure is made. Each entry names the models that carry the
field and what it changes; `applies` is False where the field is present but inert (a zero, a
false flag, a list that changes nothing). A field kvsim does model (NemotronH's pattern, Qwen3-Next's
linear layers, DeepSeek's MLA and indexer) is not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Unmodelled:
    key: str
    models: str  # which checkpoints carry it
    changes: str  # what it changes that kvsim would miss
    applies: Callable[[Any, dict[str, Any]], bool] = lambda value, cfg: value not in (None, False, 0, [], {}, "")


def _differs(other: str) -> Callable[[Any, dict[str, Any]], bool]:
    """Present and not the same as `other` (a second head count or width for some layers)."""
    return lambda value, cfg: value is not None and value != cfg.get(other)


UNMODELLED: tuple[Unmodelled, ...] = (
    Unmodelled("block_configs", "DeciLM / Llama-Nemotron NAS (Llama-3.3-Nemotron-Super-49B)",
               "each layer's own kv heads and MLP width, some layers without attention"),
    Unmodelled("layers_block_type", "Jamba, Zamba2", "Mamba layers between the attention layers"),
    Unmodelled("attn_layer_indices", "Bamba", "Mamba layers between the attention layers"),
    Unmodelled("attn_layer_period", "Jamba", "Mamba layers between the attention layers"),
    Unmodelled("mamba_d_ssm", "Falcon-H1", "Mamba heads beside attention in every layer"),
    Unmodelled("linear_attn_config", "Kimi-Linear", "Kimi Delta Attention layers between the MLA layers"),
    Unmodelled("attn_type_list", "MiniMax-Text-01 / M1", "lightning (linear) attention layers (type 0)",
               lambda value, cfg: isinstance(value, list) and 0 in value),  # MiniMax-M2 lists all 1: softmax
    Unmodelled("hybrid_layer_pattern", "MiMo-V2-Flash", "sliding-window layers with their own kv heads"),
    Unmodelled("num_kv_shared_layers", "Gemma-3n", "the last layers reuse earlier layers' KV"),
    Unmodelled("attention_k_eq_v", "Gemma-4", "global layers keep K only (V = K)"),
    Unmodelled("num_global_key_value_heads", "Gemma-4", "global layers with their own kv heads",
               _differs("num_key_value_heads")),
    Unmodelled("global_head_dim", "Gemma-4", "global layers with their own head size", _differs("head_dim")),
    Unmodelled("compress_ratios", "DeepSeek-V4", "compressed attention layers",
               lambda value, cfg: isinstance(value, list) and any(r not in (0, 1) for r in value)),
    Unmodelled("sparse_attention_config", "MiniMax-M3", "an index cache beside the KV of its sparse layers",
               lambda value, cfg: isinstance(value, dict) and bool(value.get("use_sparse_attention"))),
)


# model_type -> what its layers are: decoders that are not attention + MLP layers and that name their
# other layers by model_type alone (a default config may carry none of the fields above).
UNMODELLED_TYPES: dict[str, str] = {
    "bamba": "Mamba-2 layers between the attention layers", "jamba": "Mamba layers between the attention layers",
    "zamba": "Mamba layers with shared attention blocks", "zamba2": "Mamba-2 layers with shared attention blocks",
    "falcon_h1": "Mamba-2 heads beside attention in every layer", "falcon_mamba": "Mamba layers, no attention",
    "mamba": "Mamba layers, no attention", "mamba2": "Mamba-2 layers, no attention",
    "rwkv": "RWKV recurrent layers, no attention", "xlstm": "xLSTM recurrent layers, no attention",
    "lfm2": "short-convolution layers between the attention layers",
    "lfm2_moe": "short-convolution layers between the attention layers",
    "recurrent_gemma": "RG-LRU recurrent layers between the attention layers",
    "jetmoe": "a mixture of attention experts", "kimi_linear": "Kimi Delta Attention layers between the MLA layers",
    **{gemma4: "global layers with their own head size and kv heads, per-layer embeddings"
       for gemma4 in ("gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text")},
    "bitnet": "ternary (1.58-bit) weights with extra sub-layer norms",
    "hrm_text": "recurrent high- and low-level layer stacks run in cycles",
    "doge": "dynamic-mask attention and cross-domain experts",
    "biogpt": "learned positions, LayerNorms with bias and an ungated MLP",
    "git": "an image-to-text model whose decoder takes image tokens",
    **{encoder: "a BERT-style encoder, not a decoder LLM" for encoder in (
        "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie", "megatron-bert",
        "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm-roberta", "xlm-roberta-xl", "xmod",
        "modernbert-decoder")},
}


def unmodelled_type(cfg: dict[str, Any]) -> str | None:
    """One line naming a model_type whose layers kvsim does not model, or None."""
    model_type = str(cfg.get("model_type", "")).lower()
    what = UNMODELLED_TYPES.get(model_type)
    if what is None:
        return None
    return f"model_type {model_type} ({what}) is not modelled by kvsim; its KV and weights would be wrong"


def unmodelled_field(cfg: dict[str, Any]) -> str | None:
    """One line naming the first field of `cfg` that kvsim does not model, or None."""
    for entry in UNMODELLED:
        if entry.key in cfg and entry.applies(cfg[entry.key], cfg):
            return (f"{entry.key} ({entry.models}: {entry.changes}) is not modelled by kvsim; "
                    "its KV and weights would be wrong")
    return None


PER_TOKEN_WORDS = ("per_tok", "top")  # num_experts_per_tok, experts_per_token, top_k_experts: not how many there are


def unread_experts(cfg: dict[str, Any]) -> str | None:
    """For a config kvsim read as dense: one line naming a field that says it has experts (a count
    over 1 under a key naming how many experts, at the top or one level down: DBRX's ffn_config;
    ERNIE-4.5's moe_num_experts is read, models/ernie_moe.py), which a dense reading would drop from its
    weights; None when there is none."""
    for key, value in cfg.items():
        for name, item in value.items() if isinstance(value, dict) else ((key, value),):
            lowered = str(name).lower()
            counts_experts = "expert" in lowered and not any(w in lowered for w in PER_TOKEN_WORDS)
            if counts_experts and isinstance(item, int) and not isinstance(item, bool) and item > 1:
                where = name if name == key else f"{key}.{name}"
                return (f"{where} = {item}: a mixture of experts whose experts kvsim does not read; "
                        "its weights and step time would be a dense model's")
    return None


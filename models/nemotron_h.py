"""NemotronH's decoder: one kind of block a layer, as its `hybrid_override_pattern` lays them out.

Nemotron-H, Nemotron-Nano-v2 and Nemotron-3 (NemotronHForCausalLM) are not attention + MLP layers:
each of `num_hidden_layers` layers is one block, named by one character of the pattern (vLLM 0.32,
model_executor/models/nemotron_h.py `ALL_DECODER_LAYER_TYPES`):

- "M": a Mamba-2 mixer (layers/mamba/mamba_mixer2.py): a fixed recurrent state per sequence;
- "*": attention (q/k/v/o, no biases): K and V of every token;
- "-": an MLP, up + down with relu2 (not gated);
- "E": a mixture of experts, routed experts up + down (not gated), shared experts, an optional
  latent projection around the routed experts (Nemotron-3-Super's moe_latent_size).

Each block has one RMSNorm before it. So a model's attention layers, state layers and MLP layers
are three different counts, read here from the pattern; models/spec.py builds the usual parts
(KV groups, parameters) from them. The Mamba-2 mixer itself is models/mamba2.py's (its NemotronH
naming); only the SSM state's dtype rule is NemotronH's own (`ssm_dtype`).

This module imports nothing from the project, so models/kv_groups.py can read the blocks from it.
"""

from __future__ import annotations

from typing import Any

BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
# transformers 5's NemotronHConfig writes the blocks as a list, `layers_block_type` (alias layer_types), with
# these names and no pattern (configuration_nemotron_h.py _pattern_to_list; the first two names are its
# legacy ones, configuration_utils.py _LEGACY_LAYER_TYPE_REMAP); num_hidden_layers is then its length.
BLOCK_NAMES = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}
# The KV kind of each block (models/kv_groups.py layer_kinds): a Mamba layer keeps a state ("linear",
# as Qwen3-Next's linear attention), an attention layer full attention, MLP and MoE blocks nothing.
KV_KIND = {"M": "linear", "*": "full", "-": "none", "E": "none"}
# vLLM's default for the recurrent state when the config names none (model_executor/models/config.py
# NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE: "only float32 is known to have no accuracy issues")
DEFAULT_SSM_DTYPE = "float32"


class BlockPatternError(ValueError):
    """The pattern does not describe the config's layers; one line (models/spec.py adds the file)."""


def is_block_model(cfg: dict[str, Any]) -> bool:
    """Whether the config lays its layers out as NemotronH blocks."""
    return str(cfg.get("model_type", "")).lower() == "nemotron_h" or isinstance(cfg.get("hybrid_override_pattern"), str)


def block_pattern(cfg: dict[str, Any], num_layers: int | None = None) -> str:
    """The config's blocks as a pattern, one character a layer: hybrid_override_pattern, else the
    layers_block_type list; checked against num_hidden_layers when given."""
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is None:
        names = cfg.get("layers_block_type", cfg.get("layer_types"))
        if not isinstance(names, list) or not names:
            raise BlockPatternError("a NemotronH config needs hybrid_override_pattern or a layers_block_type list")
        unknown = sorted({str(n)[:40] for n in names} - set(BLOCK_NAMES))
        if unknown:
            raise BlockPatternError(f"layers_block_type: unknown block(s) {', '.join(unknown)} "
                                    f"(known: {', '.join(BLOCK_NAMES)})")
        pattern = "".join(BLOCK_NAMES[n] for n in names)
    if not isinstance(pattern, str):
        raise BlockPatternError(f"hybrid_override_pattern must be a string, got {type(pattern).__name__}")
    if num_layers is not None and len(pattern) != num_layers:
        raise BlockPatternError(f"hybrid_override_pattern has {len(pattern)} blocks for {num_layers} layers")
    unknown = sorted(set(pattern) - set(BLOCKS))
    if unknown:
        raise BlockPatternError(f"hybrid_override_pattern: unknown block(s) {' '.join(map(repr, unknown))} "
                                f"(known: {', '.join(f'{k} {v}' for k, v in BLOCKS.items())})")
    if "*" not in pattern:
        raise BlockPatternError("hybrid_override_pattern has no attention block ('*'): a model with "
                                "no KV cache is not modelled")
    return pattern


def ffn_blocks(pattern: str) -> int:
    """How many of the pattern's blocks are an MLP or a MoE (the layers with an FFN)."""
    return sum(block in "-E" for block in pattern)


def ssm_dtype(cfg: dict[str, Any]) -> str:
    """The dtype vLLM keeps a NemotronH model's SSM state in: the config's mamba_ssm_cache_dtype, else
    float32 (NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype, read in vLLM 0.17.1 and 0.32)."""
    return str(cfg.get("mamba_ssm_cache_dtype") or DEFAULT_SSM_DTYPE)


def moe_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The MoEShape fields NemotronH sets beyond the common ones (models/moe.py): experts up + down
    (relu2, `is_non_gated_moe`), a router bias (e_score_correction_bias), shared experts of
    moe_shared_expert_intermediate_size each, and the latent width the routed experts work in."""
    latent = cfg.get("moe_latent_size")
    shared = int(cfg.get("n_shared_experts") or 0) * int(cfg.get("moe_shared_expert_intermediate_size") or 0)
    return {"expert_gated": False, "router_bias": True, "shared_intermediate": shared,
            "latent": latent if isinstance(latent, int) and not isinstance(latent, bool) and latent > 0 else 0,
            "projection_bias": bool(cfg.get("mlp_bias", False))}

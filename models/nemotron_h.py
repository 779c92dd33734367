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
(KV groups, parameters) from them. Mamba-2 sizes are read where vLLM reads them (NemotronH's
get_mamba_state_shape_from_config and MambaMixer2.__init__).

This module imports nothing from the project, so models/kv_groups.py can read the state from it.
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
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


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


def _int(cfg: dict[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BlockPatternError(f"{key} must be a positive integer, got {value!r}"[:120])
    return value


def mamba2_dims(cfg: dict[str, Any]) -> tuple[int, int, int, int, int, int]:
    """(intermediate, n_groups, heads, head_dim, state_size, conv_kernel) of one Mamba-2 mixer:
    intermediate = mamba_num_heads x mamba_head_dim (NemotronHMambaDecoderLayer)."""
    heads, head_dim = _int(cfg, "mamba_num_heads"), _int(cfg, "mamba_head_dim")
    return (heads * head_dim, _int(cfg, "n_groups", 1), heads, head_dim, _int(cfg, "ssm_state_size"),
            _int(cfg, "conv_kernel"))


def mamba2_params(cfg: dict[str, Any], hidden: int) -> int:
    """One Mamba-2 mixer as the checkpoint holds it (MambaMixer2.__init__): in_proj to z, x, B, C and
    dt (2 x intermediate + 2 x groups x state + heads), the depthwise conv1d over x, B and C (with its
    bias when use_conv_bias), A, D and dt_bias (one each a head), the gated RMSNorm over the
    intermediate width, out_proj; in_proj and out_proj biases when use_bias."""
    inter, groups, heads, _, state, kernel = mamba2_dims(cfg)
    conv_dim = inter + 2 * groups * state
    bias = bool(cfg.get("use_bias", False))
    in_proj = hidden * (inter + conv_dim + heads) + (inter + conv_dim + heads) * bias
    conv = conv_dim * kernel + conv_dim * bool(cfg.get("use_conv_bias", True))
    return in_proj + conv + 3 * heads + inter + inter * hidden + hidden * bias


def mamba2_state_bytes(cfg: dict[str, Any], model_dtype_bytes: int = 2) -> tuple[int, int]:
    """One sequence's Mamba-2 state in one layer as (bytes split over TP ranks, bytes every rank holds):
    the conv window, (kernel - 1) x (intermediate + 2 x groups x state) in the model dtype, and the SSM
    state, heads x head_dim x state in mamba_ssm_cache_dtype (float32 unless the config names one)
    (mamba_utils.py MambaStateShapeCalculator.mamba2_state_shape, MambaStateDtypeCalculator). With one
    group vLLM gives every rank its own copy of B and C (extra_groups_for_head_shards); more groups
    split with the heads (vLLM refuses a TP degree that does not divide them)."""
    inter, groups, heads, head_dim, state, kernel = mamba2_dims(cfg)
    ssm_dtype = str(cfg.get("mamba_ssm_cache_dtype") or DEFAULT_SSM_DTYPE)
    if ssm_dtype not in DTYPE_BYTES:
        raise BlockPatternError(f"mamba_ssm_cache_dtype {ssm_dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
    ssm = heads * head_dim * state * DTYPE_BYTES[ssm_dtype]
    conv_x = (kernel - 1) * inter * model_dtype_bytes
    conv_bc = (kernel - 1) * 2 * groups * state * model_dtype_bytes
    if groups == 1:
        return conv_x + ssm, conv_bc
    return conv_x + conv_bc + ssm, 0


def moe_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The MoEShape fields NemotronH sets beyond the common ones (models/moe.py): experts up + down
    (relu2, `is_non_gated_moe`), a router bias (e_score_correction_bias), shared experts of
    moe_shared_expert_intermediate_size each, and the latent width the routed experts work in."""
    latent = cfg.get("moe_latent_size")
    shared = int(cfg.get("n_shared_experts") or 0) * int(cfg.get("moe_shared_expert_intermediate_size") or 0)
    return {"expert_gated": False, "router_bias": True, "shared_intermediate": shared,
            "latent": latent if isinstance(latent, int) and not isinstance(latent, bool) and latent > 0 else 0,
            "projection_bias": bool(cfg.get("mlp_bias", False))}

"""ERNIE-4.5's mixture of experts (Ernie4_5_MoeForCausalLM), named in its own keys.

ERNIE-4.5-21B-A3B and -300B-A47B are Llama-like decoders whose experts carry ERNIE's names (vLLM 0.32,
model_executor/models/ernie45_moe.py; transformers' Ernie4_5_MoeConfig maps num_experts and
num_experts_per_tok onto them):

- `moe_num_experts` routed experts, `moe_k` of them per token, each a gated MLP of `moe_intermediate_size`;
- `moe_num_shared_experts` shared experts, run as one gated MLP of that many times the expert width;
- a router (`gate`, hidden x experts, no bias) with a score-correction bias per expert, both float32
  in vLLM (`GateLinear(params_dtype=torch.float32)`) and in the checkpoint (`_keep_in_fp32_modules_strict`);
- the MoE layers are those with moe_layer_start_index <= i <= moe_layer_end_index and
  (i + 1) % moe_layer_interval == 0 (end -1 or absent: the last layer); the others are dense MLPs of
  `intermediate_size`.

The VL models (Ernie4_5_VLMoeForConditionalGeneration) list two expert counts and widths (text and
vision experts); they are refused here rather than read as text-only.
"""

from __future__ import annotations

from typing import Any


class ErnieConfigError(ValueError):
    """An ERNIE MoE field kvsim cannot read; one line (models/spec.py adds the file)."""


def is_ernie_moe(cfg: dict[str, Any]) -> bool:
    """Whether the config names its experts as ERNIE-4.5 does."""
    return "moe_num_experts" in cfg


def _count(cfg: dict[str, Any], key: str, default: int) -> int:
    value = cfg.get(key, default)
    if value is None:
        return default
    if isinstance(value, list):
        raise ErnieConfigError(f"{key} is a list ({value[:4]}): ERNIE-4.5-VL's text and vision experts are not modelled")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ErnieConfigError(f"{key} must be an integer, got {repr(value)[:40]}")
    return value


def moe_layer_flags(cfg: dict[str, Any], num_layers: int) -> tuple[bool, ...]:
    """Which layers are MoE, as ernie45_moe.py's decoder layer decides."""
    if _count(cfg, "moe_num_experts", 0) <= 0 or cfg.get("use_moe") is False:
        return (False,) * num_layers
    start = _count(cfg, "moe_layer_start_index", 0)
    end = _count(cfg, "moe_layer_end_index", num_layers - 1)
    end = num_layers - 1 if end == -1 else end  # transformers' __post_init__ reads -1 as the last layer
    interval = _count(cfg, "moe_layer_interval", 1)
    if interval < 1:
        raise ErnieConfigError(f"moe_layer_interval must be at least 1, got {interval}")
    return tuple(start <= i <= end and (i + 1) % interval == 0 for i in range(num_layers))


def moe_counts(cfg: dict[str, Any]) -> tuple[int, int, int]:
    """(routed experts, experts per token, expert width); the width 0 when the config names none."""
    return _count(cfg, "moe_num_experts", 0), _count(cfg, "moe_k", 1), _count(cfg, "moe_intermediate_size", 0)


def moe_fields(cfg: dict[str, Any], width: int) -> dict[str, Any]:
    """The MoEShape fields ERNIE sets beyond the common ones: its shared experts (gated, no gate of their
    own), the score-correction bias on the router and the router's float32 weights."""
    shared = _count(cfg, "moe_num_shared_experts", 0)
    return {"shared_intermediate": shared * width, "router_bias": True, "router_fp32": True}

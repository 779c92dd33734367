"""Build the transformers model the backend runs: from a catalog name, a config.json or a directory.

Random weights are enough to measure memory and speed (output lengths are forced from the trace);
real weights load from a local directory (`weights=DIR`, safetensors via from_pretrained, on the host
then moved to the device: no accelerate needed). The
config dict is deep-copied before use because from_config mutates it, and the GQA what-if is a
change of num_key_value_heads before the model is built (random weights only: real checkpoints
have fixed K/V projection shapes).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpu_backend import families
from gpu_backend.attention import register
from models.spec import ModelSpec, SpecError, load_spec

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class ModelLoadError(ValueError):
    """The model cannot be built as asked (one-line message)."""


@dataclass
class LoadedModel:
    model: torch.nn.Module
    spec: ModelSpec
    dtype: torch.dtype
    device: torch.device


def torch_dtype(name: str) -> torch.dtype:
    key = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(name, name)
    if key not in TORCH_DTYPES:
        raise ModelLoadError(f"model dtype {name!r}: choose one of {', '.join(TORCH_DTYPES)}")
    return TORCH_DTYPES[key]


def hf_config(raw: dict[str, Any], kv_heads: int | None = None):
    """A transformers config from a raw config.json dict (copied; the GQA override applied)."""
    from transformers import AutoConfig

    cfg = copy.deepcopy(raw)
    if kv_heads is not None:
        cfg["num_key_value_heads"] = kv_heads
    model_type = cfg.pop("model_type", None)
    if not model_type:
        raise ModelLoadError("config.json has no model_type; transformers cannot pick an architecture")
    for key in ("torch_dtype", "dtype", "_name_or_path", "transformers_version"):
        cfg.pop(key, None)
    try:
        return AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as exc:
        raise ModelLoadError(f"model_type {model_type!r}: {str(exc).splitlines()[0]}") from None


def refuse_kv_groups(spec: ModelSpec) -> None:
    """The paged cache here holds one full-attention K/V pool: models whose layers keep something
    else (MLA latents, sliding or chunked windows, linear-attention state) are simulated only."""
    kinds = sorted({g.label() for g in spec.groups if g.kind != "full"})
    if kinds:
        raise ModelLoadError(f"{spec.name}: the GPU backend runs full-attention models only; its KV groups "
                             f"({', '.join(kinds)}) are simulated (python -m sim), not measured")


def preflight(name_or_path: str, kv_heads: int | None = None) -> ModelSpec:
    """Every check load_model makes before it builds anything: the spec, its KV groups, the
    transformers config and the family's attention route. A model the backend cannot run fails here
    with one ModelLoadError line (tests/test_gpu_families.py runs it over the whole catalog)."""
    try:
        spec = load_spec(name_or_path)
        if kv_heads is not None:
            spec = spec.with_kv_heads(kv_heads)
    except SpecError as exc:
        raise ModelLoadError(str(exc)) from None
    refuse_kv_groups(spec)
    try:
        families.build_attention(hf_config(spec.config, kv_heads))
    except families.UnsupportedFamily as exc:
        raise ModelLoadError(str(exc)) from None
    return spec


def load_model(name_or_path: str, *, dtype: str = "fp32", device: str = "cpu", weights: str | None = None,
               kv_heads: int | None = None, seed: int = 0, attn_implementation: str | None = None) -> LoadedModel:
    """Build the model in eval mode on `device` with the paged attention registered and selected."""
    from transformers import AutoModelForCausalLM

    spec = preflight(name_or_path, kv_heads)
    tdtype, dev = torch_dtype(dtype), torch.device(device)
    register()
    try:
        if weights is not None:
            model = _from_weights(name_or_path, weights, kv_heads, tdtype, dev, attn_implementation)
        else:
            torch.manual_seed(seed)
            cfg = hf_config(spec.config, kv_heads)
            with dev:
                model = AutoModelForCausalLM.from_config(
                    cfg, attn_implementation=attn_implementation or families.build_attention(cfg), dtype=tdtype)
        if attn_implementation is None:
            families.install(model)
    except families.UnsupportedFamily as exc:
        raise ModelLoadError(str(exc)) from None
    model.eval()
    return LoadedModel(model=model, spec=spec, dtype=tdtype, device=dev)


def _from_weights(name_or_path: str, weights: str, kv_heads: int | None, tdtype: torch.dtype, dev: torch.device,
                  attn_implementation: str | None):
    """from_pretrained on the host, then .to(device): a device_map would need accelerate."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if kv_heads is not None and kv_heads != load_spec(name_or_path).num_kv_heads:
        raise ModelLoadError("--kv-heads cannot change a checkpoint's K/V projections; use random weights")
    if not Path(weights).is_dir():
        raise ModelLoadError(f"{weights}: weights directory not found")
    attn = attn_implementation or families.build_attention(AutoConfig.from_pretrained(weights))
    model = AutoModelForCausalLM.from_pretrained(weights, attn_implementation=attn, dtype=tdtype)
    return model.to(dev)

"""KV-cache storage dtypes: bytes per element and where the quantisation scales live.

A real quantised cache stores its scales next to the values, so every byte count here includes
them. Two scale layouts exist:
- per tensor (fp8 e4m3): one fp32 scale per layer for K and one for V. It does not grow with
  tokens, so it is a fixed cost (`fixed_scale_bytes`), not part of the per-token bytes.
- per token per kv head (int8, int4, fp8-per-token-head): one fp32 scale for K and one for V for
  every token in every kv head of every layer, so int8 costs 2 x layers x kv_heads x (head_dim + 4)
  bytes per token (vLLM 0.32's Triton backend packs exactly this: vllm/v1/attention/backends/
  triton_attn.py `customize_spec`, data + one fp32 scale per K/V side);
- per 16-element block (nvfp4): one fp8 scale per 16 values, packed after the 4-bit data, so a
  head row is head_dim/2 + head_dim/16 bytes (vllm/utils/torch_utils.py `nvfp4_kv_cache_full_dim`).

Names follow the engines: each dtype says which serving engines offer it (`engines`), so a planner
never offers a KV format no engine runs.

Adding a dtype is one line in KV_DTYPES (or `register_kv_dtype` from outside). This module imports
only models.registry (models/spec.py uses it), so it stays at the bottom of the dependency graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from models.registry import Registry

SCALE_BYTES = 4  # scales are stored as fp32

PER_TENSOR = "per_tensor"
PER_TOKEN_HEAD = "per_token_head"
PER_BLOCK16 = "per_block16"  # one fp8 (1 B) scale per 16 elements of a row (NVFP4)
BLOCK16 = 16


@dataclass(frozen=True)
class KVDtype:
    """How one K or V element is stored, and how its scales are laid out (None = no scales)."""

    name: str
    element_bits: int
    scale_layout: str | None = None
    description: str = ""
    engines: str = ""  # serving engines that offer this KV format, with their own names for it

    @property
    def bytes_per_element(self) -> Fraction:
        """Exact bytes per element (int4 is 1/2): Fraction keeps the arithmetic exact."""
        return Fraction(self.element_bits, 8)


KV_DTYPES: Registry[KVDtype] = Registry("KV dtype", (
    (d.name, d)
    for d in (
        KVDtype("fp32", 32, None, "IEEE float32", "vLLM float32 models (kv_cache_dtype auto)"),
        KVDtype("fp16", 16, None, "IEEE float16", "vLLM float16; SGLang; TensorRT-LLM"),
        KVDtype("bf16", 16, None, "bfloat16", "vLLM auto/bfloat16 (the default); SGLang; TensorRT-LLM"),
        KVDtype("fp8", 8, PER_TENSOR, "fp8 e4m3, one fp32 scale per layer for K and for V",
                "vLLM fp8 / fp8_e4m3; SGLang fp8_e4m3; TensorRT-LLM FP8 KV"),
        KVDtype("fp8-e5m2", 8, None, "fp8 e5m2, no scales (the wider exponent needs none)",
                "vLLM fp8_e5m2; SGLang fp8_e5m2"),
        KVDtype("fp8-per-token-head", 8, PER_TOKEN_HEAD, "fp8 e4m3, one fp32 scale per token per kv head for K and for V",
                "vLLM fp8_per_token_head (0.32, Triton attention backend)"),
        KVDtype("int8", 8, PER_TOKEN_HEAD, "int8, one fp32 scale per token per kv head for K and for V",
                "vLLM int8_per_token_head (0.32, Triton attention backend); LMDeploy quant_policy=8; TensorRT-LLM INT8 KV"),
        KVDtype("int4", 4, PER_TOKEN_HEAD, "int4 packed two per byte, fp32 scale per token per kv head",
                "vLLM int4_per_token_head (0.32, Triton attention backend); LMDeploy quant_policy=4"),
        KVDtype("nvfp4", 4, PER_BLOCK16, "fp4 e2m1 packed two per byte, one fp8 scale per 16 values",
                "vLLM nvfp4 (Blackwell); TensorRT-LLM NVFP4 KV"),
    )
))


def register_kv_dtype(dtype: KVDtype) -> KVDtype:
    """Add a KV dtype under its own name: it then shows in the CLI, the Scenario checks and the form."""
    if dtype.scale_layout not in (None, PER_TENSOR, PER_TOKEN_HEAD, PER_BLOCK16):
        raise ValueError(f"KV dtype {dtype.name!r}: unknown scale layout {dtype.scale_layout!r}")
    return KV_DTYPES.register(dtype.name, dtype)

ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16", "fp8_e4m3": "fp8",
           "e4m3": "fp8", "float8_e4m3fn": "fp8", "fp8_e5m2": "fp8-e5m2", "e5m2": "fp8-e5m2",
           "float8_e5m2": "fp8-e5m2", "fp8_per_token_head": "fp8-per-token-head",
           "int8_per_token_head": "int8", "int4_per_token_head": "int4"}


def get_kv_dtype(name: str | KVDtype) -> KVDtype:
    """Look a KV dtype up by name (case-insensitive, common aliases accepted)."""
    if isinstance(name, KVDtype):
        return name
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in KV_DTYPES:
        raise ValueError(f"unknown KV dtype {name!r}: choose one of {', '.join(KV_DTYPES)}")
    return KV_DTYPES[key]


def list_kv_dtypes() -> list[str]:
    return list(KV_DTYPES)


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, kv_dtype: str | KVDtype) -> int:
    """Bytes one token's K and V take in every layer, per-token scales included (exact).

    int4 with an odd head_dim packs two values per byte across the whole head row, so the
    per-row byte count is rounded up to whole bytes.
    """
    return 2 * num_layers * num_kv_heads * row_bytes(head_dim, kv_dtype)


def row_bytes(values: int, kv_dtype: str | KVDtype) -> int:
    """Bytes of one stored row of `values` elements (one head's K, or an MLA latent), its scales included:
    the data rounded up to whole bytes, + 4 B (per token-head scale) or + values/16 B (nvfp4 block scales)."""
    d = get_kv_dtype(kv_dtype)
    row = d.bytes_per_element * values
    out = -(-row.numerator // row.denominator)  # ceil to whole bytes
    if d.scale_layout == PER_TOKEN_HEAD:
        out += SCALE_BYTES
    elif d.scale_layout == PER_BLOCK16:
        out += -(-values // BLOCK16)
    return out


def fixed_scale_bytes(num_layers: int, kv_dtype: str | KVDtype) -> int:
    """Bytes that do not grow with tokens: per-tensor scales (fp8: one for K, one for V, per layer)."""
    d = get_kv_dtype(kv_dtype)
    return 2 * num_layers * SCALE_BYTES if d.scale_layout == PER_TENSOR else 0

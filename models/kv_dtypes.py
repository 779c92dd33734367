"""KV-cache storage dtypes: bytes per element and where the quantisation scales live.

A real quantised cache stores its scales next to the values, so every byte count here includes
them. Two scale layouts exist:
- per tensor (fp8 e4m3): one fp32 scale per layer for K and one for V. It does not grow with
  tokens, so it is a fixed cost (`fixed_scale_bytes`), not part of the per-token bytes.
- per token per kv head (int8, int4): one fp32 scale for K and one for V for every token in every
  kv head of every layer, so int8 costs 2 x layers x kv_heads x (head_dim + 4) bytes per token.

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


@dataclass(frozen=True)
class KVDtype:
    """How one K or V element is stored, and how its scales are laid out (None = no scales)."""

    name: str
    element_bits: int
    scale_layout: str | None = None
    description: str = ""

    @property
    def bytes_per_element(self) -> Fraction:
        """Exact bytes per element (int4 is 1/2): Fraction keeps the arithmetic exact."""
        return Fraction(self.element_bits, 8)


KV_DTYPES: Registry[KVDtype] = Registry("KV dtype", (
    (d.name, d)
    for d in (
        KVDtype("fp32", 32, None, "IEEE float32"),
        KVDtype("fp16", 16, None, "IEEE float16"),
        KVDtype("bf16", 16, None, "bfloat16"),
        KVDtype("fp8", 8, PER_TENSOR, "fp8 e4m3, one fp32 scale per layer for K and for V"),
        KVDtype("int8", 8, PER_TOKEN_HEAD, "int8, one fp32 scale per token per kv head for K and for V"),
        KVDtype("int4", 4, PER_TOKEN_HEAD, "int4 packed two per byte, fp32 scale per token per kv head"),
    )
))


def register_kv_dtype(dtype: KVDtype) -> KVDtype:
    """Add a KV dtype under its own name: it then shows in the CLI, the Scenario checks and the form."""
    if dtype.scale_layout not in (None, PER_TENSOR, PER_TOKEN_HEAD):
        raise ValueError(f"KV dtype {dtype.name!r}: unknown scale layout {dtype.scale_layout!r}")
    return KV_DTYPES.register(dtype.name, dtype)

ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16", "fp8_e4m3": "fp8",
           "e4m3": "fp8", "float8_e4m3fn": "fp8"}


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
    d = get_kv_dtype(kv_dtype)
    row = d.bytes_per_element * head_dim
    row_bytes = -(-row.numerator // row.denominator)  # ceil to whole bytes
    if d.scale_layout == PER_TOKEN_HEAD:
        row_bytes += SCALE_BYTES
    return 2 * num_layers * num_kv_heads * row_bytes


def fixed_scale_bytes(num_layers: int, kv_dtype: str | KVDtype) -> int:
    """Bytes that do not grow with tokens: per-tensor scales (fp8: one for K, one for V, per layer)."""
    d = get_kv_dtype(kv_dtype)
    return 2 * num_layers * SCALE_BYTES if d.scale_layout == PER_TENSOR else 0

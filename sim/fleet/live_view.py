"""A replica of a running fleet as a router sees it at an arrival (sim/core/routing/view.py).

Exact with skip-ahead: a replica in the middle of a decode run has booked nothing of the run yet
(the engine books it at its end, sim/core/decode_run.py), so its view is computed as stepping would
show it at that time: the same running and waiting requests (a run admits nobody and nobody leaves
before its last step), KV blocks grown through the step in progress (`blocks_to_grow`, no change
to the allocator), and a prefix cache without the least recently used cached blocks that growth
would have evicted (a paged allocator takes clean blocks first, then evicts LRU-first;
`PrefixCache.lru_head`). Allocators of several KV groups show their booked cache (their growth
evicts nothing a prompt of the trace can match only when the group's pool has clean blocks; said
in docs/FLEET.md).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.core.kv.paged import PagedAllocator
from sim.core.routing.view import RoutedRequest

if TYPE_CHECKING:
    from sim.core.decode_run import DecodeRun
    from sim.core.request import RequestTable
    from sim.run.engine import Replica


UNSET = object()  # Slot.headroom of a run no view has read yet


@dataclass
class Slot:
    """The fleet engine's per-replica state beside engine.Replica: the run in flight, the wake-up."""

    run: DecodeRun | None = None
    run_ids: np.ndarray | None = None
    mode: str = ""  # "idle", "run" (may be cut), "" (a general step or nothing to wake)
    # (Any, not object: mypyc's compiled dataclass cannot annotate a field with `object`)
    wake: Any = None  # a simpy Event while the engine sleeps idle (woken by it)
    done: Any = None  # a simpy Event the engine waits on during a run: its end timer fired
    timer: Any = None  # the run's end timer armed last (a cut arms an earlier one)
    headroom: Any = UNSET  # the run's sorted token headroom once a view asked for it (or its histogram:)
    counted: bool = False  # headroom is PagedAllocator.headroom_counts (a tracked batch)
    lag: int = 0  # what the table's `computed` of the run's members lacks (a lazy decode batch's clock)
    # Routed here, no first token yet: appended to in place, replaced by a new list when pruned (the
    # ReplicaView.prefilling contract), pruned lazily at the first look after the engine ran.
    prefilling: list[int] = field(default_factory=list)
    pending_memo: tuple[int, int, int] = (-1, 0, 0)  # (Replica.epoch, pending prefill tokens, how many of prefilling they sum)
    routed_prompt: int = 0  # prompt tokens routed here
    routed: int = 0


    def timer_fired(self, timer: object) -> None:
        """A run's end timer callback: only the timer armed last ends the run."""
        if timer is self.timer:
            self.done.succeed()


class LiveView:
    """ReplicaView of one replica at time `now` (built per arrival; methods compute on demand)."""

    __slots__ = ("block_size", "index", "now", "num_blocks", "rep", "slot", "table")

    def __init__(self, rep: Replica, slot: Slot, table: RequestTable, now: float) -> None:
        self.rep, self.slot, self.table, self.now = rep, slot, table, now
        self.index = rep.index
        self.num_blocks = rep.alloc.num_blocks
        self.block_size = rep.alloc.block_size

    def waiting(self) -> int:
        rep = self.rep
        return rep.sched.num_waiting + len(rep.times) - rep.ptr

    def running(self) -> int:
        sched = self.rep.sched
        loading = getattr(sched, "remote", None)
        return sched.num_running + (len(loading.loading) if loading is not None else 0)

    def pending_prefill_tokens(self) -> int:
        """Memoised per state epoch: requests routed here since the last look are only appended (they
        are summed on), so an arrival costs its own requests, not the whole queue again."""
        slot, now = self.slot, self.rep.epoch
        epoch, total, counted = slot.pending_memo
        if epoch != now:  # the engine ran: first tokens and computed tokens may have moved
            total = _recount(slot, self.table)
        else:
            total += _remaining_prompt(slot.prefilling[counted:], self.table)
        slot.pending_memo = (now, total, len(slot.prefilling))
        return total

    def prefilling(self) -> list[int]:
        self.pending_prefill_tokens()  # prunes the list (memoised per state epoch)
        return self.slot.prefilling

    def _growth_blocks(self) -> int:
        """Blocks the run in flight has taken by now, as stepping would have booked them."""
        slot = self.slot
        run, ids = slot.run, slot.run_ids
        if run is None or ids is None:
            return 0
        ends = run.ends
        steps = 1 + bisect_right(ends, self.now)
        if steps > len(ends):
            steps = len(ends)
        headroom = slot.headroom
        if headroom is UNSET:  # once per run (a cut keeps the batch and its tokens at the start)
            alloc = self.rep.alloc
            counts = alloc.headroom_counts(ids) if isinstance(alloc, PagedAllocator) else None
            slot.counted = counts is not None
            headroom = slot.headroom = counts if counts is not None else \
                _sorted_headroom(alloc, ids, self.table.computed[ids] + slot.lag)
        if slot.counted:
            return _growth_of_counts(headroom, steps, self.block_size)
        if headroom is None:
            return int(self.rep.alloc.blocks_to_grow(ids, self.table.computed[ids] + (slot.lag + steps)))
        return _growth_at(headroom, steps, self.block_size)

    def used_blocks(self) -> int:
        alloc = self.rep.alloc
        used = alloc.num_blocks - alloc.num_free_blocks
        return used if self.slot.run is None else used + self._growth_blocks()

    def cached_prompt_tokens(self, req: RoutedRequest) -> int:
        if req.prefix_hashes is None:
            return 0
        alloc = self.rep.alloc
        hit = alloc.prefix_hit_tokens(req.prompt_tokens, req.prefix_hashes)
        if not hit or self.slot.run is None or not isinstance(alloc, PagedAllocator):
            return hit
        evicted = self._growth_blocks() - (alloc.num_free_blocks - alloc.cache.num_parked)
        if evicted <= 0:
            return hit
        gone = alloc.cache.lru_head(evicted)
        blocks = alloc.cache.match(alloc.cache.chain_keys(req.prefix_hashes), hit // alloc.block_size)
        kept = next((i for i, b in enumerate(blocks) if b in gone), len(blocks))
        return kept * alloc.block_size

    def held_prompt_blocks(self, req: RoutedRequest) -> int:
        """Leading full prompt blocks in the GPU prefix cache and in use (not parked); a request holds
        its whole prefix, so they lead the match, and growth evicts only parked blocks."""
        alloc = self.rep.alloc
        if req.prefix_hashes is None or not isinstance(alloc, PagedAllocator) or not alloc.prefix_caching:
            return 0
        cache = alloc.cache
        blocks = cache.match(cache.chain_keys(req.prefix_hashes), req.prompt_tokens // alloc.block_size)
        return next((i for i, b in enumerate(blocks) if cache.is_parked(b)), len(blocks))

    def tier_hit_tokens(self, req: RoutedRequest) -> dict[str, int]:
        """The replica's lower-tier hits for `req` from where its GPU hit ends, as admission would
        look them up now (TierStack.lookup: no side effects; the last prompt token never hits)."""
        if req.prefix_hashes is None:
            return {}
        stack = getattr(self.rep.sched, "tiers", None)
        if stack is None:
            return {}
        blocks = stack.hit_blocks(self.rep.alloc, req.prompt_tokens, req.prefix_hashes, self.cached_prompt_tokens(req))
        return {name: n * self.block_size for name, n in blocks.items() if n}  # a per-group pool: sim/core/tiers/grouped.py


def _sorted_headroom(alloc: object, ids: np.ndarray, tokens: np.ndarray) -> list[int] | None:
    """The batch's token headroom, ascending (None: the allocator has no whole-block headroom)."""
    f = getattr(alloc, "token_headroom", None)
    return None if f is None else sorted(f(ids, tokens).tolist())


def _growth_at(headroom: list[int], steps: int, block_size: int) -> int:
    """blocks_to_grow after `steps` tokens each, from the sorted headroom (PagedAllocator.token_headroom):
    a request with headroom h < steps takes ceil((steps - h) / block_size) blocks. When every
    headroom is under one block (a paged pool's usual case) that sum is n x q + #{h < r} for
    steps = q x block_size + r: each request crosses q block boundaries, and one more if h < r."""
    k = bisect_left(headroom, steps)
    if k == 0:
        return 0
    if steps - headroom[0] <= block_size:  # each crossing request takes exactly one block
        return k
    if headroom[-1] < block_size:  # then steps > block_size > every headroom: k is every request
        q, r = divmod(steps, block_size)
        return k * q + bisect_left(headroom, r)
    return sum(-(-(steps - h) // block_size) for h in headroom[:k])


def _growth_of_counts(counts: list[int], steps: int, block_size: int) -> int:
    """_growth_at from the histogram of headroom (counts[h]: members with h < block_size spare
    slots, PagedAllocator.headroom_counts): the same sum, a term per headroom value."""
    total = 0
    for h in range(min(steps, block_size)):
        c = counts[h]
        if c:
            total += c * ((steps - h + block_size - 1) // block_size)
    return total


SMALL = 32  # up to this many ids, Python beats numpy's per-call cost


def _recount(slot: Slot, table: RequestTable) -> int:
    """Drop the requests that got their first token (the list is replaced only if one did) and
    sum the prompt tokens the rest have still to compute."""
    ids, first = slot.prefilling, table.first_token_s
    if len(ids) <= SMALL:
        kept = [r for r in ids if first[r] != first[r]]  # NaN: none yet
        if len(kept) != len(ids):
            slot.prefilling = kept
        return _remaining_prompt(kept, table)
    arr = np.array(ids, dtype=np.int64)
    alive = np.isnan(first[arr])
    if not alive.all():
        arr = arr[alive]
        slot.prefilling = arr.tolist()
    p = table.prompt[arr]
    return int((p - np.minimum(table.computed[arr], p)).sum())


def _remaining_prompt(ids: list[int], table: RequestTable) -> int:
    """Prompt tokens the requests `ids` (a few: those routed since the last look) have still to compute."""
    prompt, computed = table.prompt, table.computed
    total = 0
    for r in ids:
        p = int(prompt[r])
        total += p - min(int(computed[r]), p)
    return total

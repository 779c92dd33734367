"""Contiguous KV allocator: one run of consecutive blocks per request, reserved up front.

This is how serving systems stored KV before paging (and the Orca baselines of the vLLM paper):
a request cannot grow past what it reserved at admission, so the reserve policy
(sim/core/kv/reserve.py) trades admitted batch size against preemptions, and the placement
(first-fit, best-fit or buddy: sim/core/kv/placement.py, sim/core/kv/buddy.py) decides how the free space
shatters into holes. Runs are whole blocks on the same block-id space as the paged allocator, so
the GPU backend can measure both on one pool.

Per request it holds `held` blocks: ceil(max(reserve_tokens, num_tokens) / block_size), at least
one, rounded by the placement (buddy: next power of two). A request may write any slot of what it
holds; appending past that fails (append returns False) and the scheduler preempts.

Breakdown, per request with n written tokens, final length f and h = held slots:
  token_states = n; reserved = min(h, f) - n (slots it will still write);
  internal_frag = h - max(n, min(h, f)) (slots never written: over-reservation, block and buddy
  rounding); and pool-wide external_frag = free slots in holes smaller than the smallest need
  among the waiting requests (0 when nothing waits); free = the remaining free slots.
The three per-request parts are kept as running sums, so breakdown() costs O(holes), not
O(requests).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.core.kv.base import AllocationError, KVAllocator
from sim.core.kv.paged import grown, grown_size
from sim.core.kv.placement import make_placement
from sim.core.step_types import Ids, KVBreakdown, Retention

_sum, _any, _min = np.add.reduce, np.logical_or.reduce, np.minimum.reduce  # ufunc reduce: cheapest on small batches


class ContiguousAllocator(KVAllocator):
    """Up-front contiguous reservations with first-fit, best-fit or buddy placement."""

    def __init__(self, num_blocks: int, block_size: int, bytes_per_token: int, placement: str = "first-fit") -> None:
        if num_blocks < 1 or block_size < 1 or bytes_per_token < 0:
            raise ValueError(f"contiguous allocator: bad sizes ({num_blocks=}, {block_size=}, {bytes_per_token=})")
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self.bytes_per_token = int(bytes_per_token)
        self.placement = make_placement(placement, self.num_blocks)
        size = 1024
        self._ntok = np.zeros(size, dtype=np.int64)
        self._start = np.zeros(size, dtype=np.int64)
        self._held = np.zeros(size, dtype=np.int64)  # blocks held (after placement rounding)
        self._cap = np.zeros(size, dtype=np.int64)  # tokens the run can hold (held x block_size here)
        self._will = np.zeros(size, dtype=np.int64)  # min(held slots, final tokens)
        self._active = np.zeros(size, dtype=bool)
        self._sum_tokens = 0  # sum of n
        self._sum_written_or_will = 0  # sum of max(n, min(h, f))
        self._sum_held_slots = 0  # sum of h

    # --- admission ---------------------------------------------------------------------------
    def _blocks_for(self, num_tokens: int, reserve_tokens: int) -> int:
        return max(1, -(-max(int(reserve_tokens), int(num_tokens)) // self.block_size))

    def can_allocate(self, num_tokens: int, reserve_tokens: int, prefix_hashes: Sequence[int] | None = None,
                     *, computed_tokens: int = 0, chunk_tokens: int | None = None) -> bool:
        return self.placement.can_fit(self._blocks_for(num_tokens, reserve_tokens))

    def allocate(
        self,
        req_id: int,
        num_tokens: int,
        final_tokens: int,
        reserve_tokens: int,
        prefix_hashes: Sequence[int] | None = None,
        *,
        retention: Retention | None = None,
        computed_tokens: int = 0,
    ) -> int:
        """Reserve max(reserve_tokens, num_tokens) slots in one run; no prefix caching (returns 0).
        A contiguous reservation is fixed up front, loaded tokens or not (computed_tokens ignored)."""
        if num_tokens < 0:
            raise AllocationError(f"request {req_id}: negative token count {num_tokens}")
        if req_id < len(self._active) and self._active[req_id]:
            raise AllocationError(f"request {req_id} is already allocated")
        self._ensure(req_id)
        blocks = self._blocks_for(num_tokens, reserve_tokens)
        start = self.placement.alloc(blocks)
        if start is None:
            raise AllocationError(f"request {req_id}: no hole of {blocks} blocks")
        self._place(req_id, start, self.placement.size_for(blocks), num_tokens, final_tokens)
        return 0

    def _place(self, req_id: int, start: int, held: int, num_tokens: int, final_tokens: int) -> None:
        slots = held * self.block_size
        will = min(slots, int(final_tokens))
        self._ntok[req_id], self._start[req_id], self._held[req_id] = num_tokens, start, held
        self._cap[req_id] = slots
        self._will[req_id] = will
        self._active[req_id] = True
        self._sum_tokens += num_tokens
        self._sum_written_or_will += max(num_tokens, will)
        self._sum_held_slots += slots

    # --- growth --------------------------------------------------------------------------------
    def append(self, req_id: int, num_new_tokens: int) -> bool:
        if num_new_tokens < 0:
            raise AllocationError(f"request {req_id}: cannot append {num_new_tokens} tokens")
        self._check(req_id)
        if self._ntok[req_id] + num_new_tokens > self._cap[req_id]:
            return False
        n = int(self._ntok[req_id])
        will = int(self._will[req_id])
        self._sum_tokens += num_new_tokens
        self._sum_written_or_will += max(n + num_new_tokens, will) - max(n, will)
        self._ntok[req_id] = n + num_new_tokens
        return True

    def blocks_to_grow(self, req_ids: Ids, new_num_tokens: Ids) -> int:
        """0 when every request stays inside its reservation; otherwise num_blocks + 1, a count no
        pool can supply (a contiguous run never grows: the caller must preempt)."""
        ids = np.asarray(req_ids, dtype=np.intp)
        new = np.asarray(new_num_tokens, dtype=np.int64)
        return self.num_blocks + 1 if _any(new > self._cap[ids]) else 0

    def fits_growth(self, req_ids: Ids, num_new_tokens: int) -> bool:
        """Could every request grow by `num_new_tokens` inside its reservation now?"""
        ids = np.asarray(req_ids, dtype=np.intp)
        return self.blocks_to_grow(ids, self._ntok[ids] + num_new_tokens) <= self.num_free_blocks

    def grow_by(self, req_ids: Ids, num_new_tokens: int) -> None:
        ids = np.asarray(req_ids, dtype=np.intp)
        self.grow_many(ids, self._ntok[ids] + num_new_tokens)

    def grow_many(self, req_ids: Ids, new_num_tokens: Ids) -> None:
        ids = np.asarray(req_ids, dtype=np.intp)
        new = np.asarray(new_num_tokens, dtype=np.int64)
        if ids.size == 0:
            return
        old = self._ntok[ids]
        grow = new - old
        if _min(grow) < 0:
            raise AllocationError("grow_many: a request cannot shrink")
        if _any(new > self._cap[ids]):  # also catches ids not allocated
            raise AllocationError("grow_many: a request would outgrow its reservation")
        will = self._will[ids]
        self._sum_tokens += int(_sum(grow))
        self._sum_written_or_will += int(_sum(np.maximum(new, will) - np.maximum(old, will)))
        self._ntok[ids] = new

    # --- release --------------------------------------------------------------------
    def free(self, req_id: int) -> None:
        self._check(req_id)
        n, will, held = int(self._ntok[req_id]), int(self._will[req_id]), int(self._held[req_id])
        self.placement.free(int(self._start[req_id]), held)
        self._sum_tokens -= n
        self._sum_written_or_will -= max(n, will)
        self._sum_held_slots -= held * self.block_size
        self._active[req_id] = False
        self._ntok[req_id] = self._held[req_id] = self._will[req_id] = self._cap[req_id] = 0

    # --- books ------------------------------------------------------------------------------------
    def block_table(self, req_id: int) -> list[int]:
        """Every block held, in order: the run start .. start + held - 1."""
        self._check(req_id)
        start = int(self._start[req_id])
        return list(range(start, start + int(self._held[req_id])))

    def num_tokens(self, req_id: int) -> int:
        return int(self._ntok[req_id]) if req_id < len(self._ntok) else 0

    @property
    def num_free_blocks(self) -> int:
        return self.placement.free_blocks

    def breakdown(self, waiting_reserve_tokens: Sequence[int] = ()) -> KVBreakdown:
        bpt, bs = self.bytes_per_token, self.block_size
        external_blocks = 0
        if len(waiting_reserve_tokens):
            smallest = self._blocks_for(0, int(np.min(waiting_reserve_tokens)))
            external_blocks = self.placement.blocks_in_holes_smaller_than(smallest)
        return KVBreakdown(
            token_states=self._sum_tokens * bpt,
            reserved=(self._sum_written_or_will - self._sum_tokens) * bpt,
            internal_frag=(self._sum_held_slots - self._sum_written_or_will) * bpt,
            external_frag=external_blocks * bs * bpt,
            free=(self.placement.free_blocks - external_blocks) * bs * bpt,
        )

    def check_invariants(self) -> None:
        """Raise AssertionError if the books disagree (for tests and debugging)."""

        def need(ok: bool, what: str) -> None:
            if not ok:
                raise AssertionError(f"contiguous allocator: {what}")

        owner = np.full(self.num_blocks, -1, dtype=np.int64)
        for r in np.flatnonzero(self._active).tolist():
            s, h = int(self._start[r]), int(self._held[r])
            need(h >= 1 and s >= 0 and s + h <= self.num_blocks, f"request {r} run out of range")
            need(bool((owner[s : s + h] == -1).all()), f"request {r} overlaps another run")
            need(int(self._ntok[r]) <= int(self._cap[r]), f"request {r} outgrew its run")
            owner[s : s + h] = r
        for s, length in self.placement.holes():
            need(bool((owner[s : s + length] == -1).all()), f"hole at {s} overlaps a run")
            owner[s : s + length] = -2
        need(bool((owner == -2).sum() == self.placement.free_blocks), "free block count")
        need(bool((owner != -1).all()), "blocks not conserved (some neither free nor held)")
        act = self._active
        n, will, held = self._ntok[act], self._will[act], self._held[act] * self.block_size
        need(int(n.sum()) == self._sum_tokens, "token sum")
        need(int(np.maximum(n, will).sum()) == self._sum_written_or_will, "written-or-will sum")
        need(int(held.sum()) == self._sum_held_slots, "held sum")

    # --- internals --------------------------------------------------------------------------------
    def _ensure(self, req_id: int) -> None:
        size = grown_size(req_id, len(self._active))
        if size:
            for name in ("_ntok", "_start", "_held", "_cap", "_will", "_active"):
                setattr(self, name, grown(getattr(self, name), size))

    def _check(self, req_id: int) -> None:
        if not (0 <= req_id < len(self._active) and self._active[req_id]):
            raise AllocationError(f"request {req_id} is not allocated")

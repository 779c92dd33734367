"""Block ids and reference counts of the hybrid pool with prefix caching (sim/core/kv/hybrid_prefix.py).

The same scheme as the paged allocator (sim/core/kv/paged.py): a block in use has refcount 1 unless
it is in `extra` (block -> refcount - 1), since sharing (a hit on a block another request holds) is
rare next to the blocks taken, released and evicted every step; so the common paths touch no
per-block dict. Whether a block is in use at all is one byte per id (`live`, a bytearray), which a
hit reads to tell a shared block from a cached free one. The module is compiled (sim/native), where
a loop over a list of ids reads and stores bytearray bytes at C speed: no numpy index per call
(numpy's fancy index paid ~3 us for a list of any length, its scalar index ~0.1 us a block).

Ids are never reused: group g's k-th block is k x groups + g (so a block's group is its id modulo
groups), and a run of new blocks is one strided slice of `live`, set in one store. `live` grows
with the ids: one byte per block ever taken (10.5 M ids, a 16 MiB array, for the 12,031-request
Mooncake trace on gpt-oss-20b).
"""

from __future__ import annotations

import operator
from itertools import compress, takewhile

import numpy as np


class BlockRefs:
    """Ids per group, in-use bytes and the shared blocks' extra references."""

    def __init__(self, groups: int) -> None:
        self.groups = groups
        self._next = [0] * groups  # per group: blocks made so far
        self.live = bytearray(1024)  # 1: in use
        self.extra: dict[int, int] = {}  # shared blocks in use: block -> refcount - 1

    def new(self, g: int, count: int, in_use: bool = True) -> list[int]:
        """`count` new ids of group g (taken into use, or not: cached and parked at once)."""
        groups, start = self.groups, self._next[g]
        self._next[g] = start + count
        lo, hi = start * groups + g, (start + count) * groups
        live = self.live
        if hi > len(live):
            live.extend(bytes(max(2 * len(live), hi) - len(live)))
        if in_use and count > 0:
            live[lo:hi:groups] = b"\x01" * count
        return list(range(lo, hi, groups))

    def claim_many(self, blocks: list[int]) -> list[int]:
        """claim() for each of `blocks` (distinct): returns the ones no request held (cached free),
        in order; the others are shared now."""
        live, any_held = self.live, False
        held = []
        for b in blocks:
            h = live[b]
            any_held = any_held or h > 0
            held.append(h)
            live[b] = 1
        if not any_held:
            return blocks
        extra, free = self.extra, []
        for b, h in zip(blocks, held, strict=True):
            if h:
                extra[b] = extra.get(b, 0) + 1
            else:
                free.append(b)
        return free

    def count_in_use(self, blocks: list[int]) -> int:
        live, n = self.live, 0
        for b in blocks:
            n += live[b]
        return n

    def release(self, span: list[int], maybe_shared: bool = True) -> int | list[bool]:
        """Drop one reference to each block of `span`: a shared one keeps its other users, the rest
        are out of use. Returns k when the shared blocks are exactly the first k of the span (0: none
        was shared), else per block whether it is out of use now. The shared ones are nearly always
        a leading run (hits are prefixes: on the Mooncake trace every release with shared blocks),
        so that case is found by a scan that stops at the first unshared block and one membership
        pass over the rest, with no per-block list built. `maybe_shared` False: the caller knows
        none is (its group shares nothing)."""
        extra = self.extra
        if not maybe_shared or not extra or extra.keys().isdisjoint(span):
            self._out_of_use(span)
            return 0
        lead = len(list(takewhile(extra.__contains__, span)))
        rest = span[lead:]
        if extra.keys().isdisjoint(rest):
            self._drop_extra(span[:lead])
            self._out_of_use(rest)
            return lead
        shared = list(map(extra.__contains__, span))
        self._drop_extra(list(compress(span, shared)))
        alone = list(map(operator.not_, shared))
        self._out_of_use(list(compress(span, alone)))
        return alone

    def _out_of_use(self, span: list[int]) -> None:
        """Mark blocks with no user left."""
        live = self.live
        for b in span:
            live[b] = 0

    def _drop_extra(self, shared: list[int]) -> None:
        """One user fewer for each of the (shared) blocks."""
        extra = self.extra
        for b in shared:
            e = extra[b]
            if e == 1:
                del extra[b]
            else:
                extra[b] = e - 1

    def release_one(self, block: int) -> bool:
        """release([block]) for one block: True if it is out of use now."""
        e = self.extra.get(block)
        if e is None:
            self.live[block] = 0
            return True
        if e == 1:
            del self.extra[block]
        else:
            self.extra[block] = e - 1
        return False

    def counts(self) -> dict[int, int]:
        """Block -> refcount of every block in use (tests and invariants)."""
        out = {b: 1 + self.extra.get(b, 0) for b in np.flatnonzero(np.frombuffer(self.live, dtype=np.uint8)).tolist()}
        if not self.extra.keys() <= out.keys():
            raise AssertionError("block refs: a shared block is not in use")
        return out

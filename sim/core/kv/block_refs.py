"""Block ids and reference counts of the hybrid pool with prefix caching (sim/core/kv/hybrid_prefix.py).

The same scheme as the paged allocator (sim/core/kv/paged.py): a block in use has refcount 1 unless
it is in `extra` (block -> refcount - 1), since sharing (a hit on a block another request holds) is
rare next to the blocks taken, released and evicted every step; so the common paths touch no
per-block dict. Whether a block is in use, and by more than one request, is one byte per id
(`live`, a bytearray: 0 out of use, 1 one user, SHARED more, their count in `extra`), which a hit
reads to tell a shared block from a cached free one. The module is compiled (sim/native), where a
loop over a list of ids reads and stores bytearray bytes at C speed: no numpy index per call
(numpy's fancy index paid ~3 us for a list of any length, its scalar index ~0.1 us a block).

Ids are never reused: group g's k-th block is k x groups + g (so a block's group is its id modulo
groups), and a run of new blocks is one strided slice of `live`, set in one store. A table is mostly
such runs, so a release reads and clears each run's bytes as one slice (SHARED found by
`bytearray.count`), not block by block. `live` grows with the ids: one byte per block ever taken
(10.5 M ids, a 16 MiB array, for the 12,031-request Mooncake trace on gpt-oss-20b).
"""

from __future__ import annotations

import operator
from itertools import compress, takewhile

import numpy as np

SHARED = 2  # `live` byte of a block more than one request uses


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
        live, groups, n, i = self.live, self.groups, len(blocks), 0
        while i < n:  # runs of ids no request holds: taken into use a slice at a time
            b = blocks[i]
            j = self._run_end(blocks, i)
            following = b + (j - i) * groups
            if j - i > 1:
                if live[b:following:groups].count(0) != j - i:
                    break
                live[b:following:groups] = b"\x01" * (j - i)
            elif live[b]:
                break
            else:
                live[b] = 1
            i = j
        if i == n:
            return blocks
        extra, free = self.extra, blocks[:i]
        for b in blocks[i:]:
            if live[b]:
                extra[b] = extra.get(b, 0) + 1
                live[b] = SHARED
            else:
                live[b] = 1
                free.append(b)
        return free

    def count_in_use(self, blocks: list[int]) -> int:
        live, groups, n, i, idle = self.live, self.groups, len(blocks), 0, 0
        while i < n:
            b = blocks[i]
            j = self._run_end(blocks, i)
            if j - i > 1:
                idle += live[b:b + (j - i) * groups:groups].count(0)
            elif not live[b]:
                idle += 1
            i = j
        return n - idle

    def _run_end(self, span: list[int], i: int) -> int:
        """The end of the run of ids that starts at span[i] (each the one before plus `groups`:
        ids taken together, by one `new`)."""
        groups, n = self.groups, len(span)
        j, following = i + 1, span[i] + groups
        while j < n and span[j] == following:
            j += 1
            following += groups
        return j

    def release(self, span: list[int], maybe_shared: bool = True) -> int | list[bool]:
        """Drop one reference to each block of `span`: a shared one keeps its other users, the rest
        are out of use. Returns k when the shared blocks are exactly the first k of the span (0: none
        was shared), else per block whether it is out of use now. The shared ones are nearly always
        a leading run (hits are prefixes: on the Mooncake trace every release with shared blocks),
        so that case is found by a scan that stops at the first unshared block, then the rest's runs
        of ids cleared where their bytes hold no shared block, with no per-block list built.
        `maybe_shared` False: the caller knows none is (its group shares nothing)."""
        extra = self.extra
        if not maybe_shared or not extra:
            self._out_of_use(span)
            return 0
        lead = len(list(takewhile(extra.__contains__, span)))
        if self._out_of_use(span[lead:] if lead else span, keep_shared=True):  # none shared after the lead
            self._drop_extra(span[:lead])
            return lead
        shared = list(map(extra.__contains__, span))
        self._drop_extra(list(compress(span, shared)))
        alone = list(map(operator.not_, shared))
        self._out_of_use(list(compress(span, alone)))
        return alone

    def _out_of_use(self, span: list[int], keep_shared: bool = False) -> bool:
        """Mark blocks with no user left; `keep_shared`: leave every run of ids that holds a shared
        block as it is (the caller sorts those out). True if every block was cleared. A table is
        mostly runs of ids taken together (one `new` each: a stride of `groups`), so each such run
        is one slice read and one store; a store per byte cost several times the comparison that
        finds the run."""
        live, groups, n, i, cleared = self.live, self.groups, len(span), 0, True
        while i < n:
            b = span[i]
            j = self._run_end(span, i)
            following = b + (j - i) * groups
            if j - i > 1:
                if keep_shared and live[b:following:groups].count(SHARED):
                    cleared = False
                else:
                    live[b:following:groups] = bytes(j - i)
            elif keep_shared and live[b] == SHARED:
                cleared = False
            else:
                live[b] = 0
            i = j
        return cleared

    def _drop_extra(self, shared: list[int]) -> None:
        """One user fewer for each of the (shared) blocks."""
        extra, live = self.extra, self.live
        for b in shared:
            e = extra[b]
            if e == 1:
                del extra[b]
                live[b] = 1
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
            self.live[block] = 1
        else:
            self.extra[block] = e - 1
        return False

    def counts(self) -> dict[int, int]:
        """Block -> refcount of every block in use (tests and invariants)."""
        live = np.frombuffer(self.live, dtype=np.uint8)
        out = {b: 1 + self.extra.get(b, 0) for b in np.flatnonzero(live).tolist()}
        if set(np.flatnonzero(live == SHARED).tolist()) != self.extra.keys():
            raise AssertionError("block refs: the shared bytes disagree with the shared blocks")
        return out

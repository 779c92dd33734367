"""The LRU of cached free blocks as a queue of runs (vLLM V1's free queue, hashed blocks only).

A hybrid model's prefix cache parks blocks in runs: a sliding-window group leaves whole stretches
of a long prompt behind at once, and a finished request releases its table in one go. Keeping one
dict entry per parked block (an OrderedDict) made every park and eviction a hash-table operation
on a table of ~10^5 entries; here a park appends one run (a list of blocks and the list of their
keys) and an eviction takes whole runs from the head with list slices, so the per-block work is
done inside list operations.

A hit takes a parked block back into use from anywhere in the queue (`unpark`). Instead of
finding it, the block is noted with the serial of the next run (`_claimed`): an entry of a run
whose serial is below that note is stale and skipped when the run reaches the head; the block's
later park (a run with a serial at or above the note) is its live entry. The order of live entries
is exactly the order of parks, as in an OrderedDict with the unparked entries deleted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any


class RunLRU:
    """Parked (cached, free) blocks with their keys, least recently parked first."""

    def __init__(self) -> None:
        self._runs: deque[list] = deque()  # [serial, blocks, keys, first index not taken, unparks when checked, tag]
        self._serial = 0  # serial of the next run
        self._claimed: dict[int, int] = {}  # unparked block -> serial of the next run at that moment
        self._unparks = 0  # unparks so far: a run checked since the last one has no stale entry
        self.num_parked = 0

    def park(self, blocks: list[int], keys: Sequence[int], tag: Any = None) -> None:
        """Park `blocks` (holding `keys`, in the same order; `tag`: what the caller needs with
        them at eviction), most recently used at the end."""
        if blocks:
            self._runs.append([self._serial, blocks, keys, 0, self._unparks, tag])
            self._serial += 1
            self.num_parked += len(blocks)

    def unpark(self, block: int) -> None:
        """A hit takes a parked block back into use (the caller knows it is parked)."""
        self._claimed[block] = self._serial
        self._unparks += 1
        self.num_parked -= 1

    def unpark_many(self, blocks: list[int]) -> None:
        """unpark() for each of `blocks` (distinct, all parked), in one go: no park comes between."""
        if blocks:
            self._claimed.update(zip(blocks, repeat(self._serial)))
            self._unparks += len(blocks)
            self.num_parked -= len(blocks)

    def evict(self, count: int) -> tuple[list[int], list[int]]:
        """Take the `count` least recently parked blocks out: (blocks, their keys), oldest first."""
        blocks: list[int] = []
        keys: list[int] = []
        for _, rb, rk in self.evict_runs(count):
            blocks += rb
            keys += rk
        return blocks, keys

    def evict_runs(self, count: int) -> list[tuple[Any, list[int], Sequence[int]]]:
        """`evict` as (tag, blocks, keys) per run taken from, oldest first."""
        if count > self.num_parked:
            raise ValueError(f"cannot evict {count} of {self.num_parked} parked blocks")
        out = []
        runs, need = self._runs, count
        while need:
            run = runs[0]
            serial, rb, rk, i, _, tag = run
            take = min(need, len(rb) - i)
            blocks = rb[i : i + take]
            if run[4] != self._unparks and not self._claimed.keys().isdisjoint(blocks):
                self._drop_stale(run)  # a block taken now was unparked since: drop the run's stale entries
                continue
            if take:
                out.append((tag, blocks, rk[i : i + take]))
            need -= take
            if i + take == len(rb):
                runs.popleft()
            else:
                run[3] = i + take
        self.num_parked -= count
        return out

    def _drop_stale(self, run: list) -> None:
        """Rewrite the head run without the entries of blocks unparked since it was parked (and
        forget the notes of its live blocks: their next unpark writes a new one). Only the blocks
        an eviction takes are checked first: a stale entry further on waits until it is reached."""
        serial: int = run[0]
        blocks: list[int] = run[1]
        i: int = run[3]
        claimed = self._claimed
        run[4] = self._unparks
        kept_b: list[int] = []
        kept_k: list[Any] = []
        for b, k in zip(blocks[i:], run[2][i:], strict=True):  # one pass, compiled: native int compares
            at = claimed.get(b)
            if at is not None:
                if at > serial:
                    continue  # stale: the block's live entry (if parked again) is in a later run
                del claimed[b]  # a note from before this park: this entry is live
            kept_b.append(b)
            kept_k.append(k)
        run[1], run[2], run[3] = kept_b, kept_k, 0  # none live: popped

    def entries(self) -> Iterator[tuple[int, Any, Any]]:
        """(block, key, tag) of the parked blocks, least recently parked first (tests, invariants)."""
        for serial, blocks, keys, i, _, tag in self._runs:
            for b, k in zip(blocks[i:], keys[i:], strict=True):
                at = self._claimed.get(b)
                if at is None or at <= serial:
                    yield b, k, tag

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """(block, key) of the parked blocks, least recently parked first."""
        return ((b, k) for b, k, _ in self.entries())

    def head(self, count: int) -> list[int]:
        """The blocks `evict(count)` would take now (no side effects)."""
        out: list[int] = []
        for b, _ in self:
            if len(out) == count:
                break
            out.append(b)
        return out


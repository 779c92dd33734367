"""Where a contiguous reservation goes in the block address space: first-fit and best-fit.

The free space of a contiguous pool is a set of holes (maximal free runs of block ids). Both
policies keep the same books, so they differ only in which hole they pick:
- first-fit: the lowest-address hole large enough (cheap, tends to leave small holes up front);
- best-fit: the smallest hole large enough, lowest address among equals (keeps big holes big).

Holes are kept in two sorted lists (by start, and by (length, start)) so that "can anything fit"
is O(1), best-fit is a bisect, and neighbours coalesce on free in O(log n) plus a list shift.
The buddy placement (sim/core/kv/buddy.py) offers the same methods, so the contiguous allocator does
not care which one it holds.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from models.registry import Registry


class HolePlacement:
    """Free-run books over block ids 0..num_blocks-1 with first-fit or best-fit choice."""

    def __init__(self, num_blocks: int, best_fit: bool = False) -> None:
        if num_blocks < 1:
            raise ValueError(f"placement: num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.best_fit = best_fit
        self._starts: list[int] = []  # hole starts, ascending
        self._by_size: list[tuple[int, int]] = []  # (length, start), ascending
        self._length: dict[int, int] = {}  # start -> length
        self._start_of_end: dict[int, int] = {}  # end (exclusive) -> start
        self.free_blocks = 0
        self._add(0, num_blocks)

    @property
    def name(self) -> str:
        return "best-fit" if self.best_fit else "first-fit"

    # --- sizing --------------------------------------------------------------------------------
    @staticmethod
    def size_for(num_blocks: int) -> int:
        """Blocks actually taken for a request of `num_blocks` (no rounding here)."""
        return num_blocks

    def can_fit(self, num_blocks: int) -> bool:
        return bool(self._by_size) and self._by_size[-1][0] >= num_blocks

    def largest_hole(self) -> int:
        return self._by_size[-1][0] if self._by_size else 0

    # --- allocate / free -----------------------------------------------------------------------
    def alloc(self, num_blocks: int) -> int | None:
        """Start of a run of `num_blocks` free blocks now taken, or None if no hole is large enough."""
        if num_blocks < 1:
            raise ValueError("placement: a reservation takes at least one block")
        if not self.can_fit(num_blocks):
            return None
        if self.best_fit:
            length, start = self._by_size[bisect_left(self._by_size, (num_blocks, -1))]
        else:
            start = next(s for s in self._starts if self._length[s] >= num_blocks)
            length = self._length[start]
        self._remove(start, length)
        if length > num_blocks:
            self._add(start + num_blocks, length - num_blocks)
        return start

    def free(self, start: int, num_blocks: int) -> None:
        """Give a run back, merging it with the holes right before and after it."""
        end = start + num_blocks
        before = self._start_of_end.get(start)
        if before is not None:
            self._remove(before, start - before)
            start = before
        after = self._length.get(end)
        if after is not None:
            self._remove(end, after)
            end += after
        self._add(start, end - start)

    # --- reporting -----------------------------------------------------------------------------
    def holes(self) -> Iterator[tuple[int, int]]:
        """(start, length) of every hole in address order."""
        for s in self._starts:
            yield s, self._length[s]

    def blocks_in_holes_smaller_than(self, num_blocks: int) -> int:
        """Free blocks sitting in holes too small for a run of `num_blocks` (external fragmentation)."""
        total = 0
        for length, _ in self._by_size:
            if length >= num_blocks:
                break
            total += length
        return total

    # --- internals -----------------------------------------------------------------------------
    def _add(self, start: int, length: int) -> None:
        insort(self._starts, start)
        insort(self._by_size, (length, start))
        self._length[start] = length
        self._start_of_end[start + length] = start
        self.free_blocks += length

    def _remove(self, start: int, length: int) -> None:
        del self._starts[bisect_left(self._starts, start)]
        del self._by_size[bisect_left(self._by_size, (length, start))]
        del self._length[start]
        del self._start_of_end[start + length]
        self.free_blocks -= length


@dataclass(frozen=True)
class Placement:
    """One placement policy: `build(num_blocks)` returns books with HolePlacement's methods."""

    name: str
    build: Callable[[int], Any]
    description: str = ""


def _buddy(num_blocks: int) -> Any:
    from sim.core.kv.buddy import BuddyPlacement

    return BuddyPlacement(num_blocks)


PLACEMENTS: Registry[Placement] = Registry("placement", ((p.name, p) for p in (
    Placement("first-fit", lambda n: HolePlacement(n, best_fit=False), "lowest-address hole large enough"),
    Placement("best-fit", lambda n: HolePlacement(n, best_fit=True), "smallest hole large enough"),
    Placement("buddy", _buddy, "power-of-two buddy system (runs rounded up to a power of two)"),
)))


def make_placement(name: str, num_blocks: int) -> Any:
    """Placement books by registered name (first-fit, best-fit, buddy, ...)."""
    return PLACEMENTS.lookup(name).build(num_blocks)

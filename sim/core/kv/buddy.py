"""Power-of-two buddy placement for contiguous reservations (the Orca-style baseline).

Every run handed out is 2**k blocks long and aligned to 2**k, so a freed run finds its partner
("buddy") at `start ^ 2**k` and the two merge back into one run of 2**(k+1). Allocation rounds
the request up to a power of two (the rounding is internal fragmentation) and splits a larger
free run in halves until it has the right size. This is fast and never needs a search, at the
price of rounding waste and of free runs that sit side by side yet cannot merge because they
are not buddies.

A pool whose block count is not a power of two is cut into its binary digits: 100 blocks are
roots of 64 @ 0, 32 @ 64 and 4 @ 96. Each root is aligned to its own size, and buddies never
merge across roots. A run larger than the biggest root can never be placed.

Same methods as HolePlacement (sim/core/kv/placement.py).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class BuddyPlacement:
    """Buddy-system books over block ids 0..num_blocks-1."""

    name = "buddy"

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"placement: num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.max_order = num_blocks.bit_length() - 1
        self._free_lists: list[list[int]] = [[] for _ in range(self.max_order + 1)]  # sorted starts
        self._free_order: dict[int, int] = {}  # start of a free run -> its order
        self._root_starts: list[int] = []
        self._root_orders: list[int] = []
        self.free_blocks = 0
        start = 0
        for order in range(self.max_order, -1, -1):  # binary digits, largest first: each stays aligned
            if num_blocks >> order & 1:
                self._root_starts.append(start)
                self._root_orders.append(order)
                self._add(start, order)
                start += 1 << order

    # --- sizing --------------------------------------------------------------------------------
    @staticmethod
    def size_for(num_blocks: int) -> int:
        """Blocks actually taken for a request of `num_blocks`: the next power of two."""
        return next_pow2(num_blocks)

    def can_fit(self, num_blocks: int) -> bool:
        order = self.size_for(num_blocks).bit_length() - 1
        return any(self._free_lists[o] for o in range(order, self.max_order + 1))

    def largest_hole(self) -> int:
        for o in range(self.max_order, -1, -1):
            if self._free_lists[o]:
                return 1 << o
        return 0

    # --- allocate / free -----------------------------------------------------------------------
    def alloc(self, num_blocks: int) -> int | None:
        """Start of a 2**k run (k = ceil(log2 num_blocks)), splitting a bigger run if needed."""
        if num_blocks < 1:
            raise ValueError("placement: a reservation takes at least one block")
        want = self.size_for(num_blocks).bit_length() - 1
        order = next((o for o in range(want, self.max_order + 1) if self._free_lists[o]), None)
        if order is None:
            return None
        start = self._free_lists[order][0]  # lowest address: deterministic and compact
        self._remove(start, order)
        while order > want:  # split: keep the lower half, free the upper half
            order -= 1
            self._add(start + (1 << order), order)
        return start

    def free(self, start: int, num_blocks: int) -> None:
        """Give a run back and merge it with its buddy as long as the buddy is wholly free."""
        order = self.size_for(num_blocks).bit_length() - 1
        root_order = self._root_orders[bisect_right(self._root_starts, start) - 1]
        while order < root_order:
            buddy = start ^ (1 << order)
            if self._free_order.get(buddy) != order:
                break
            self._remove(buddy, order)
            start = min(start, buddy)
            order += 1
        self._add(start, order)

    # --- reporting -----------------------------------------------------------------------------
    def holes(self) -> Iterator[tuple[int, int]]:
        """(start, length) of every free run in address order (buddies not merged are separate)."""
        for start in sorted(self._free_order):
            yield start, 1 << self._free_order[start]

    def blocks_in_holes_smaller_than(self, num_blocks: int) -> int:
        """Free blocks in runs too small for a request of `num_blocks` (after rounding)."""
        need = self.size_for(num_blocks)
        return sum(len(lst) << o for o, lst in enumerate(self._free_lists) if (1 << o) < need)

    # --- internals -----------------------------------------------------------------------------
    def _add(self, start: int, order: int) -> None:
        insort(self._free_lists[order], start)
        self._free_order[start] = order
        self.free_blocks += 1 << order

    def _remove(self, start: int, order: int) -> None:
        lst = self._free_lists[order]
        del lst[bisect_left(lst, start)]
        del self._free_order[start]
        self.free_blocks -= 1 << order


"""The paged prefix cache's LRU of parked blocks (cached, free) as a queue of runs.

The KV tiers' book (sim/core/run_queue.py, shared with sim/core/tiers/lru.py's LRUTier): each park is
one run (a list of blocks), and a dict maps each parked block to the serial of the run holding its
live entry. A freed table parks hundreds of blocks at once and an eviction takes hundreds from the
head, so an OrderedDict's linked-list node per block (made at each park, freed at each `popitem`) was the
dearer half of that traffic. A hit's unpark deletes the block's dict entry; its entry in the run
goes stale and is passed over when the head reaches it. The order of live entries is the order of
parks, exactly as in the OrderedDict it replaced (a block parked again while parked keeps its place;
tests/test_parked_lru.py checks it against one).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any

from sim.core.run_queue import RunQueue


class ParkedLRU(RunQueue):
    """Parked blocks, least recently parked first."""

    def __init__(self) -> None:
        self._where: dict[int, int] = {}  # parked block -> serial of the run holding its live entry
        self._runs: deque[list[Any]] = deque()  # [serial, blocks, first entry not yet passed]
        self._serial = 0  # serial of the next run
        self._entries = 0  # entries in the queue not yet passed (live and stale)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, block: object) -> bool:
        return block in self._where

    @property
    def contents(self) -> dict[int, int]:
        """The parked blocks as a mapping, for hot membership tests (read it, never write it)."""
        return self._where

    def park(self, blocks: list[int]) -> None:
        """Park `blocks` (distinct; the list is kept as the run) in order, the last most recent. A
        block parked already keeps its place (its entry here is stale: its serial is older)."""
        if blocks:
            deque(map(self._where.setdefault, blocks, repeat(self._run(blocks))), maxlen=0)
            self._compact_if_stale()

    def unpark(self, block: int) -> None:
        """A hit takes a parked block back into use (KeyError if it is not parked)."""
        del self._where[block]
        self._compact_if_stale()

    def unpark_present(self, blocks: Sequence[int]) -> list[int]:
        """`unpark` the parked ones of `blocks`; returns the others, in order."""
        where, rest = self._where, []
        for block in blocks:
            if block in where:
                del where[block]
            else:
                rest.append(block)
        if len(rest) != len(blocks):
            self._compact_if_stale()
        return rest

    def evict(self, n: int) -> list[int]:
        """Take the `n` least recently parked blocks out (oldest first)."""
        if n > len(self._where):
            raise KeyError(f"cannot evict {n} of {len(self._where)} parked blocks")
        return self._evict(n)

    def order(self) -> Iterator[int]:
        """Parked blocks, least recently parked first."""
        return self._live()

"""One lower tier's contents: chunk keys in LRU order within a capacity counted in chunks.

A key is the chained prefix key of a chunk's last engine block (sim/core/kv/prefix_cache.py), so
a hit on a key is a hit on everything before it too. Several replicas may hold the same LRUTier
(a node's CPU tier, the fleet's remote store): it knows nothing about who asks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Protocol

from sim.core.run_queue import RunQueue


class TierContents(Protocol):
    """What a TierStack reads and writes of one tier's contents: LRUTier (chunks of one size) or
    sim/core/tiers/weighted_lru.py's WeightedLRUTier (blocks of several groups' sizes, in pages).
    `len()` and `peak` count units (chunks or pages), `capacity_chunks` is in those units."""

    name: str
    capacity_chunks: int
    stored: int
    evicted: int
    peak: int

    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
    @property
    def contents(self) -> Mapping[int, Any]: ...
    def touch(self, key: int) -> None: ...
    def touch_many(self, keys: Sequence[int]) -> None: ...
    def remove_many(self, keys: Sequence[int]) -> None: ...
    def insert_many(self, new_keys: Any) -> tuple[int, list[int]]: ...
    def resize(self, capacity_chunks: int) -> list[int]: ...
    def remove(self, key: int) -> None: ...
    def lru_order(self) -> list[int]: ...


@dataclass
class LRUTier(RunQueue):
    """Keys in LRU order as a queue of runs (sim/core/run_queue.py): each batch of keys written or
    touched together is one run, and a key touched again joins a newer run (its older entry goes
    stale, passed over when the queue's head reaches it). An OrderedDict took a membership test,
    an insertion with a linked-list node, and a pop that looked the key up again."""

    name: str
    capacity_chunks: int
    _where: dict[int, int] = field(default_factory=dict)  # key -> serial of the run holding its live entry
    _runs: deque[list[Any]] = field(default_factory=deque)  # [serial, keys, first entry not yet passed]
    _serial: int = 0  # serial of the next run
    _entries: int = 0  # entries in the queue not yet passed (live and stale)
    stored: int = 0  # chunks written in
    evicted: int = 0  # chunks dropped (or moved down) at capacity
    peak: int = 0

    def __post_init__(self) -> None:
        if self.capacity_chunks < 0:
            raise ValueError(f"tier {self.name!r}: capacity must be >= 0 chunks, got {self.capacity_chunks}")

    def __contains__(self, key: object) -> bool:
        return key in self._where

    @property
    def contents(self) -> dict[int, int]:
        """The keys as a mapping, for hot membership tests (read it, never write it)."""
        return self._where

    def __len__(self) -> int:
        return len(self._where)

    def touch(self, key: int) -> None:
        """A hit: most recently used now."""
        self.touch_many([key])

    def touch_many(self, keys: Sequence[int]) -> None:
        """touch() of each key in order (every one held)."""
        where = self._where
        if not all(map(where.__contains__, keys)):
            raise KeyError(f"tier {self.name!r}: a touched key is not held")
        if len(set(keys)) == len(keys):
            where.update(zip(keys, repeat(self._run(list(keys)))))
        else:  # a key twice: its last touch counts
            for key in keys:
                where[key] = self._run([key])
        self._compact_if_stale()

    def remove_many(self, keys: Sequence[int]) -> None:
        """remove() of each key (every one held): their entries go stale."""
        deque(map(self._where.pop, keys), maxlen=0)
        self._compact_if_stale()

    def insert(self, key: int) -> list[int]:
        """Store `key` (a key already there is only touched); returns the keys evicted to make room."""
        return self.insert_many([key])[1]

    def insert_many(self, new_keys: Sequence[int]) -> tuple[int, list[int]]:
        """insert() of each key in order: (keys newly stored, keys evicted)."""
        where, cap = self._where, self.capacity_chunks
        if cap == 0:
            return 0, list(new_keys)
        new_keys = list(new_keys)  # kept as the run: the caller's list may change
        before, serial = len(where), self._serial
        got = list(map(where.setdefault, new_keys, repeat(serial)))  # enters the new keys, leaves the others
        if len(where) - before == len(new_keys):  # the common case: every key new (and distinct)
            self._run(new_keys)
            out = self._evict(len(where) - cap) if len(where) > cap else []
            return self._booked(len(new_keys), out)
        for key, at in zip(new_keys, got, strict=True):  # rare: undo, then key by key as insert() would
            if at is serial:
                where.pop(key, None)
        stored, out = 0, []
        for key in new_keys:
            fresh = key not in where
            where[key] = self._run([key])
            if fresh:
                stored += 1
                if len(where) > cap:
                    out += self._evict(1)
        return self._booked(stored, out)

    def _booked(self, stored: int, out: list[int]) -> tuple[int, list[int]]:
        self.stored += stored
        self.evicted += len(out)
        if len(self._where) > self.peak:
            self.peak = len(self._where)
        self._compact_if_stale()
        return stored, out

    def resize(self, capacity_chunks: int) -> list[int]:
        """Change the capacity (swapped-out KV taking room, giving it back); returns the keys evicted."""
        self.capacity_chunks = max(int(capacity_chunks), 0)
        out = self._evict(len(self._where) - self.capacity_chunks) if len(self._where) > self.capacity_chunks else []
        self.evicted += len(out)
        return out

    def remove(self, key: int) -> None:
        """A move up (exclusive policy): the chunk leaves this tier."""
        del self._where[key]
        self._compact_if_stale()

    def lru_order(self) -> list[int]:
        """Keys, least recently used first (tests)."""
        return list(self._live())

"""One lower tier's contents: chunk keys in LRU order within a capacity counted in chunks.

A key is the chained prefix key of a chunk's last engine block (sim/core/kv/prefix_cache.py), so
a hit on a key is a hit on everything before it too. Several replicas may hold the same LRUTier
(a node's CPU tier, the fleet's remote store): it knows nothing about who asks.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Protocol


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
    def contents(self) -> OrderedDict[int, Any]: ...
    def touch(self, key: int) -> None: ...
    def insert_many(self, new_keys: Any) -> tuple[int, list[int]]: ...
    def resize(self, capacity_chunks: int) -> list[int]: ...
    def remove(self, key: int) -> None: ...
    def lru_order(self) -> list[int]: ...


@dataclass
class LRUTier:
    name: str
    capacity_chunks: int
    _keys: OrderedDict[int, None] = field(default_factory=OrderedDict)
    stored: int = 0  # chunks written in
    evicted: int = 0  # chunks dropped (or moved down) at capacity
    peak: int = 0

    def __post_init__(self) -> None:
        if self.capacity_chunks < 0:
            raise ValueError(f"tier {self.name!r}: capacity must be >= 0 chunks, got {self.capacity_chunks}")

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    @property
    def contents(self) -> OrderedDict[int, None]:
        """The keys as a mapping, for hot membership tests (read it, never write it)."""
        return self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def touch(self, key: int) -> None:
        """A hit: most recently used now."""
        self._keys.move_to_end(key)

    def insert(self, key: int) -> list[int]:
        """Store `key` (a key already there is only touched); returns the keys evicted to make room."""
        keys = self._keys
        if key in keys:
            keys.move_to_end(key)
            return []
        if self.capacity_chunks == 0:
            return [key]  # a zero-size tier holds nothing: the chunk passes straight through
        out: list[int] = []
        while len(keys) >= self.capacity_chunks:
            out.append(keys.popitem(last=False)[0])
        keys[key] = None
        self.stored += 1
        self.evicted += len(out)
        if len(keys) > self.peak:
            self.peak = len(keys)
        return out

    def insert_many(self, new_keys: list[int]) -> tuple[int, list[int]]:
        """insert() of each key in order, in one pass: (keys newly stored, keys evicted)."""
        keys, cap = self._keys, self.capacity_chunks
        if cap == 0:
            return 0, list(new_keys)
        out: list[int] = []
        if keys.keys().isdisjoint(new_keys):
            before = len(keys)
            keys.update(zip(new_keys, repeat(None)))  # the common case (fresh blocks): at C speed
            stored = len(keys) - before
            if len(keys) > cap:  # least recent first, in one C loop
                out = [k for k, _ in map(keys.popitem, repeat(False, len(keys) - cap))]
            new_keys = []
        else:
            stored = 0
        for key in new_keys:
            if key in keys:
                keys.move_to_end(key)
                continue
            keys[key] = None
            stored += 1
            if len(keys) > cap:
                out.append(keys.popitem(last=False)[0])
        self.stored += stored
        self.evicted += len(out)
        if len(keys) > self.peak:
            self.peak = len(keys)
        return stored, out

    def resize(self, capacity_chunks: int) -> list[int]:
        """Change the capacity (swapped-out KV taking room, giving it back); returns the keys evicted."""
        self.capacity_chunks = max(int(capacity_chunks), 0)
        out: list[int] = []
        while len(self._keys) > self.capacity_chunks:
            out.append(self._keys.popitem(last=False)[0])
        self.evicted += len(out)
        return out

    def remove(self, key: int) -> None:
        """A move up (exclusive policy): the chunk leaves this tier."""
        del self._keys[key]

    def lru_order(self) -> list[int]:
        """Keys, least recently used first (tests)."""
        return list(self._keys)

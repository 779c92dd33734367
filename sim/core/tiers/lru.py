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
class LRUTier:
    """Keys in LRU order as a queue of runs: each batch of keys written or touched together is one
    run (a list of distinct keys), and a dict maps each held key to the serial of the run that
    holds its live entry. A key touched again joins a newer run and its older entry goes stale
    (passed over when the queue's head reaches it). A batch costs one dict operation per key and
    an eviction one more, both in C loops: an OrderedDict took a membership test, an insertion
    with a linked-list node, and a pop that looked the key up again."""

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

    def _run(self, keys: list[int]) -> int:
        """Queue `keys` (distinct) as the most recent run; returns its serial (the caller enters them)."""
        serial = self._serial
        self._serial += 1
        self._runs.append([serial, keys, 0])
        self._entries += len(keys)
        return serial

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

    def _evict(self, n: int) -> list[int]:
        """Drop the `n` least recently used keys (the live entries at the queue's head); returns them."""
        where, runs, out = self._where, self._runs, []
        pop = where.pop
        while n:
            run = runs[0]
            serial, keys, i = run
            part = keys[i : i + n]
            at = list(map(pop, part, repeat(None)))
            if at.count(serial) == len(part):  # every entry live (the common case)
                live = part
            else:  # stale entries (keys touched since, or gone): put back any held elsewhere
                live = [k for k, a in zip(part, at, strict=True) if a == serial]
                where.update((k, a) for k, a in zip(part, at, strict=True) if a is not None and a != serial)
            out += live
            n -= len(live)
            self._entries -= len(part)
            if i + len(part) == len(keys):
                runs.popleft()
            else:
                run[2] = i + len(part)
        return out

    def _compact_if_stale(self) -> None:
        """Rewrite the queue as one run of the live keys once stale entries outnumber live ones
        twice over (a tier that never fills would otherwise keep every touch)."""
        if self._entries <= 2 * len(self._where) + 4096:
            return
        live = self.lru_order()
        self._runs.clear()
        self._entries = 0
        self._where.update(zip(live, repeat(self._run(live))))

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
        where = self._where
        return [k for serial, keys, i in self._runs for k in keys[i:] if where.get(k) == serial]

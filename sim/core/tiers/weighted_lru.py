"""One lower tier's contents when blocks differ in size: keys in LRU order within a capacity in units.

Models with several KV groups (sliding window + full attention: gpt-oss, Gemma-3) keep one block per
group per position, and a group's block is `pages` pages of the GPU pool (sim/core/kv/hybrid.py):
its own layers at its own bytes. A tier holds GiB x 2^30 // page bytes pages; a block of a group
takes its pages, so the tier holds the same bytes whichever groups fill it. vLLM's CPU offloading
counts chunks of one size (vllm/v1/kv_offload/cpu/spec.py: num_chunks = bytes // kv_bytes_per_chunk,
one GPU block index of every tensor), which is the same thing when, as in vLLM's hybrid layout,
every group's block is one page.

Same interface as sim/core/tiers/lru.py's LRUTier, with one difference: `len()` and `peak` count
units (pages), not keys, so the occupancy books (units x page bytes) read both alike.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class WeightedLRUTier:
    name: str
    capacity_chunks: int  # units (pages), the name the occupancy books read
    _keys: OrderedDict[int, int] = field(default_factory=OrderedDict)  # key -> its units, LRU first
    used: int = 0
    stored: int = 0  # keys written in
    evicted: int = 0  # keys dropped at capacity
    peak: int = 0  # most units held after a batch of stores

    def __post_init__(self) -> None:
        if self.capacity_chunks < 0:
            raise ValueError(f"tier {self.name!r}: capacity must be >= 0 pages, got {self.capacity_chunks}")

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    @property
    def contents(self) -> OrderedDict[int, int]:
        """The keys as a mapping (key -> units), for membership tests (read it, never write it)."""
        return self._keys

    def __len__(self) -> int:
        return self.used

    def touch(self, key: int) -> None:
        """A hit: most recently used now."""
        self._keys.move_to_end(key)

    def touch_many(self, keys: Sequence[int]) -> None:
        """touch() of each key in order."""
        for key in keys:
            self._keys.move_to_end(key)

    def remove_many(self, keys: Sequence[int]) -> None:
        """remove() of each key."""
        for key in keys:
            self.remove(key)

    def insert_many(self, new_keys: dict[int, int]) -> tuple[int, list[int]]:
        """Store each key with its units, in the dict's order (a key already there is only touched;
        one larger than the whole tier passes through): (units newly stored, keys evicted)."""
        keys, cap = self._keys, self.capacity_chunks
        out: list[int] = []
        if new_keys and keys.keys().isdisjoint(new_keys) and max(new_keys.values()) <= cap:
            keys.update(new_keys)  # the common case (freshly computed blocks): one C-speed update
            stored = sum(new_keys.values())
            self.used += stored
            while self.used > cap:  # the least recent first: the same keys one at a time would evict
                old, old_units = keys.popitem(last=False)
                self.used -= old_units
                out.append(old)
            self.stored += len(new_keys)
            self.evicted += len(out)
            self.peak = max(self.peak, self.used)  # as below: units held after the batch
            return stored, out
        stored = 0
        for key, units in new_keys.items():
            if key in keys:
                keys.move_to_end(key)
                continue
            if units > cap:
                out.append(key)
                continue
            while self.used + units > cap:
                old, old_units = keys.popitem(last=False)
                self.used -= old_units
                out.append(old)
            keys[key] = units
            self.used += units
            stored += units
            self.stored += 1
        self.evicted += len(out)
        self.peak = max(self.peak, self.used)
        return stored, out

    def resize(self, capacity_chunks: int) -> list[int]:
        """Change the capacity (swapped-out KV taking room, giving it back); returns the keys evicted."""
        self.capacity_chunks = max(int(capacity_chunks), 0)
        out: list[int] = []
        while self.used > self.capacity_chunks:
            key, units = self._keys.popitem(last=False)
            self.used -= units
            out.append(key)
        self.evicted += len(out)
        return out

    def remove(self, key: int) -> None:
        self.used -= self._keys.pop(key)

    def lru_order(self) -> list[int]:
        """Keys, least recently used first (tests)."""
        return list(self._keys)

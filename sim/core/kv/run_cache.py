"""Prefix-cache books for the hybrid allocator (sim/core/kv/hybrid_prefix.py): key -> block and an
LRU of parked blocks kept as runs (sim/core/kv/run_lru.py).

Same rules as sim/core/kv/prefix_cache.py (the paged allocator's): chained keys, a block keeps
its key for life, two blocks may hold one key (a lookup returns the one cached first, the other
takes over when it is evicted), parked blocks are evicted least recently parked first. What
differs is the bookkeeping: the hybrid allocator knows which of a request's blocks are keyed (the
leading ones, below its registered count) and their keys (the request's own key list), so the
cache keeps no block -> key map, and a park or an eviction moves runs, not single entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sim.core.kv.prefix_cache import PrefixCache
from sim.core.kv.run_lru import RunLRU


class RunPrefixCache:
    """Key -> block (with duplicates) plus the run LRU of parked blocks."""

    def __init__(self, block_size: int, prefix_block_size: int | None = None) -> None:
        self._keys = PrefixCache(block_size, prefix_block_size)  # for chain_keys (its own books unused)
        self.block_size = block_size
        self.prefix_block_size = self._keys.prefix_block_size
        self._key_to_block: dict[int, int] = {}
        self._dups: dict[int, list[int]] = {}  # further blocks with the same key, in caching order
        self._lru = RunLRU()
        self.registrations = 0
        self.evictions = 0
        self.on_evict: Callable[[list[int]], None] | None = None  # told the keys no block holds any more
        self.on_register: Callable[[Sequence[int], Sequence[int]], None] | None = None  # told (keys, blocks) just keyed
        self.lookup: Callable[[int], int | None] = self._key_to_block.get

    def chain_keys(self, prefix_hashes: Sequence[int] | None) -> list[int]:
        return self._keys.chain_keys(prefix_hashes)

    def register_many(self, keys: Sequence[int], blocks: Sequence[int]) -> None:
        """Make just-filled blocks (never keyed before) findable by their keys; a key already
        cached keeps its block and the new one queues behind it."""
        k2b = self._key_to_block
        before = len(k2b)
        if k2b.keys().isdisjoint(keys):  # the common case: every key new (checked distinct below)
            k2b.update(zip(keys, blocks, strict=True))
            if len(k2b) - before != len(keys):  # a key twice in the run: undo, take the slow road
                for key in keys:
                    k2b.pop(key, None)
        if len(k2b) == before:
            setdefault = k2b.setdefault
            for key, block in zip(keys, blocks, strict=True):
                if setdefault(key, block) != block:
                    self._dups.setdefault(key, []).append(block)
        self.registrations += len(blocks)
        if self.on_register is not None:  # the KV tiers of a pool with several groups (sim/core/tiers/grouped.py)
            self.on_register(keys, blocks)

    def park(self, blocks: list[int], keys: list[int]) -> None:
        """Keyed blocks whose last user left, holding `keys`: most recently used at the end."""
        self._lru.park(blocks, keys)

    def unpark(self, block: int) -> None:
        """A hit takes a parked block back into use."""
        self._lru.unpark(block)

    @property
    def num_parked(self) -> int:
        return self._lru.num_parked

    def evict(self, count: int) -> list[int]:
        """Forget the `count` least recently parked blocks and hand them out as clean."""
        out, keys = self._lru.evict(count)
        k2b, dups = self._key_to_block, self._dups
        if dups and not dups.keys().isdisjoint(keys):  # rare: another block may still hold a key
            gone = []
            for key, block in zip(keys, out, strict=True):
                if key in dups:
                    self._forget_duplicated(key, block)
                else:
                    del k2b[key]
                    gone.append(key)
        else:  # the common case: each key's only block
            for key in keys:
                del k2b[key]
            gone = keys
        self.evictions += count
        if gone and self.on_evict is not None:
            self.on_evict(gone)
        return out

    def _forget_duplicated(self, key: int, block: int) -> None:
        """Drop `block` from a key that has duplicates; the next one takes over if it was first."""
        dups = self._dups[key]
        if self._key_to_block[key] == block:
            self._key_to_block[key] = dups.pop(0)
        else:
            dups.remove(block)
        if not dups:
            del self._dups[key]

    def holds(self, key: int, block: int) -> bool:
        """Whether `block` is cached under `key` (first or duplicate)."""
        return self._key_to_block.get(key) == block or block in self._dups.get(key, ())

    def parked(self) -> list[tuple[int, int]]:
        """(block, key) of the parked blocks, least recently used first (tests, invariants)."""
        return list(self._lru)

    def parked_blocks(self) -> list[int]:
        return [b for b, _ in self._lru]

    def lru_head(self, count: int) -> set[int]:
        """The `count` parked blocks `evict(count)` would take now (no side effects)."""
        return set(self._lru.head(count))

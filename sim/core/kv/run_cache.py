"""Prefix-cache books for the hybrid allocator (sim/core/kv/hybrid_prefix.py), kept per trace hash
block: one entry per (group, hash block) with a slot per KV block in it, and an LRU of parked
blocks kept as runs (sim/core/kv/run_lru.py).

Same rules as sim/core/kv/prefix_cache.py (the paged allocator's): a KV block's key stands for
its whole prefix, a block keeps its key for life, two blocks may hold one key (a lookup returns
the one cached first, the next takes over when it is evicted), parked blocks are evicted least
recently parked first. What differs is the bookkeeping. A trace hashes blocks of
`prefix_block_size` tokens (Mooncake: 512, i.e. 32 KV blocks of 16): KV block p of a request
lies in hash block p // per at offset p % per, and it matches another request's block p iff the
whole prefix through that hash block matches, i.e. iff the chained key of the hash block (the
request's `node key` for that group) is the same. So the cache maps node key -> `per` slots (the
block cached at each offset, or None): registering or evicting a stretch of a request's blocks is
a slice per hash block, not a dict operation per KV block. A request's node keys are per group
(salted), so groups never share an entry. (When KV blocks straddle hash blocks, each KV block is
its own node: per = 1 and the node keys are the per-block chained keys.)

A KV block's key, where one is needed (the KV tiers: `block_keys`, `on_register`, `on_evict`), is
its node key XOR a constant per offset: equal iff node and offset are equal (up to 64-bit hash
collisions, as for the chained keys themselves).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from sim.core.kv.prefix_cache import PrefixCache
from sim.core.kv.run_lru import RunLRU

Positions = Sequence[int]  # a request's block indices (a range or a list)


def offset_salts(count: int) -> list[int]:
    """`count` fixed 64-bit constants, one per offset in a hash block (0 for a single offset, so a
    node of one KV block has the node's key): hashes of int tuples, the same in every process."""
    return [0] if count == 1 else [hash((0x0FF5E7, i)) for i in range(count)]


class RunPrefixCache:
    """Node key -> slots (with duplicates) plus the run LRU of parked blocks."""

    def __init__(self, block_size: int, prefix_block_size: int | None = None) -> None:
        self._chain = PrefixCache(block_size, prefix_block_size)  # chain_keys for the straddling case
        self.block_size = block_size
        self.prefix_block_size = self._chain.prefix_block_size
        self.per = self.prefix_block_size // block_size if self.prefix_block_size % block_size == 0 else 1
        self._salts = offset_salts(self.per)
        self._none = [None] * self.per
        self._nodes: dict[int, list[int | None]] = {}
        self._dups: dict[int, dict[int, list[int]]] = {}  # node key -> offset -> further blocks, in caching order
        self._lru = RunLRU()
        self.registrations = 0
        self.evictions = 0
        self.on_evict: Callable[[list[int]], None] | None = None  # told the keys no block holds any more
        self.on_register: Callable[[Sequence[int], Sequence[int]], None] | None = None  # told (keys, blocks) just keyed

    def chain_keys(self, prefix_hashes: Sequence[int] | None) -> list[int]:
        """Per-KV-block chained keys (prefix_cache.py's): the node keys when KV blocks straddle hash blocks."""
        return self._chain.chain_keys(prefix_hashes)

    # --- keys ------------------------------------------------------------------------------------
    def block_keys(self, nodes: Sequence[int]) -> list[int]:
        """Every KV block's key for a request's node keys (what the KV tiers store)."""
        if self.per == 1:
            return list(nodes)
        arr = np.repeat(np.asarray(nodes, dtype=np.int64), self.per) ^ np.tile(np.asarray(self._salts, dtype=np.int64), len(nodes))
        return arr.tolist()

    def keys_at(self, nodes: Sequence[int], positions: Positions) -> list[int]:
        per, salts = self.per, self._salts
        return [nodes[p // per] ^ salts[p % per] for p in positions]

    # --- lookup ----------------------------------------------------------------------------------
    def row(self, nodes: Sequence[int], count: int, to_first_miss: bool = False) -> list[int | None]:
        """The cached block (or None) at each of a request's first `count` blocks (whole hash blocks);
        `to_first_miss`: only through the hash block of the first miss (all a full-attention group reads)."""
        out: list[int | None] = []
        get, none = self._nodes.get, self._none
        for key in nodes[: -(-count // self.per)]:
            slots = get(key, none)
            out += slots  # a hash block's slots in one extend (chain.from_iterable went per item)
            if to_first_miss and None in slots:
                break
        return out

    def holds(self, nodes: Sequence[int], position: int, block: int) -> bool:
        """Whether `block` is cached for a request's block `position` (first or duplicate)."""
        key, off = nodes[position // self.per], position % self.per
        slots = self._nodes.get(key)
        return slots is not None and (slots[off] == block or block in self._dups.get(key, {}).get(off, ()))

    # --- registration ----------------------------------------------------------------------------
    def register(self, nodes: Sequence[int], lo: int, blocks: Sequence[int]) -> None:
        """Make just-filled blocks (never keyed before) findable: `blocks` are the request's blocks
        lo, lo + 1, ...; an offset already cached keeps its block and the new one queues behind it."""
        hi, per, table = lo + len(blocks), self.per, self._nodes
        j = lo // per
        while j * per < hi:
            a, b = max(lo, j * per), min(hi, (j + 1) * per)
            part = blocks[a - lo : b - lo]
            key = nodes[j]
            slots = table.get(key)
            if slots is None:
                slots = table[key] = list(self._none)
            a, b = a - j * per, b - j * per
            if slots[a:b].count(None) == b - a:
                slots[a:b] = part
            else:
                for off, block in zip(range(a, b), part, strict=True):
                    if slots[off] is None:
                        slots[off] = block
                    else:
                        self._dups.setdefault(key, {}).setdefault(off, []).append(block)
            j += 1
        self.registrations += len(blocks)
        if self.on_register is not None:  # the KV tiers of a pool with several groups (sim/core/tiers/grouped.py)
            self.on_register(self.keys_at(nodes, range(lo, hi)), blocks)

    # --- parking and eviction --------------------------------------------------------------------
    def park(self, blocks: list[int], nodes: Sequence[int], positions: Positions) -> None:
        """Keyed blocks whose last user left (a request's blocks at `positions`): most recently used at the end."""
        self._lru.park(blocks, positions, nodes)

    def unpark(self, block: int) -> None:
        """A hit takes a parked block back into use."""
        self._lru.unpark(block)

    def unpark_many(self, blocks: list[int]) -> None:
        """unpark() for each of `blocks` (distinct, all parked)."""
        self._lru.unpark_many(blocks)

    @property
    def num_parked(self) -> int:
        return self._lru.num_parked

    def evict(self, count: int) -> list[int]:
        """Forget the `count` least recently parked blocks and hand them out as clean."""
        out: list[int] = []
        gone: list[int] = []
        for nodes, blocks, positions in self._lru.evict_runs(count):
            out += blocks
            lost = self._forget(nodes, blocks, positions)
            if self.on_evict is not None:
                gone += self.keys_at(nodes, [p for p, g in zip(positions, lost, strict=True) if g]) if lost is not None \
                    else self.keys_at(nodes, positions)
        self.evictions += count
        if gone and self.on_evict is not None:
            self.on_evict(gone)
        return out

    def _forget(self, nodes: Sequence[int], blocks: list[int], positions: Positions) -> list[bool] | None:
        """Clear the slots of evicted blocks; return, per block, whether its key is gone (None: all are)."""
        n, per = len(blocks), self.per
        step = positions[1] - positions[0] if n > 1 else 1
        if step not in (1, -1) or positions[-1] - positions[0] != step * (n - 1):
            return [self._forget_one(nodes[p // per], p % per, b) for p, b in zip(positions, blocks, strict=True)]
        if step < 0:  # a released table's tail first: clear in ascending order
            blocks, positions = blocks[::-1], positions[::-1]
        lo, hi, table, dups = positions[0], positions[0] + n, self._nodes, self._dups
        lost: list[bool] | None = None  # built only once some key stays (a duplicate took over)
        j = lo // per
        while j * per < hi:
            a, b = max(lo, j * per), min(hi, (j + 1) * per)
            part, key = blocks[a - lo : b - lo], nodes[j]
            slots = table[key]
            if key not in dups and slots[a - j * per : b - j * per] == part:
                slots[a - j * per : b - j * per] = self._none[: b - a]
                if slots.count(None) == per:
                    del table[key]
                if lost is not None:
                    lost += [True] * (b - a)
            else:
                gone = [self._forget_one(key, off - j * per, blk) for off, blk in zip(range(a, b), part, strict=True)]
                if lost is not None or not all(gone):
                    lost = (lost if lost is not None else [True] * (a - lo)) + gone
            j += 1
        if lost is None or all(lost):
            return None
        return lost[::-1] if step < 0 else lost

    def _forget_one(self, key: int, off: int, block: int) -> bool:
        """Clear one evicted block's slot (its duplicate, if any, takes over); True if no block holds
        the key any more."""
        slots, byoff = self._nodes[key], self._dups.get(key)
        queue = byoff.get(off) if byoff else None
        if slots[off] == block:
            if queue:
                slots[off] = queue.pop(0)
            else:
                slots[off] = None
                if slots.count(None) == self.per:
                    del self._nodes[key]
        else:
            queue.remove(block)  # type: ignore[union-attr]  # a parked block holds its slot or queues for it
        if byoff is not None and queue is not None and not queue:
            del byoff[off]
            if not byoff:
                del self._dups[key]
        return slots[off] is None

    # --- tests and invariants ----------------------------------------------------------------------
    def parked(self) -> list[tuple[int, Sequence[int], int]]:
        """(block, its request's node keys, its position) of the parked blocks, least recently used first."""
        return [(b, nodes, p) for b, p, nodes in self._lru.entries()]

    def parked_blocks(self) -> list[int]:
        return [b for b, _ in self._lru]

"""A prefix cache that tells a listener about every block it keys: how the KV tiers below a pool with
several KV groups (sim/core/tiers/grouped.py) hear of each newly computed block.

The paged allocator tells its tiers itself (sim/core/kv/paged.py `_register`); the per-group pool
(sim/core/kv/hybrid_prefix.py) registers blocks in several places, all through its PrefixCache, so
it swaps this subclass in when tiers are attached (`HybridPrefixAllocator.attach_tiers`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sim.core.kv.prefix_cache import PrefixCache

Report = Callable[[Sequence[int], Sequence[int]], None]  # (keys, blocks) just keyed


class ReportingPrefixCache(PrefixCache):
    def __init__(self, block_size: int, prefix_block_size: int | None, report: Report) -> None:
        super().__init__(block_size, prefix_block_size)
        self.report = report
        self._batch = False

    def register(self, key: int, block: int) -> bool:
        fresh = super().register(key, block)
        if fresh and not self._batch:
            self.report([key], [block])
        return fresh

    def register_many(self, keys: Sequence[int], blocks: Sequence[int]) -> None:
        fresh = [i for i, b in enumerate(blocks) if not self.is_cached(b)]  # a keyed block keeps its key
        self._batch = True
        try:
            super().register_many(keys, blocks)
        finally:
            self._batch = False
        if fresh:
            self.report([keys[i] for i in fresh], [blocks[i] for i in fresh])

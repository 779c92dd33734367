"""The live view's decode-run growth from token headroom (sim/fleet/live_view.py) equals the
allocator's own blocks_to_grow at every step, block boundaries and multi-block growth included."""

from __future__ import annotations

import numpy as np

from sim.core.kv.paged import PagedAllocator
from sim.fleet.live_view import _growth_at, _sorted_headroom


def test_growth_from_headroom_equals_blocks_to_grow():
    rng = np.random.default_rng(7)
    alloc = PagedAllocator(num_blocks=4000, block_size=16, bytes_per_token=1)
    ids = np.arange(40, dtype=np.int64)
    lengths = rng.integers(1, 300, size=ids.size)
    for r, n in zip(ids.tolist(), lengths.tolist(), strict=True):
        alloc.allocate(r, n, n + 200)
    tokens = lengths - rng.integers(0, 3, size=ids.size)  # computed tokens may trail the allocation
    headroom = _sorted_headroom(alloc, ids, tokens)
    assert headroom is not None
    for steps in range(0, 80):
        assert _growth_at(headroom, steps, 16) == alloc.blocks_to_grow(ids, tokens + steps), steps


def test_growth_when_every_headroom_is_under_one_block():
    """The divmod form (every request within a block of its next boundary, a paged pool's usual
    state) equals blocks_to_grow at every step, past many block boundaries."""
    rng = np.random.default_rng(11)
    alloc = PagedAllocator(num_blocks=8000, block_size=16, bytes_per_token=1)
    ids = np.arange(50, dtype=np.int64)
    lengths = rng.integers(1, 500, size=ids.size)
    for r, n in zip(ids.tolist(), lengths.tolist(), strict=True):
        alloc.allocate(r, n, n)
    headroom = _sorted_headroom(alloc, ids, lengths)
    assert headroom is not None and headroom[-1] < 16 and headroom[0] < headroom[-1]
    for steps in range(0, 200):
        assert _growth_at(headroom, steps, 16) == alloc.blocks_to_grow(ids, lengths + steps), steps

"""The live view's decode-run growth from token headroom (sim/fleet/live_view.py) equals the
allocator's own blocks_to_grow at every step, block boundaries and multi-block growth included."""

from __future__ import annotations

import numpy as np

from sim.core.kv.paged import PagedAllocator
from sim.fleet.live_view import _growth_at, _growth_of_counts, _sorted_headroom


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


def test_growth_from_a_tracked_batchs_headroom_counts_equals_blocks_to_grow():
    """A tracked decode batch's headroom histogram (PagedAllocator.headroom_counts, read off its
    rows) is the histogram of token_headroom, and the growth from it equals blocks_to_grow at every
    step; any other ids get None."""
    rng = np.random.default_rng(3)
    tracked, eager = (PagedAllocator(num_blocks=8000, block_size=16, bytes_per_token=1) for _ in range(2))
    ids = np.arange(45, dtype=np.int64)
    lengths = rng.integers(1, 500, size=ids.size)
    for a in (tracked, eager):
        for r, n in zip(ids.tolist(), lengths.tolist(), strict=True):
            a.allocate(r, n, n + 900)
    tracked.track_batch(ids, None)
    assert tracked.headroom_counts(ids.copy()) is None
    for k in (1, 5, 16, 23):  # growths of the tracked batch move its clock
        tracked.grow_by(ids, k)
        eager.grow_by(ids.copy(), k)
        lengths = lengths + k
        counts = tracked.headroom_counts(ids)
        assert counts is not None and len(counts) == 16
        headroom = eager.token_headroom(ids, lengths)
        assert counts == np.bincount(headroom, minlength=16).tolist()
        for steps in range(0, 70):
            assert _growth_of_counts(counts, steps, 16) == eager.blocks_to_grow(ids, lengths + steps), (k, steps)

"""PagedAllocator: block tables, growth and the physical breakdown."""

from __future__ import annotations

import numpy as np
import pytest

from sim.core.kv import AllocationError, PagedAllocator, make_allocator
from sim.run.deployment import kv_layout
from sim.scenario import Scenario

BS, BPT = 4, 3  # tiny blocks and an odd byte count, so arithmetic slips show


def make(num_blocks: int = 16, **kw) -> PagedAllocator:
    return PagedAllocator(num_blocks, BS, BPT, **kw)


def test_allocate_takes_ceil_blocks_and_breakdown_is_physical():
    a = make()
    assert a.allocate(0, 5, final_tokens=9, reserve_tokens=0) == 0
    assert len(a.block_table(0)) == 2 and a.num_tokens(0) == 5
    b = a.breakdown()
    assert b.token_states == 5 * BPT
    assert b.internal_frag == 3 * BPT  # last block holds 1 of 4 slots
    assert b.reserved == b.external_frag == 0
    assert b.free == 14 * BS * BPT
    assert b.capacity == a.capacity_bytes == 16 * BS * BPT
    a.check_invariants()


def test_append_crosses_block_boundary_only_when_needed():
    a = make()
    a.allocate(0, 4, 10, 0)
    assert len(a.block_table(0)) == 1
    assert a.append(0, 1) and len(a.block_table(0)) == 2
    assert a.append(0, 3) and len(a.block_table(0)) == 2
    assert a.num_tokens(0) == 8 and a.breakdown().internal_frag == 0
    a.check_invariants()


def test_append_fails_without_change_when_pool_is_full():
    a = make(num_blocks=2)
    a.allocate(0, 8, 20, 0)
    assert a.num_free_blocks == 0
    assert a.append(0, 1) is False
    assert a.num_tokens(0) == 8 and len(a.block_table(0)) == 2
    assert a.append(0, 0) and a.num_free_blocks == 0


def test_can_allocate_and_misuse():
    a = make(num_blocks=3)
    assert a.can_allocate(12, 0) and not a.can_allocate(13, 0)
    with pytest.raises(AllocationError):
        a.allocate(0, 13, 13, 0)
    a.allocate(0, 4, 4, 0)
    with pytest.raises(AllocationError):
        a.allocate(0, 4, 4, 0)  # twice
    with pytest.raises(AllocationError):
        a.free(7)  # never allocated
    with pytest.raises(AllocationError):
        a.append(7, 1)


def test_free_returns_every_block():
    a = make()
    for r in range(4):
        a.allocate(r, 3 + r, 10, 0)
    for r in range(4):
        a.free(r)
    assert a.num_free_blocks == 16
    assert a.breakdown().free == a.capacity_bytes
    a.check_invariants()


def test_grow_many_matches_scalar_appends():
    rng = np.random.default_rng(1)
    fast, slow = make(400), make(400)
    ids = np.arange(20)
    start = rng.integers(1, 30, size=20)
    for r in ids.tolist():
        fast.allocate(r, int(start[r]), 200, 0)
        slow.allocate(r, int(start[r]), 200, 0)
    n = start.copy()
    for _ in range(10):
        new = n + rng.integers(0, 9, size=20)
        need = fast.blocks_to_grow(ids, new)
        before = fast.num_free_blocks
        fast.grow_many(ids, new)
        assert before - fast.num_free_blocks == need
        for r in ids.tolist():
            assert slow.append(r, int(new[r] - n[r]))
        n = new
    for r in ids.tolist():
        assert fast.num_tokens(r) == slow.num_tokens(r)
        assert len(fast.block_table(r)) == len(slow.block_table(r)) == -(-int(n[r]) // BS)
    assert fast.breakdown() == slow.breakdown()
    fast.check_invariants()


@pytest.mark.parametrize("k", [1, 3, BS, BS + 5])
def test_grow_by_equals_grow_many(k):
    """The decode fast path (every request grows by k) leaves the same books as grow_many."""
    rng = np.random.default_rng(k)
    fast, ref = make(2000), make(2000)
    ids = np.arange(20)
    for r, n in enumerate(rng.integers(1, 30, size=20).tolist()):
        fast.allocate(r, n, 200, 0)
        ref.allocate(r, n, 200, 0)
    for _ in range(12):
        fast.grow_by(ids, k)
        ref.grow_many(ids, [ref.num_tokens(r) + k for r in ids.tolist()])
        assert [fast.block_table(r) for r in range(20)] == [ref.block_table(r) for r in range(20)]
        assert fast.breakdown() == ref.breakdown()
        fast.check_invariants()
    with pytest.raises(AllocationError):
        fast.grow_by([99], k)  # never allocated


def test_grow_many_refuses_when_pool_is_short_and_leaves_state_alone():
    a = make(num_blocks=3)
    a.allocate(0, 4, 20, 0)
    a.allocate(1, 4, 20, 0)
    assert a.blocks_to_grow([0, 1], [8, 8]) == 2
    with pytest.raises(AllocationError):
        a.grow_many([0, 1], [8, 8])
    assert a.num_tokens(0) == a.num_tokens(1) == 4
    a.check_invariants()


def test_make_allocator_builds_paged_from_scenario():
    a = make_allocator(kv_layout(Scenario(block_size=32, prefix_caching=True)), 10, 7, prefix_block_size=512)
    assert isinstance(a, PagedAllocator)
    assert (a.block_size, a.num_blocks, a.bytes_per_token, a.prefix_caching) == (32, 10, 7, True)
    assert a.cache.prefix_block_size == 512


def test_fits_growth_agrees_with_the_exact_count():
    """fits_growth skips blocks_to_grow when a per-request bound proves the growth fits; its
    answer must be exactly `blocks_to_grow(...) <= num_free_blocks` in every state, including
    nearly full pools."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        a = make(num_blocks=int(rng.integers(4, 24)))
        ids: list[int] = []
        for r in range(int(rng.integers(1, 6))):
            n = int(rng.integers(1, 9))
            if a.can_allocate(n, 0):
                a.allocate(r, n, final_tokens=n + 20, reserve_tokens=0)
                ids.append(r)
        if not ids:
            continue
        k = int(rng.integers(0, 12))
        new = [a.num_tokens(r) + k for r in ids]
        exact = a.blocks_to_grow(ids, new) <= a.num_free_blocks
        assert a.fits_growth(ids, k) == exact
        if exact:
            a.grow_many(ids, new)
            a.check_invariants()


def _books(a: PagedAllocator, ids) -> tuple:
    """Counts, tables, free blocks, breakdown and the token headroom a fleet's live view reads (read
    from a tracked batch's rows without untracking it: the next grow_by asserts it stayed tracked)."""
    tokens = [a.num_tokens(r) for r in ids]
    headroom = a.token_headroom(np.array(ids, dtype=np.int64), np.array(tokens, dtype=np.int64)).tolist()
    return (tokens, [len(a.block_table(r)) for r in ids], a.num_free_blocks, a.breakdown(), headroom)


@pytest.mark.parametrize("seed", range(6))
def test_tracked_batch_grows_as_grow_by_does(seed):
    """A tracked decode batch (track_batch: members joining and freed, growths of 1..9 tokens,
    eager readers in between) keeps the very books of plain grow_by calls on the same batch."""
    rng = np.random.default_rng(seed)
    lazy, eager = make(400), make(400)
    run: list[int] = []
    arr = np.array(run, dtype=np.int64)
    next_id = 0
    for step in range(300):
        op = rng.integers(0, 10)
        if op < 2 or not run:  # a request joins (allocated first, as after its prefill)
            n = int(rng.integers(1, 14))
            if not eager.can_allocate(n):
                continue
            for a in (lazy, eager):
                a.allocate(next_id, n, final_tokens=n + 50, reserve_tokens=0)
            run.append(next_id)
            arr = np.array(run, dtype=np.int64)
            lazy.track_batch(arr, [next_id] if step % 7 else None)
            next_id += 1
        elif op < 4:  # a member finishes and is freed
            r = run.pop(int(rng.integers(0, len(run))))
            for a in (lazy, eager):
                a.free(r)
            arr = np.array(run, dtype=np.int64)
            lazy.track_batch(arr, [])
        else:
            k = int(rng.integers(1, 10))
            if not eager.fits_growth(arr, k):
                continue
            eager.grow_by(arr.copy(), k)  # never the tracked object: the plain path
            lazy.grow_by(arr, k)
            assert lazy._batch is arr and len(lazy._members) == len(run)  # it took the tracked path
        if step % 50 == 49:  # an eager reader untracks; the next track_batch starts afresh
            lazy.check_invariants()
            lazy.track_batch(arr, None)
        assert _books(lazy, run) == _books(eager, run)
    lazy.check_invariants()
    eager.check_invariants()
    assert _books(lazy, run) == _books(eager, run)


def test_tracked_batch_refuses_a_growth_that_does_not_fit_and_changes_nothing():
    a = make(4)
    a.allocate(0, 4, final_tokens=20, reserve_tokens=0)
    a.allocate(1, 4, final_tokens=20, reserve_tokens=0)
    run = np.array([0, 1], dtype=np.int64)
    a.track_batch(run, None)
    a.grow_by(run, 4)  # each takes its second block: the pool is full
    with pytest.raises(AllocationError):
        a.grow_by(run, 1)
    assert [a.num_tokens(0), a.num_tokens(1)] == [8, 8] and a.num_free_blocks == 0
    a.free(0)
    a.grow_by(run[1:], 1)  # another array: the plain path
    assert a.num_tokens(1) == 9
    a.check_invariants()


def test_tracked_batch_refuses_a_growth_of_several_blocks_that_does_not_fit():
    """A growth longer than a block (a member takes several) is all or nothing too."""
    a = make(6)
    a.allocate(0, 3, final_tokens=40, reserve_tokens=0)
    a.allocate(1, 1, final_tokens=40, reserve_tokens=0)
    run = np.array([0, 1], dtype=np.int64)
    a.track_batch(run, None)
    with pytest.raises(AllocationError):
        a.grow_by(run, 2 * BS + 2)  # 3 + 2 more blocks wanted, 4 free
    assert [a.num_tokens(0), a.num_tokens(1)] == [3, 1] and a.num_free_blocks == 4
    a.grow_by(run, 2 * BS + 1)  # 2 + 2 more: fits exactly
    assert [a.num_tokens(0), a.num_tokens(1)] == [4 + 2 * BS, 2 + 2 * BS] and a.num_free_blocks == 0
    assert [len(a.block_table(0)), len(a.block_table(1))] == [3, 3]
    a.check_invariants()


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_books_of_ids_past_the_grown_columns_stay_true(prefix_caching):
    """The per-request columns double as ids grow and their memoryviews (PagedAllocator._view_columns)
    are renewed with them: a request admitted before a growth and one after keep exact books,
    read through both the views (num_tokens, append) and the numpy columns (blocks_to_grow)."""
    a = PagedAllocator(num_blocks=64, block_size=16, bytes_per_token=2, prefix_caching=prefix_caching)
    a.allocate(3, 20, 40, 0)
    a.allocate(5000, 33, 40, 0)  # past the first 1,024 ids: the columns grow
    assert a.append(3, 13) and a.append(5000, 1)
    assert (a.num_tokens(3), a.num_tokens(5000)) == (33, 34)
    assert (len(a.block_table(3)), len(a.block_table(5000))) == (3, 3)
    assert a.blocks_to_grow([3, 5000], [48, 49]) == 1  # 3 fills its third block, 5000 needs a fourth
    a.check_invariants()
    a.free(5000)
    assert a.num_tokens(5000) == 0 and a.num_free_blocks == 64 - 3
    a.check_invariants()

"""ContiguousAllocator and the reserve policies: runs, placement choice, five-way breakdown."""

from __future__ import annotations

import numpy as np
import pytest

from sim.core.kv import (
    AllocationError,
    ContiguousAllocator,
    make_allocator,
    reserve_tokens,
    reserve_tokens_array,
)
from sim.run.deployment import kv_layout
from sim.scenario import Scenario

BS, BPT = 4, 5


def make(num_blocks: int = 32, placement: str = "first-fit") -> ContiguousAllocator:
    return ContiguousAllocator(num_blocks, BS, BPT, placement=placement)


def test_reserve_policies():
    assert reserve_tokens("max", 100, 20, 2048) == 2048
    # Orca's pow2: the prompt plus the OUTPUT rounded up to a power of two.
    assert reserve_tokens("pow2", 100, 20, 2048) == 132
    assert reserve_tokens("pow2", 100, 32, 2048) == 132  # exact power of two stays
    assert reserve_tokens("pow2", 100, 1, 2048) == 101
    assert reserve_tokens("pow2", 1500, 300, 2048) == 2012  # 1500 + 512
    assert reserve_tokens("pow2", 1600, 400, 2048) == 2048  # 1600 + 512 capped at the max length
    assert reserve_tokens("pow2", 2000, 100, 2048) == 2100  # never below the request itself
    assert reserve_tokens("oracle", 100, 20, 2048) == 120
    with pytest.raises(ValueError, match="reserve policy"):
        reserve_tokens("median", 1, 1, 8)


def test_reserve_array_matches_scalar():
    rng = np.random.default_rng(0)
    prompt, out = rng.integers(1, 5000, 500), rng.integers(1, 3000, 500)
    prompt[:3], out[:3] = [1, 63, 1024], [0, 1, 1024]  # 1, 64 and 2048 exactly
    for policy in ("max", "pow2", "oracle"):
        arr = reserve_tokens_array(policy, prompt, out, 4096)
        assert arr.tolist() == [reserve_tokens(policy, p, o, 4096) for p, o in zip(prompt, out, strict=True)]


def test_run_is_contiguous_and_reservation_rounds_to_blocks():
    a = make()
    assert a.allocate(0, 5, final_tokens=9, reserve_tokens=10) == 0
    table = a.block_table(0)
    assert table == list(range(table[0], table[0] + 3))  # ceil(10 / 4) blocks in one run
    b = a.breakdown()
    assert b.token_states == 5 * BPT
    assert b.reserved == (9 - 5) * BPT  # will still be written
    assert b.internal_frag == (12 - 9) * BPT  # never written: over-reservation + rounding
    assert b.external_frag == 0 and b.free == 29 * BS * BPT
    assert b.capacity == a.capacity_bytes
    a.check_invariants()


def test_append_beyond_reservation_fails_and_grow_many_refuses():
    a = make()
    a.allocate(0, 5, 20, 8)  # 2 blocks = 8 slots
    assert a.append(0, 3) and a.num_tokens(0) == 8
    assert a.append(0, 1) is False
    assert a.num_tokens(0) == 8
    assert a.blocks_to_grow([0], [9]) > a.num_blocks  # no free count can cover it
    with pytest.raises(AllocationError):
        a.grow_many([0], [9])


def test_grow_many_updates_breakdown_like_appends():
    fast, slow = make(), make()
    for r, (n, f, res) in enumerate([(3, 10, 12), (1, 30, 40), (7, 7, 8)]):
        fast.allocate(r, n, f, res)
        slow.allocate(r, n, f, res)
    fast.grow_many([0, 1, 2], [12, 31, 8])  # request 1 and 2 outrun their final length
    for r, k in enumerate([9, 30, 1]):
        assert slow.append(r, k)
    assert fast.breakdown() == slow.breakdown()
    b = fast.breakdown()
    assert b.token_states == (12 + 31 + 8) * BPT
    assert b.reserved == 0
    assert b.capacity == fast.capacity_bytes
    fast.check_invariants()


def test_first_fit_takes_lowest_hole_best_fit_takes_smallest():
    for placement, expected_start in (("first-fit", 0), ("best-fit", 10)):
        a = make(20, placement)
        # Carve holes: [0, 6) free, [6, 10) used, [10, 12) free, [12, 20) used.
        a.allocate(0, 1, 1, 6 * BS)
        a.allocate(1, 1, 1, 4 * BS)
        a.allocate(2, 1, 1, 2 * BS)
        a.allocate(3, 1, 1, 8 * BS)
        a.free(0)
        a.free(2)
        a.allocate(4, 1, 1, 2 * BS)
        assert a.block_table(4)[0] == expected_start, placement
        a.check_invariants()


def test_free_coalesces_neighbouring_holes():
    a = make(12)
    for r in range(3):
        a.allocate(r, 1, 1, 4 * BS)
    a.free(0)
    a.free(2)
    assert a.placement.largest_hole() == 4
    a.free(1)
    assert list(a.placement.holes()) == [(0, 12)]


def test_external_fragmentation_for_a_crafted_hole_pattern():
    a = make(16)
    # Runs of 3 blocks at 0, 3, 6, 9, 12; free 0 and 6 leave holes of 3, 3 and the tail block 15.
    for r in range(5):
        a.allocate(r, 4, 4, 3 * BS)
    a.free(0)
    a.free(2)
    assert sorted(length for _, length in a.placement.holes()) == [1, 3, 3]
    assert a.breakdown().external_frag == 0  # nothing waits
    b = a.breakdown(waiting_reserve_tokens=[4 * BS, 5 * BS])  # smallest need: 4 blocks
    assert b.external_frag == 7 * BS * BPT and b.free == 0
    b = a.breakdown(waiting_reserve_tokens=[3 * BS, 9 * BS])  # a 3-block need fits the 3-holes
    assert b.external_frag == 1 * BS * BPT and b.free == 6 * BS * BPT
    assert b.capacity == a.capacity_bytes




def test_misuse_is_an_allocation_error():
    a = make(4)
    with pytest.raises(AllocationError):
        a.allocate(0, 1, 1, 5 * BS)  # larger than the pool
    a.allocate(0, 1, 1, 4)
    with pytest.raises(AllocationError):
        a.allocate(0, 1, 1, 4)
    with pytest.raises(AllocationError):
        a.free(3)


def test_make_allocator_builds_contiguous_from_scenario():
    a = make_allocator(kv_layout(Scenario(allocator="contiguous", placement="best-fit", block_size=8)), 50, 3)
    assert isinstance(a, ContiguousAllocator)
    assert (a.block_size, a.num_blocks, a.placement.name) == (8, 50, "best-fit")

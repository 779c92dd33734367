"""Buddy placement: power-of-two rounding, splitting, merging, non-power-of-two pools."""

from __future__ import annotations

from sim.core.kv import ContiguousAllocator
from sim.core.kv.buddy import BuddyPlacement, next_pow2


def test_next_pow2():
    assert [next_pow2(n) for n in (0, 1, 2, 3, 4, 5, 17, 64)] == [1, 1, 2, 4, 4, 8, 32, 64]


def test_split_hands_out_lowest_half_and_keeps_the_rest_as_buddies():
    b = BuddyPlacement(16)
    assert b.alloc(3) == 0  # 4 blocks: 16 -> 8 + 8 -> 4 + 4
    assert sorted(b.holes()) == [(4, 4), (8, 8)]
    assert b.free_blocks == 12
    assert b.alloc(1) == 4  # splits the 4-run at 4: 4 -> 2 + 2 -> 1 + 1
    assert sorted(b.holes()) == [(5, 1), (6, 2), (8, 8)]


def test_freeing_two_buddies_merges_them_back():
    b = BuddyPlacement(16)
    x, y = b.alloc(4), b.alloc(4)
    assert (x, y) == (0, 4)
    b.free(x, 4)
    assert sorted(b.holes()) == [(0, 4), (8, 8)]  # 0 waits for its buddy at 4
    b.free(y, 4)
    assert list(b.holes()) == [(0, 16)]  # 0+4 -> 8, then with 8 -> 16


def test_adjacent_free_runs_that_are_not_buddies_do_not_merge():
    b = BuddyPlacement(16)
    runs = [b.alloc(4) for _ in range(4)]  # 0, 4, 8, 12
    b.free(runs[1], 4)
    b.free(runs[2], 4)
    # 4..12 is free and contiguous, but 4's buddy is 0 and 8's is 12: no 8-run exists.
    assert sorted(b.holes()) == [(4, 4), (8, 4)]
    assert not b.can_fit(8) and b.free_blocks == 8
    assert b.blocks_in_holes_smaller_than(5) == 8  # a 5-block need rounds to 8: all free space is stranded


def test_pool_that_is_not_a_power_of_two_splits_into_aligned_roots():
    b = BuddyPlacement(100)
    assert list(b.holes()) == [(0, 64), (64, 32), (96, 4)]
    assert not b.can_fit(65) and b.can_fit(64)
    s = b.alloc(32)
    assert s == 64  # the smallest run that fits, not a split of the 64
    b.free(s, 32)
    assert list(b.holes()) == [(0, 64), (64, 32), (96, 4)]  # never merged across roots


def test_contiguous_allocator_with_buddy_counts_rounding_as_internal_fragmentation():
    a = ContiguousAllocator(16, 4, 1, placement="buddy")
    a.allocate(0, 10, final_tokens=12, reserve_tokens=12)  # 3 blocks -> 4-block run
    assert len(a.block_table(0)) == 4
    bd = a.breakdown()
    assert (bd.token_states, bd.reserved, bd.internal_frag) == (10, 2, 4)
    assert bd.free == 12 * 4
    # Waiting need of 5 blocks -> 8: the free 4-run at 4 is stranded, the 8-run at 8 is not.
    bd = a.breakdown(waiting_reserve_tokens=[20])
    assert bd.external_frag == 4 * 4 and bd.free == 8 * 4
    a.free(0)
    assert list(a.placement.holes()) == [(0, 16)]
    a.check_invariants()

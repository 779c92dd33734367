"""Allocator invariants under random operation sequences (hypothesis), for every allocator kind.

After every operation: the allocator's own invariant check passes (blocks conserved, no block
both free and used, refcounts match the tables, running sums match), the five-way breakdown sums
exactly to the capacity with no negative part, the admission predicates agree with what the
operations then do, and token counts match a plain model. Once every request is freed nothing
has leaked.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.kv import BREAKDOWN_FIELDS, AllocationError, ContiguousAllocator, PagedAllocator

BS = 4
KINDS = ["paged", "paged-prefix", "first-fit", "best-fit", "buddy"]

op = st.one_of(
    st.tuples(st.just("alloc"), st.integers(0, 30), st.integers(0, 20), st.integers(0, 3)),
    st.tuples(st.just("append"), st.integers(0, 50), st.integers(0, 9)),
    st.tuples(st.just("grow"), st.lists(st.integers(0, 50), max_size=6), st.integers(0, 12)),
    st.tuples(st.just("free"), st.integers(0, 50)),
)

# A few shared prefixes so prefix-cache hits (and hits on live blocks) really happen.
PREFIXES = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 9, 9, 9, 9, 9], [4, 4, 4, 4, 4, 4, 4, 4], []]


def make(kind: str, num_blocks: int):
    if kind.startswith("paged"):
        return PagedAllocator(num_blocks, BS, 3, prefix_caching=kind == "paged-prefix", prefix_block_size=2 * BS)
    return ContiguousAllocator(num_blocks, BS, 3, placement=kind)


def check(a, waiting: list[int]) -> None:
    a.check_invariants()
    b = a.breakdown(waiting)
    assert b.capacity == a.capacity_bytes
    assert all(getattr(b, name) >= 0 for name in BREAKDOWN_FIELDS), b
    if isinstance(a, PagedAllocator):
        assert b.free == a.num_free_blocks * BS * 3


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=40), num_blocks=st.integers(1, 40))
def test_random_sequences_keep_the_books(kind, ops, num_blocks):
    a = make(kind, num_blocks)
    tokens: dict[int, int] = {}  # model: request -> tokens written
    next_id = 0
    for step in ops:
        live = sorted(tokens)
        name = step[0]
        if name == "alloc":
            _, n, extra, prefix = step
            hashes = PREFIXES[prefix] or None
            reserve = n + extra
            fits = a.can_allocate(n, reserve, hashes)
            if fits:
                hit = a.allocate(next_id, n, n + extra, reserve, hashes)
                assert 0 <= hit <= max(n - 1, 0) and hit % BS == 0
                tokens[next_id] = n
            else:
                with pytest.raises(AllocationError):
                    a.allocate(next_id, n, n + extra, reserve, hashes)
            next_id += 1
        elif name == "append" and live:
            r, k = live[step[1] % len(live)], step[2]
            free_before = a.num_free_blocks
            predicted = bool(a.blocks_to_grow([r], [tokens[r] + k]) <= free_before)  # append agrees with the exact count
            assert a.append(r, k) is predicted
            if predicted:
                tokens[r] += k
            else:
                assert a.num_free_blocks == free_before
        elif name == "grow" and live:
            ids = sorted({live[i % len(live)] for i in step[1]})
            new = [tokens[r] + step[2] for r in ids]
            need = a.blocks_to_grow(ids, new)
            free_before = a.num_free_blocks
            assert a.fits_growth(ids, step[2]) == (need <= free_before)
            # grow_by (uniform growth, the decode fast path) must do exactly what grow_many does
            grow, arg = (a.grow_by, step[2]) if step[2] % 2 else (a.grow_many, new)
            if need <= free_before:
                grow(ids, arg)
                tokens.update(zip(ids, new, strict=True))
                assert free_before - a.num_free_blocks == need
            else:
                with pytest.raises(AllocationError):
                    grow(ids, arg)
        elif name == "free" and live:
            r = live[step[1] % len(live)]
            a.free(r)
            del tokens[r]
        for r, n in tokens.items():
            assert a.num_tokens(r) == n
        check(a, waiting=[5, 17] if next_id % 2 else [])
    for r in list(tokens):
        a.free(r)
    check(a, waiting=[])
    assert a.num_free_blocks == num_blocks  # nothing leaked (cached blocks count as free)
    b = a.breakdown()
    assert b.free == a.capacity_bytes
    if isinstance(a, ContiguousAllocator) and kind != "buddy":
        assert list(a.placement.holes()) == [(0, num_blocks)]

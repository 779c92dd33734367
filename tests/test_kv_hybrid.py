"""The per-group paged allocator (sim/core/kv/hybrid.py): hand-computed drops and a property test."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.kv_groups import ChunkedLocal, FullAttention, SlidingWindow, State
from sim.core.kv import BREAKDOWN_FIELDS, AllocationError
from sim.core.kv.group_managers import make_managers
from sim.core.kv.hybrid import HybridPagedAllocator

BS = 4
GROUPS = (FullAttention(2, num_kv_heads=1, head_dim=4), SlidingWindow(2, num_kv_heads=1, head_dim=4, window=6),
          ChunkedLocal(1, num_kv_heads=1, head_dim=8, chunk=8), State(1, bytes_per_layer=100))


def make(num_pages: int, groups=GROUPS) -> HybridPagedAllocator:
    page, managers = make_managers(groups, BS, "bf16", 1)
    return HybridPagedAllocator(managers, num_pages, BS, page)


def test_pages_per_block_from_the_groups_bytes():
    a = make(100)
    # full: 2 layers x 1 head x 4 dims x K,V x 2 B = 32 B/token; sliding the same; chunked 1 x 8 x 2 x 2 = 32
    assert a.page_bytes == BS * 32 and [m.pages for m in a.managers] == [1, 1, 1, 1]  # state: 100 B in one page
    assert a.bytes_per_token == 32 and a.capacity_bytes == 100 * BS * 32


def test_sliding_and_chunked_groups_drop_blocks_that_leave_their_span():
    a = make(100)
    a.allocate(0, 4, 40)  # 1 block in each token group + 1 state slot
    assert a.num_free_blocks == 100 - 4
    a.grow_by([0], 16)  # 20 tokens: full 5 blocks; sliding keeps positions >= 19 - 6 + 1 = 14: blocks 3, 4
    # chunked keeps positions >= 16 (the chunk of position 19): block 4
    assert a.group_breakdown()["full"]["held"] == 5 * a.page_bytes
    assert a.group_breakdown()["sliding(6)"]["held"] == 2 * a.page_bytes
    assert a.group_breakdown()["chunked(8)"]["held"] == 1 * a.page_bytes
    assert a.group_breakdown()["state"]["held"] == a.page_bytes
    assert a.num_free_blocks == 100 - 9
    a.free(0)
    assert a.num_free_blocks == 100


def test_state_slot_does_not_grow():
    a = make(100, groups=(State(3, bytes_per_layer=1000), FullAttention(1, num_kv_heads=1, head_dim=4)))
    page = a.page_bytes  # one full block: 4 tokens x 16 B
    # vLLM: 3 state groups of 1 layer (kv_groups.vllm_group_size), each layer's 1,000 B over 16 pages
    assert page == 64 and a.managers[0].pages == 3 * 16
    a.allocate(0, 1, 100)
    before = a.group_breakdown()["state"]
    a.grow_by([0], 50)
    assert a.group_breakdown()["state"] == before
    assert before["token_states"] == 3000 and before["internal_frag"] == a.managers[0].pages * page - 3000


def test_growth_peak_counts_drops_step_by_step():
    """blocks_to_grow is the peak over the decode steps: checked against appending one token at a time."""
    def admitted() -> HybridPagedAllocator:
        """The same pool with the same three requests (a twin, not a deep copy: compiled, the
        group managers do not copy)."""
        pool = make(60)
        for r, n in enumerate((3, 9, 14)):
            pool.allocate(r, n, 99)
        return pool

    a = admitted()
    for k in (1, 5, 13, 30):
        stepped = admitted()
        start, peak = stepped.num_free_blocks, 0
        for _ in range(k):
            for r in (0, 1, 2):
                stepped.append(r, 1)
            peak = max(peak, start - stepped.num_free_blocks)
        ids = [0, 1, 2]
        need = a.blocks_to_grow(ids, [a.num_tokens(r) + k for r in ids])
        assert need >= start - stepped.num_free_blocks
        grown = admitted()
        if need <= grown.num_free_blocks:
            grown.grow_by(ids, k)
            assert grown.num_free_blocks == stepped.num_free_blocks  # same books as stepping
            assert grown.group_breakdown() == stepped.group_breakdown()


op = st.one_of(
    st.tuples(st.just("alloc"), st.integers(0, 30)),
    st.tuples(st.just("append"), st.integers(0, 50), st.integers(0, 9)),
    st.tuples(st.just("grow"), st.lists(st.integers(0, 50), max_size=6), st.integers(0, 12)),
    st.tuples(st.just("free"), st.integers(0, 50)),
)


def check(a: HybridPagedAllocator) -> None:
    a.check_invariants()
    b = a.breakdown()
    assert b.capacity == a.capacity_bytes and all(getattr(b, f) >= 0 for f in BREAKDOWN_FIELDS)
    groups = a.group_breakdown()
    assert sum(g["held"] for g in groups.values()) + b.free == a.capacity_bytes  # per group + free = the pool
    assert all(g["token_states"] >= 0 and g["internal_frag"] >= 0 for g in groups.values())
    assert a._group_sums_few() == a._group_sums_many()  # a gauge sample's two ways of summing agree


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=40), num_pages=st.integers(1, 60))
def test_random_sequences_keep_the_books(ops, num_pages):
    a = make(num_pages)
    tokens: dict[int, int] = {}
    next_id = 0
    for step in ops:
        live = sorted(tokens)
        if step[0] == "alloc":
            n = step[1]
            if a.can_allocate(n, 0):
                a.allocate(next_id, n, n + 5)
                tokens[next_id] = n
            else:
                with pytest.raises(AllocationError):
                    a.allocate(next_id, n, n + 5)
            next_id += 1
        elif step[0] == "append" and live:
            r, k = live[step[1] % len(live)], step[2]
            free_before = a.num_free_blocks
            if a.append(r, k):  # one chunk of k tokens (drops once): no per-step count predicts it
                tokens[r] += k
            else:
                assert a.num_free_blocks == free_before
        elif step[0] == "grow" and live:
            ids = sorted({live[i % len(live)] for i in step[1]})
            new = [tokens[r] + step[2] for r in ids]
            need, free_before = a.blocks_to_grow(ids, new), a.num_free_blocks
            assert a.fits_growth(ids, step[2]) == (need <= free_before)
            if need <= free_before:
                (a.grow_by(ids, step[2]) if step[2] % 2 else a.grow_many(ids, new))
                tokens.update(zip(ids, new, strict=True))
                assert free_before - a.num_free_blocks <= need  # drops can only give pages back
            else:
                with pytest.raises(AllocationError):
                    a.grow_many(ids, new)
        elif step[0] == "free" and live:
            r = live[step[1] % len(live)]
            a.free(r)
            del tokens[r]
        for r, n in tokens.items():
            assert a.num_tokens(r) == n
        check(a)
    for r in list(tokens):
        a.free(r)
    check(a)
    assert a.num_free_blocks == num_pages and a.breakdown().free == a.capacity_bytes

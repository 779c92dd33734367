"""Contiguous reservations per KV group (sim/core/kv/contiguous_groups.py): hand-computed bytes for
catalog models and a property test that the groups plus free are the pool."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.kv_groups import ChunkedLocal, FullAttention, SlidingWindow, State
from models.spec import load_spec
from sim.core.kv import BREAKDOWN_FIELDS, AllocationError
from sim.core.kv.contiguous_groups import ROUNDING, GroupedContiguousAllocator
from sim.core.kv.group_managers import make_managers
from sim.core.kv.registry import make_group_allocator
from sim.run.deployment import kv_layout
from sim.scenario import Scenario

GiB = 2**30


def reserve_max(model: str, max_len: int = 8192) -> tuple[GroupedContiguousAllocator, dict[str, dict[str, int]]]:
    sc = Scenario(model=model, allocator="contiguous", reserve="max", kv_budget_gib=40.0)
    a = make_group_allocator(kv_layout(sc), load_spec(model).groups, 40 * GiB)
    assert isinstance(a, GroupedContiguousAllocator)
    a.allocate(0, 100, 300, max_len)  # a 100-token prompt under a max_len reservation
    return a, a.group_breakdown()


def test_gpt_oss_120b_reserves_about_half_of_all_full():
    # 36 layers of 8 kv heads x 64: 2 x 8 x 64 x 2 B = 2,048 B per token and layer
    a, groups = reserve_max("gpt-oss-120b")
    assert groups["full"]["held"] == 18 * 8192 * 2048  # 301,989,888: the 18 full layers, every token
    assert groups["sliding(128)"]["held"] == 18 * 128 * 2048  # 4,718,592: a ring of the 128-token window
    all_full = 36 * 8192 * 2048  # 603,979,776
    held = sum(g["held"] for g in groups.values())
    assert held == 306_708_480 and held / all_full == pytest.approx(0.508, abs=0.001)
    assert a.num_used_blocks * a.page_bytes == held  # pages: 512 full + 8 sliding blocks of one page
    assert groups["full"]["token_states"] == 18 * 100 * 2048 and groups["full"]["reserved"] == 18 * 200 * 2048
    assert groups["sliding(128)"]["token_states"] == 18 * 100 * 2048
    assert groups["sliding(128)"]["reserved"] == 18 * 28 * 2048  # it will reach 128 kept tokens of 300


def test_gemma_3_27b_reserves_far_less_than_all_full():
    # 62 layers (10 full, 52 sliding(1024)) of 16 kv heads x 128: 8,192 B per token and layer
    _, groups = reserve_max("gemma-3-27b")
    assert groups["full"]["held"] == 10 * 8192 * 8192
    # vLLM's groups of 10 layers: the 52 sliding layers take 6 groups, 8 of their 60 layers padding
    # (kv_cache_utils.py _get_kv_cache_groups_uniform_page_size; group_managers.pool_shape)
    assert groups["sliding(1024)"]["held"] == 60 * 1024 * 8192
    assert groups["sliding(1024)"]["token_states"] == 52 * 100 * 8192
    held = sum(g["held"] for g in groups.values())
    assert held == 1_174_405_120 and held / (62 * 8192 * 8192) == pytest.approx(0.282, abs=0.001)


def test_a_state_group_reserves_one_slot_whatever_the_length():
    short, _ = reserve_max("qwen3-next-80b-a3b", 1024)
    long, _ = reserve_max("qwen3-next-80b-a3b", 32768)
    assert short.group_breakdown()["state"]["held"] == long.group_breakdown()["state"]["held"] > 0
    assert long.group_breakdown()["full"]["held"] == 32 * short.group_breakdown()["full"]["held"]


def test_the_full_group_caps_growth_and_a_window_ring_does_not():
    a = make([FULL, SLIDING], 100)
    a.allocate(0, 4, 10, 10)  # full: 3 blocks = 12 tokens; sliding(6): a ring of 2 blocks (8 >= 6)
    assert a.append(0, 8) and a.append(0, 1) is False and a.num_tokens(0) == 12  # room for 8 more tokens, not 9
    b = make([SLIDING], 100)
    b.allocate(0, 4, 100, 10)  # only a window: the ring holds any length
    assert b.append(0, 1000) and b.group_breakdown()["sliding(6)"]["token_states"] == 6 * 16


BS = 4
FULL = FullAttention(1, num_kv_heads=1, head_dim=4)  # 16 B per token
SLIDING = SlidingWindow(1, num_kv_heads=1, head_dim=4, window=6)
CHUNKED = ChunkedLocal(2, num_kv_heads=1, head_dim=4, chunk=8)  # 32 B per token: two pages per block
STATE = State(1, bytes_per_layer=100)


def make(groups, num_pages: int, placement: str = "first-fit") -> GroupedContiguousAllocator:
    page, managers = make_managers(groups, BS, "bf16", 1)
    return GroupedContiguousAllocator(managers, num_pages, BS, page, placement)


op = st.one_of(
    st.tuples(st.just("alloc"), st.integers(0, 30), st.integers(0, 40)),
    st.tuples(st.just("append"), st.integers(0, 50), st.integers(0, 9)),
    st.tuples(st.just("grow"), st.lists(st.integers(0, 50), max_size=6), st.integers(0, 12)),
    st.tuples(st.just("free"), st.integers(0, 50)),
)


def check(a: GroupedContiguousAllocator, waiting: list[int], placement: str) -> None:
    a.check_invariants()
    b = a.breakdown(waiting)
    assert b.capacity == a.capacity_bytes and all(getattr(b, f) >= 0 for f in BREAKDOWN_FIELDS)
    groups = a.group_breakdown()
    assert sum(g["held"] for g in groups.values()) + b.external_frag + b.free == a.capacity_bytes
    for g in groups.values():
        assert min(g.values()) >= 0 and g["token_states"] + g["reserved"] + g["internal_frag"] == g["held"]
    if placement != "buddy":  # only buddy rounds a run up (to a power of two pages)
        assert ROUNDING not in groups


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=40), num_pages=st.integers(1, 80),
       placement=st.sampled_from(["first-fit", "best-fit", "buddy"]), mix=st.integers(0, 3))
def test_random_operations_keep_the_groups_summing_to_the_pool(ops, num_pages, placement, mix):
    groups = [(FULL, SLIDING), (FULL, CHUNKED, STATE), (SLIDING, STATE), (FULL, SLIDING, CHUNKED, STATE)][mix]
    a = make(groups, num_pages, placement)
    tokens: dict[int, int] = {}
    next_id = 0
    for step in ops:
        live = sorted(tokens)
        if step[0] == "alloc":
            n, reserve = step[1], step[2]
            if a.can_allocate(n, reserve):
                a.allocate(next_id, n, n + 7, reserve)
                tokens[next_id] = n
            else:
                with pytest.raises(AllocationError):
                    a.allocate(next_id, n, n + 7, reserve)
            next_id += 1
        elif step[0] == "append" and live:
            r, k = live[step[1] % len(live)], step[2]
            if a.append(r, k):
                tokens[r] += k
        elif step[0] == "grow" and live:
            ids = sorted({live[i % len(live)] for i in step[1]})
            new = [tokens[r] + step[2] for r in ids]
            if a.blocks_to_grow(ids, new) <= a.num_free_blocks:
                a.grow_many(ids, new)
                tokens.update(zip(ids, new, strict=True))
            else:
                with pytest.raises(AllocationError):
                    a.grow_many(ids, new)
        elif step[0] == "free" and live:
            r = live[step[1] % len(live)]
            a.free(r)
            del tokens[r]
        for r, n in tokens.items():
            assert a.num_tokens(r) == n
        check(a, [5, 17], placement)
    for r in list(tokens):
        a.free(r)
    check(a, [], placement)
    assert a.num_free_blocks == num_pages and a.breakdown().free == a.capacity_bytes

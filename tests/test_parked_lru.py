"""sim/core/kv/parked_lru.py's ParkedLRU (the paged prefix cache's parked blocks as a queue of runs
with stale entries) against the OrderedDict it replaced, on random parks (blocks parked already
among them), unparks, evictions and enough unparks to compact; and PrefixCache's park_keyed split."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.kv.parked_lru import ParkedLRU
from sim.core.kv.prefix_cache import PrefixCache

BLOCK = st.integers(0, 30)
OPS = st.lists(st.one_of(
    st.tuples(st.just("park"), st.lists(BLOCK, max_size=10, unique=True)),
    st.tuples(st.just("unpark"), st.lists(BLOCK, max_size=6)),
    st.tuples(st.just("evict"), st.integers(0, 12)),
), max_size=80)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_runs_match_the_ordered_dict(ops):
    lru, model = ParkedLRU(), OrderedDict()
    for op, arg in ops:
        if op == "park":
            lru.park(list(arg))
            model.update(dict.fromkeys(arg))  # a block parked already keeps its place
        elif op == "unpark":
            rest = lru.unpark_present(arg)
            want = [b for b in arg if b not in model or model.pop(b) is not None]
            assert rest == want
        else:
            n = min(arg, len(model))
            assert lru.evict(n) == [model.popitem(last=False)[0] for _ in range(n)]
        assert list(lru.order()) == list(model) and len(lru) == len(model)
        assert all((b in lru) == (b in model) for b in range(31))


def test_compaction_keeps_the_order_and_bounds_the_queue():
    lru, model = ParkedLRU(), OrderedDict()
    for rnd in range(3000):  # park and unpark the same blocks: every unpark leaves a stale entry
        blocks = [rnd % 7, 100 + rnd % 5, 200 + rnd]
        lru.park(blocks)
        model.update(dict.fromkeys(blocks))
        for b in blocks[:2]:
            lru.unpark(b)
            del model[b]
    assert list(lru.order()) == list(model)
    assert lru._entries <= 2 * len(lru) + 4096 + 3  # compacted, not one entry per park ever made
    with pytest.raises(KeyError):
        lru.evict(len(model) + 1)
    assert lru.evict(len(model)) == list(model)


def test_park_keyed_parks_keyed_blocks_and_returns_clean_ones_in_order():
    cache = PrefixCache(16)
    cache.register_many([11, 12, 13], [5, 7, 9])
    assert cache.park_keyed([9, 8, 7, 6, 5]) == [8, 6]
    assert cache.parked_blocks() == [9, 7, 5] and cache.count_parked([5, 6, 7]) == 2
    assert cache.park_keyed([4, 3]) == [4, 3] and cache.num_parked == 3
    assert cache.evict(2) == [9, 7] and not cache.is_cached(9) and cache.lookup(13) is None
    with pytest.raises(ValueError, match="already holds a key"):
        cache.register_many([21], [5])  # block 5 is keyed (parked)

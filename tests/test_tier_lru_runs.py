"""sim/core/tiers/lru.py's LRUTier books its LRU order in runs with stale entries; this checks it
against the plain model it replaced (an OrderedDict, one key at a time: insert touches a key it
holds, stores a new one and evicts the least recent at capacity) on random operations, including
keys already held, a key twice in one batch, removals, resizes, and enough touches to compact."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.tiers.lru import LRUTier


class ModelLRU:
    """The per-key OrderedDict LRU (the semantics of LRUTier.insert, key by key)."""

    def __init__(self, cap: int) -> None:
        self.cap, self.keys, self.stored, self.evicted, self.peak = cap, OrderedDict(), 0, 0, 0

    def insert_many(self, new_keys: list[int]) -> tuple[int, list[int]]:
        if self.cap == 0:
            return 0, list(new_keys)
        stored, out = 0, []
        for key in new_keys:
            if key in self.keys:
                self.keys.move_to_end(key)
                continue
            self.keys[key] = None
            stored += 1
            if len(self.keys) > self.cap:
                out.append(self.keys.popitem(last=False)[0])
        self.stored += stored
        self.evicted += len(out)
        self.peak = max(self.peak, len(self.keys))
        return stored, out

    def resize(self, cap: int) -> list[int]:
        self.cap = cap
        out = [self.keys.popitem(last=False)[0] for _ in range(max(len(self.keys) - cap, 0))]
        self.evicted += len(out)
        return out


KEY = st.integers(0, 40)
OPS = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.lists(KEY, max_size=12)),
    st.tuples(st.just("touch"), st.lists(KEY, max_size=6)),
    st.tuples(st.just("remove"), KEY),
    st.tuples(st.just("resize"), st.integers(0, 25)),
), max_size=60)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 20), OPS)
def test_runs_lru_matches_the_per_key_ordered_dict(cap, ops):
    tier, model = LRUTier("t", cap), ModelLRU(cap)
    for op, arg in ops:
        if op == "insert":
            assert tier.insert_many(arg) == model.insert_many(arg)
        elif op == "touch":
            held = [k for k in arg if k in model.keys]
            tier.touch_many(held)
            for k in held:
                model.keys.move_to_end(k)
        elif op == "remove" and arg in model.keys:
            tier.remove(arg)
            del model.keys[arg]
        elif op == "resize":
            assert tier.resize(arg) == model.resize(arg)
        assert tier.lru_order() == list(model.keys)
        assert (len(tier), tier.stored, tier.evicted, tier.peak) == (len(model.keys), model.stored, model.evicted,
                                                                     model.peak)


def test_touches_past_the_stale_bound_compact_the_queue_and_keep_the_order():
    tier = LRUTier("t", 10)
    tier.insert_many(list(range(10)))
    for i in range(3000):  # 2 stale entries a round: compaction runs more than once
        tier.touch_many([i % 10, (i + 3) % 10])
    model = OrderedDict.fromkeys(range(10))
    for i in range(3000):
        model.move_to_end(i % 10)
        model.move_to_end((i + 3) % 10)
    assert tier.lru_order() == list(model)
    assert tier._entries <= 2 * len(tier) + 4096  # noqa: SLF001 (the bound the queue keeps)
    assert tier.insert_many([100, 101]) == (2, list(model)[:2])


def test_touching_a_key_the_tier_does_not_hold_is_an_error():
    tier = LRUTier("t", 4)
    tier.insert_many([1, 2])
    with pytest.raises(KeyError):
        tier.touch_many([1, 3])
    assert tier.lru_order() == [1, 2]

"""The run LRU (sim/core/kv/run_lru.py) against an OrderedDict of parked blocks (the order the
paged prefix cache and vLLM's free queue keep): same evictions, same order, same count."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from sim.core.kv.run_lru import RunLRU


def replay(seed: int, steps: int = 400) -> None:
    rng = random.Random(seed)
    lru, ref = RunLRU(), OrderedDict()  # ref: block -> key, least recently parked first
    in_use: list[int] = []  # unparked or never parked blocks (their keys: block * 7)
    next_block = 0
    for _ in range(steps):
        op = rng.choice(["park_new", "park_new", "repark", "unpark", "unpark", "evict"])
        if op == "park_new":
            run = list(range(next_block, next_block + rng.randint(0, 6)))
            next_block += len(run)
            lru.park(run, [b * 7 for b in run])
            ref.update((b, b * 7) for b in run)
        elif op == "repark" and in_use:
            rng.shuffle(in_use)
            take = rng.randint(1, 4)
            run, in_use[:] = in_use[:take], in_use[take:]  # the rest stay in use
            lru.park(run, [b * 7 for b in run])
            ref.update((b, b * 7) for b in run)
        elif op == "unpark" and ref:
            blocks = rng.sample(list(ref), min(len(ref), rng.randint(1, 3)))  # a hit's several blocks: unpark_many
            if len(blocks) == 1:
                lru.unpark(blocks[0])
            else:
                lru.unpark_many(blocks)
            for block in blocks:
                del ref[block]
            in_use += blocks
        elif op == "evict" and ref:
            count = rng.randint(1, min(5, len(ref)))
            want = [ref.popitem(last=False) for _ in range(count)]
            assert lru.evict(count) == ([b for b, _ in want], [k for _, k in want])
        assert lru.num_parked == len(ref)
        assert list(lru) == list(ref.items())
        assert lru.head(3) == list(ref)[:3]


@pytest.mark.parametrize("seed", range(20))
def test_run_lru_evicts_as_an_ordered_dict_does(seed):
    replay(seed)


def test_evicting_more_than_parked_is_refused():
    lru = RunLRU()
    lru.park([1, 2], [10, 20])
    lru.unpark(1)
    with pytest.raises(ValueError, match="cannot evict 2 of 1"):
        lru.evict(2)
    assert lru.evict(1) == ([2], [20])

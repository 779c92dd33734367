"""A decode run's peak by block events (sim/core/kv/run_peak.py) against the (steps x requests) grid."""

from __future__ import annotations

import random

import numpy as np
import pytest

from models.kv_groups import ChunkedLocal, FullAttention, SlidingWindow, State
from sim.core.kv.group_managers import make_managers
from sim.core.kv.hybrid import HybridPagedAllocator
from sim.core.kv.run_peak import handles

BS = 4
SETS = {
    "sliding+full": (FullAttention(2, num_kv_heads=1, head_dim=4), SlidingWindow(2, num_kv_heads=1, head_dim=4, window=6)),
    "gpt-oss-like": (SlidingWindow(3, num_kv_heads=1, head_dim=4, window=17), FullAttention(1, num_kv_heads=1, head_dim=4)),
    "chunked+pages": (FullAttention(1, num_kv_heads=1, head_dim=4), ChunkedLocal(2, num_kv_heads=1, head_dim=8, chunk=12),
                      SlidingWindow(1, num_kv_heads=2, head_dim=4, window=1)),
}


@pytest.mark.parametrize("name", sorted(SETS))
@pytest.mark.parametrize("seed", range(6))
def test_events_give_the_grids_peak(name, seed):
    """Requests admitted, stepped by prefill chunks (so a sliding group's first lags) and decode
    runs; before each run, the events' peak equals the grid's, for runs of 1 .. 40 steps and
    members that stop early."""
    page, managers = make_managers(SETS[name], BS, "bf16", 1)
    a = HybridPagedAllocator(managers, 100_000, BS, page)
    assert handles(a.managers) and a._peak_by_events
    rng = random.Random(seed)
    live: list[int] = []
    checked = 0
    for r in range(40):
        a.allocate(r, rng.randint(1, 30), 10_000)
        live.append(r)
        if rng.random() < 0.5:
            a.append(r, rng.randint(0, 25))  # a prefill chunk
        ids = np.array(rng.sample(live, rng.randint(1, len(live))), dtype=np.intp)
        n = a._ntok[ids]
        new = n + np.array([rng.randint(0, 40) for _ in ids])
        k = int(np.max(new - n))
        if k > 0:
            assert a._blocks_to_grow(ids, new) == a._peak_grid(ids, new, n, k)
            checked += 1
        a.grow_many(ids, n + rng.randint(0, 9))
    assert checked > 20


def test_state_groups_stay_on_the_grid():
    page, managers = make_managers((FullAttention(1, num_kv_heads=1, head_dim=4), State(1, bytes_per_layer=100)), BS, "bf16", 1)
    assert not HybridPagedAllocator(managers, 100, BS, page)._peak_by_events

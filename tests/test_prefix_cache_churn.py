"""Prefix-cache churn on a hybrid model (gpt-oss-20b: sliding-window + full-attention groups) replaying
a Mooncake sample through the simulator: every block is registered at most once, when it fills,
and cached blocks are evicted only when no clean page is left, no more than the shortfall needs
(vLLM's block pool: cache_full_blocks once per full block; a cached block is evicted only when the
free queue hands it out). Counters: the pool cache's registrations / evictions."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.run.engine import Simulation, build
from sim.scenario import Scenario
from sim.trace import load_trace

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "mooncake_small.jsonl"


def replay(kv_budget_gib: float | None):
    """(trace, allocator, [(pages asked, clean pages before, blocks evicted)] per _make_clean call)."""
    trace = load_trace(SAMPLE)
    setup = build(trace, Scenario(model="gpt-oss-20b", gpu="h100-sxm", allocator="paged", prefix_caching=True,
                                  kv_budget_gib=kv_budget_gib))
    alloc = setup.replicas[0].alloc
    calls: list[tuple[int, int, int]] = []
    make_clean = alloc._make_clean

    def spy(pages: int) -> None:
        clean, before = alloc._free_pages - alloc._parked_pages, alloc.cache.evictions
        make_clean(pages)
        calls.append((pages, clean, alloc.cache.evictions - before))

    alloc._make_clean = spy
    Simulation(setup).run()
    return trace, alloc, calls


def blocks_filled(trace, block_size: int) -> int:
    """Per group, per request: KV blocks inside the hashed range that the request's tokens fill."""
    df, hb = trace.df, trace.prefix_block_size
    return sum(min(len(h) * hb // block_size, (i + o) // block_size)
               for h, i, o in zip(df.prefix_hashes, df.input_tokens, df.output_tokens, strict=True))


@pytest.mark.parametrize("kv_budget_gib", [None, 2.0])
def test_each_block_is_registered_once_and_evicted_only_under_pressure(kv_budget_gib):
    trace, alloc, calls = replay(kv_budget_gib)
    cache, groups = alloc.cache, len(alloc.managers)
    assert groups == 2 and cache.registrations > 0
    assert cache.registrations <= groups * blocks_filled(trace, alloc.block_size)
    # every request has left: each registered block is either still cached (parked) or was evicted once
    assert not alloc._blocks.counts() and cache.registrations == cache.evictions + cache.num_parked
    most = max(m.pages for m in alloc.managers)
    for pages, clean, evicted in calls:
        if clean >= pages:
            assert evicted == 0  # clean pages suffice: nothing cached is touched
        else:  # only the shortfall, at most one block over it
            assert evicted > 0 and (evicted - 1) * most < pages - clean
    if kv_budget_gib is None:  # the whole sample fits the default pool: no pressure, no eviction
        assert cache.evictions == 0
    else:
        assert cache.evictions > 0 and sum(alloc.hit_blocks.values()) > 0

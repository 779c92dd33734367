"""kv-precise's cost is NVIDIA Dynamo's KV router cost in Dynamo's units (docs/FLEET.md): w x prefill
blocks (uncached prompt tokens + the prefill tokens the router booked there and not yet done, over
the block size) + potential active blocks (blocks in use + the backlog's blocks + this prompt's full
blocks that no request there holds)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from sim.core.kv.paged import PagedAllocator
from sim.core.request import RequestTable
from sim.core.routing.routers import KVAwareApprox, KVAwarePrecise, RouterParams
from sim.core.routing.view import RoutedRequest
from sim.core.scheduler import Scheduler, SchedulerConfig
from sim.fleet.live_view import LiveView, Slot
from sim.run.engine import Replica


@dataclass
class Numbers:
    """A replica as plain numbers (the ReplicaView protocol)."""

    index: int
    used: int = 0
    backlog: int = 0
    cached: int = 0
    held: int = 0
    prefill_ids: list[int] = field(default_factory=list)
    num_blocks: int = 1000
    block_size: int = 16
    tiers: dict[str, int] = field(default_factory=dict)

    def waiting(self) -> int:
        return 0

    def running(self) -> int:
        return 0

    def used_blocks(self) -> int:
        return self.used

    def pending_prefill_tokens(self) -> int:
        return self.backlog

    def cached_prompt_tokens(self, req: RoutedRequest) -> int:
        return self.cached

    def tier_hit_tokens(self, req: RoutedRequest) -> dict[str, int]:
        return self.tiers

    def held_prompt_blocks(self, req: RoutedRequest) -> int:
        return self.held

    def prefilling(self) -> list[int]:
        return self.prefill_ids


REQ = RoutedRequest(0, 0.0, 130, [1, 2, 3, 4, 5, 6, 7, 8, 9], None)  # 8 full blocks of 16 and 2 tokens


def test_cost_is_dynamos_formula_by_hand():
    v = Numbers(0, used=40, backlog=100, cached=64, held=3)
    # prefill blocks = (130 - 64) / 16 = 4.125 (nothing booked by this router yet); active blocks =
    # 40 + ceil(100 / 16) = 47, new blocks = 130 // 16 - 3 = 5; cost = w x 4.125 + 52
    assert KVAwarePrecise(RouterParams(1, kv_weight=1.0)).cost(REQ, v) == pytest.approx(4.125 + 52)
    assert KVAwarePrecise(RouterParams(1, kv_weight=2.5)).cost(REQ, v) == pytest.approx(2.5 * 4.125 + 52)


def test_prefill_backlog_is_the_routers_book_until_the_first_token():
    """Dynamo books a request's uncached tokens on the replica it picks and drops them at its first
    token: request 7 (160 tokens, 32 cached on replica 0) books 128 tokens there."""
    router = KVAwarePrecise(RouterParams(2, kv_weight=1.0))
    views = [Numbers(0, cached=32), Numbers(1, used=100)]
    assert router.choose(RoutedRequest(7, 0.0, 160, None, None), views) == 0
    views[0].cached, views[0].prefill_ids = 0, [7]  # 7 routed there, no first token yet
    # prefill (130 + 128) / 16 = 16.125; decode 0 in use + 130 // 16 new = 8
    assert router.cost(REQ, views[0]) == pytest.approx(16.125 + 8)
    views[0].prefill_ids = []  # its first token: out of the book
    assert router.cost(REQ, views[0]) == pytest.approx(130 / 16 + 8)
    views[0].prefill_ids = [7]
    assert router.cost(REQ, views[0]) == pytest.approx(130 / 16 + 8)  # dropped for good


def test_dynamos_worked_example():
    """Dynamo's docs/design_docs/router_design.md example (w = 1): prefill 8, 5, 2 blocks and decode
    10, 5, 9 blocks give 18, 10, 11: worker 2 wins. Here a 160-token prompt (10 blocks) with 2, 5, 8
    blocks cached, nothing else in use, and 0, 5, 1 of its blocks held by a running request."""
    req = RoutedRequest(0, 0.0, 160, list(range(10)), None)
    views = [Numbers(0, cached=32), Numbers(1, cached=80, held=5), Numbers(2, cached=128, held=1)]
    router = KVAwarePrecise(RouterParams(3, kv_weight=1.0))
    assert [router.cost(req, v) for v in views] == [18, 10, 11]
    assert router.choose(req, views) == 1


def test_blocks_a_running_request_holds_count_once():
    """Two replicas alike but for whether the cached prefix is held by a running request: Dynamo's
    active-block dedup makes the holder cheaper by exactly the held blocks."""
    router = KVAwarePrecise(RouterParams(2, kv_weight=1.0))
    parked, held = Numbers(0, used=10, cached=96), Numbers(1, used=10, cached=96, held=6)
    assert router.cost(REQ, parked) - router.cost(REQ, held) == 6
    assert router.choose(REQ, [parked, held]) == 1


def test_the_weight_trades_cache_hits_against_load():
    """Replica 0 holds 6 of the prompt's blocks but has 20 more blocks of load: at w = 1 the load
    wins (0: 34/16 + 20 + 2 = 24.1; 1: 130/16 + 8 = 16.1); at w = 4 the cache (30.5 vs 40.5)."""
    busy_hit, idle_miss = Numbers(0, used=20, cached=96, held=6), Numbers(1)
    assert KVAwarePrecise(RouterParams(2, kv_weight=1.0)).choose(REQ, [busy_hit, idle_miss]) == 1
    assert KVAwarePrecise(RouterParams(2, kv_weight=4.0)).choose(REQ, [busy_hit, idle_miss]) == 0


def test_approx_router_uses_the_same_units():
    """kv-approx: the same cost with its own index for the cache; an empty index caches nothing."""
    v = Numbers(0, used=7, backlog=16, cached=96, held=2)
    router = KVAwareApprox(RouterParams(1, kv_weight=1.0))
    router._keys = []
    assert router.cost(REQ, v) == pytest.approx(130 / 16 + 7 + 1 + 8 - 2)


def test_live_view_counts_the_held_prompt_blocks():
    """A replica whose request 0 still runs holds its prompt's blocks (all five full ones; the cache
    hit stops before the last token); once it frees them they stay cached (parked), not held."""
    hashes = [1, 2, 3, 4, 5]
    table = RequestTable.create(np.zeros(2), np.array([20, 20]), np.array([1, 1]))
    alloc = PagedAllocator(16, 4, 2, prefix_caching=True)
    sched = Scheduler(table, alloc, SchedulerConfig(max_num_seqs=4, max_batched_tokens=64), lambda r: hashes)
    view = LiveView(Replica(0, alloc, sched, [], []), Slot(), table, 0.0)
    req = RoutedRequest(1, 0.0, 20, hashes, None)
    assert view.held_prompt_blocks(req) == 0
    alloc.allocate(0, 20, 21, prefix_hashes=hashes)
    assert view.held_prompt_blocks(req) == view.cached_prompt_tokens(req) // 4 + 1 == 5
    alloc.free(0)
    assert view.cached_prompt_tokens(req) == 16 and view.held_prompt_blocks(req) == 0

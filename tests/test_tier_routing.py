"""KV-aware routing sees the replicas' lower KV tiers (issue 26, fleets): the view's tier hits and
the kv-precise cost that counts them cheaper than recompute and dearer than a GPU hit."""

from __future__ import annotations

import numpy as np
import pytest

from sim.core.kv.paged import PagedAllocator
from sim.core.request import RequestTable
from sim.core.routing.routers import KVAwarePrecise, RouterParams
from sim.core.routing.view import RoutedRequest
from sim.core.scheduler import Scheduler, SchedulerConfig
from sim.core.tiers.kinds import TIERS
from sim.fleet.live_view import LiveView, Slot
from sim.run.engine import Replica
from tests.test_tiers import BPT, BS, stack

HASHES = [1, 2, 3, 4, 5]  # a 20-token prompt: 5 blocks of 4 tokens


def replica(i: int, table: RequestTable) -> Replica:
    alloc = PagedAllocator(8, BS, BPT, prefix_caching=True)
    s = stack("write-through", cpu=16)
    alloc.attach_tiers(s)
    sched = Scheduler(table, alloc, SchedulerConfig(max_num_seqs=4, max_batched_tokens=64), lambda r: HASHES)
    sched.tiers = s
    return Replica(i, alloc, sched, [], [])


def test_kv_precise_picks_the_replica_whose_cpu_tier_holds_the_prompt():
    table = RequestTable.create(np.zeros(1), np.array([20]), np.array([1]))
    reps = [replica(0, table), replica(1, table)]
    holder = reps[1].sched.tiers
    holder.on_registered(reps[1].alloc.cache.chain_keys(HASHES), 0, 5)  # written through, GPU copy gone
    order = holder.levels[0].lru.lru_order()
    views = [LiveView(r, Slot(), table, 0.0) for r in reps]
    req = RoutedRequest(0, 0.0, 20, HASHES, None)
    # blocks 0-3 hit in the CPU tier; block 4 holds the last token, always computed
    assert views[1].tier_hit_tokens(req) == {"cpu": 16} and views[0].tier_hit_tokens(req) == {}
    assert holder.levels[0].lru.lru_order() == order and holder.hit_tokens["cpu"] == 0  # the query moved nothing
    router = KVAwarePrecise(RouterParams(replicas=2, kv_weight=1.0))
    assert router.uncached_blocks(req, views[0]) == 5  # recompute all five
    assert router.uncached_blocks(req, views[1]) == pytest.approx(1 + 4 * TIERS.lookup("cpu").hit_cost)
    assert router.choose(req, views) == 1  # the holder, not the tie-break's replica 0


def test_a_gpu_hit_is_cheaper_than_the_same_blocks_in_the_cpu_tier():
    table = RequestTable.create(np.zeros(2), np.array([20, 20]), np.array([1, 1]))
    gpu, cpu = replica(0, table), replica(1, table)
    gpu.alloc.allocate(0, 20, 21, prefix_hashes=HASHES)  # request 0 ran here: its blocks are in the GPU pool
    gpu.alloc.free(0)
    cpu.sched.tiers.on_registered(cpu.alloc.cache.chain_keys(HASHES), 0, 5)
    req = RoutedRequest(1, 0.0, 20, HASHES, None)
    vg, vc = LiveView(gpu, Slot(), table, 0.0), LiveView(cpu, Slot(), table, 0.0)
    assert vg.cached_prompt_tokens(req) == 16 and vg.tier_hit_tokens(req) == {}  # the CPU copy lies behind the GPU hit
    router = KVAwarePrecise(RouterParams(replicas=2))
    assert router.uncached_blocks(req, vg) < router.uncached_blocks(req, vc) < 5

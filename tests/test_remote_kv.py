"""KV from elsewhere (sim/core/remote_kv.py), the shared link (sim/core/link.py), the LINKS registry."""

from __future__ import annotations

import numpy as np
import pytest

from models.links import GB, LINKS, get_link
from models.registry import UnknownOption
from sim.core.kv.paged import PagedAllocator
from sim.core.link import SharedLink, schedule_over
from sim.core.request import FINISHED, LOADING, RUNNING, RequestTable
from sim.core.scheduler import Scheduler, SchedulerConfig


def table_of(prompts, outputs):
    n = len(prompts)
    return RequestTable.create(np.zeros(n), np.array(prompts), np.array(outputs))


# --- links ----------------------------------------------------------------------------------------
def test_every_link_has_a_source_and_sane_figures():
    for name in LINKS:
        link = LINKS[name]
        assert link.source and link.bandwidth > 0 and link.latency_s >= 0 and 0 < link.efficiency <= 1
        assert name in LINKS.describe(name) or link.source in LINKS.describe(name)
    assert get_link("rdma-400g").bandwidth == 50 * GB  # 400 Gb/s = 50 GB/s per direction
    assert get_link("pcie-gen5-x16").bandwidth == 2 * get_link("pcie-gen4-x16").bandwidth
    with pytest.raises(UnknownOption, match="unknown link 'nope'"):
        get_link("nope")


def test_alone_on_a_link_a_transfer_takes_latency_plus_bytes_over_bandwidth():
    link = get_link("rdma-200g")
    shared = SharedLink.of(link)
    n = 3 * 10**9
    assert shared.transfer(5.0, n) == pytest.approx(5.0 + link.latency_s + n / link.bandwidth, rel=1e-12)
    assert link.transfer_time(n) == pytest.approx(link.latency_s + n / link.bandwidth, rel=1e-12)
    assert shared.transfer(100.0, 0) == 100.0


def test_concurrent_transfers_queue_fifo_and_the_burst_ends_at_total_bytes_over_bandwidth():
    shared = SharedLink("nic", bandwidth=100.0, latency_s=0.5)
    done = [shared.transfer(0.0, 100) for _ in range(3)]
    assert done == [1.5, 2.5, 3.5]  # each waits for the previous one's data end
    assert shared.busy_s == 3.0 and shared.bytes_moved == 300 and shared.transfers == 3
    assert shared.transfer(10.0, 100) == 11.5  # an idle link starts at once


def test_a_transfer_over_two_links_waits_for_both_and_moves_at_the_slower_rate():
    send = SharedLink("send", bandwidth=200.0, latency_s=0.1)
    recv = SharedLink("recv", bandwidth=100.0, latency_s=0.2)
    send.transfer(0.0, 400)  # busy until 2.0
    tr = schedule_over((send, recv), 1.0, 100)
    assert (tr.begin, tr.data_end, tr.done) == (2.0, 3.0, pytest.approx(3.2))
    assert recv.free_at == 3.0 and send.free_at == 3.0


def test_a_link_rejects_a_bandwidth_of_zero():
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        SharedLink("x", 0.0, 0.0)


# --- remote KV in the scheduler -----------------------------------------------------------------------
def test_remote_request_reserves_blocks_then_waits_for_its_ready_time():
    t = table_of([64, 32], [4, 4])
    alloc = PagedAllocator(20, 16, 1)
    sched = Scheduler(t, alloc, SchedulerConfig())
    starts = []

    def source(r, tokens, now):
        starts.append((r, tokens, now))
        return now + 10.0

    sched.remote.source = source
    sched.add_remote_request(0, 64)
    assert sched.schedule(0.0) is None  # blocks reserved, nothing runs
    assert starts == [(0, 64, 0.0)] and t.status[0] == LOADING
    assert alloc.num_used_blocks == 4  # 63 token states held (the last one is recomputed)
    assert sched.next_event_s() == 10.0 and sched.has_work
    assert sched.schedule(9.99) is None
    plan = sched.schedule(10.0)
    assert plan.prefill_ids == [0] and plan.prefill_context == [63] and plan.prefill_tokens == [1]
    sched.complete_step(plan, 10.5)
    assert t.first_token_s[0] == 10.5 and t.generated[0] == 1 and t.status[0] == RUNNING
    assert alloc.num_tokens(0) == 64


def test_a_remote_request_that_does_not_fit_blocks_the_queue_in_fcfs_order():
    t = table_of([64, 64, 16], [2, 2, 2])
    sched = Scheduler(t, PagedAllocator(5, 16, 1), SchedulerConfig())
    sched.remote.source = lambda r, tokens, now: now + 1.0
    sched.add_remote_request(0, 64)
    sched.add_remote_request(1, 64)
    sched.add_request(2)
    assert sched.schedule(0.0) is None  # 0 loading; 1 does not fit (needs 4 of the 1 free): 2 waits too
    assert list(sched.waiting) == [1, 2]


def test_remote_requests_finish_with_their_blocks_returned():
    rng = np.random.default_rng(3)
    n = 40
    t = table_of(rng.integers(2, 200, n), rng.integers(1, 30, n))
    alloc = PagedAllocator(120, 16, 1)
    sched = Scheduler(t, alloc, SchedulerConfig(max_num_seqs=8))
    sched.remote.source = lambda r, tokens, now: now + 0.7 * (r % 3)
    for r in range(n):
        if r % 2:
            sched.add_remote_request(r, int(t.prompt[r]))
        else:
            sched.add_request(r)
    now, steps = 0.0, 0
    while sched.has_work and steps < 100_000:
        plan = sched.schedule(now)
        if plan is None:
            now = sched.next_event_s()
            continue
        now += 0.25
        sched.complete_step(plan, now)
        steps += 1
    assert (t.status == FINISHED).all() and (t.generated == t.output).all()
    assert alloc.num_free_blocks == 120
    assert sched.remote.loads == n // 2


def test_held_blocks_are_freed_at_the_release_time():
    t = table_of([40], [1])
    alloc = PagedAllocator(10, 16, 1)
    sched = Scheduler(t, alloc, SchedulerConfig(hold_kv_on_finish=True))
    sched.add_request(0)
    plan = sched.schedule(0.0)
    assert sched.complete_step(plan, 1.0) == [0]
    assert alloc.num_used_blocks == 3 and not sched.has_work
    sched.release_at(0, 4.0)
    assert sched.has_work and sched.next_event_s() == 4.0
    sched.schedule(3.0)
    assert alloc.num_used_blocks == 3
    sched.schedule(4.0)
    assert alloc.num_used_blocks == 0 and not sched.has_work

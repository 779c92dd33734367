"""`generated` under a tracked decode batch: the scheduler's steps add to `computed` only and write
`generated` when the batch stops being tracked or a reader asks (Scheduler.sync_generated). Checked
against the test's own count of sampled tokens, kept from the plans, through admissions, chunked
prefills, preemptions (recompute and swap), finishes and decode runs of random lengths."""

from __future__ import annotations

import numpy as np
import pytest

from sim.core.kv.paged import PagedAllocator
from sim.core.request import FINISHED, RequestTable
from sim.core.scheduler import Scheduler, SchedulerConfig


@pytest.mark.parametrize(("mode", "sync_every_step"), [("recompute", True), ("swap", True), ("recompute", False)])
def test_generated_is_the_tokens_sampled(mode, sync_every_step):
    rng = np.random.default_rng(11)
    n = 60
    t = RequestTable.create(np.zeros(n), rng.integers(1, 150, n), rng.integers(1, 120, n))
    cfg = SchedulerConfig(max_num_seqs=10, max_batched_tokens=96, preemption=mode, swap_space_bytes=600)
    sched = Scheduler(t, PagedAllocator(40, 16, 1), cfg)
    sampled = np.zeros(n, dtype=np.int64)  # the test's own count
    now, arrived, runs, compared = 0.0, 0, 0, 0
    while arrived < n or sched.has_work:
        for _ in range(int(rng.integers(0, 3))):
            if arrived < n:
                sched.add_request(arrived)
                arrived += 1
        k = sched.decode_run_limit() if rng.random() < 0.6 else 0
        if k:
            j = int(rng.integers(1, k + 1))
            sampled[sched.running_ids()] += j  # every member decodes j tokens
            now += j
            sched.advance_decode(j, now)
            runs += 1
        else:
            plan = sched.schedule(now)
            now += 1.0
            if plan is None:
                continue
            sampled[plan.decode_ids] += 1
            for r, end in zip(plan.prefill_ids, plan.prefill_end, strict=True):
                sampled[r] += end == t.prompt[r] + sampled[r]  # the prompt (+ earlier output) is in: a token
            sched.complete_step(plan, now)
        if sync_every_step:
            sched.sync_generated()
            np.testing.assert_array_equal(t.generated, sampled)
            compared += 1
    assert (t.status == FINISHED).all() and runs > 10
    np.testing.assert_array_equal(t.generated, t.output)  # written as each one finished
    np.testing.assert_array_equal(sampled, t.output)
    assert sched.num_preemptions > 0 and (compared > 100 or not sync_every_step)

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


@pytest.mark.parametrize(("mode", "chunked"), [("recompute", True), ("swap", True), ("recompute", False)])
def test_lazy_computed_scheduler_matches_the_eager_one(mode, chunked):
    """Scheduler.lazy_computed (the single-replica replay's mode: a tracked batch's steps write no
    per-member array, computed is entered minus the batch's clock) makes the very same plans,
    finishes and, once settled, the same table as the eager scheduler, step for step."""
    rng = np.random.default_rng(23)
    n = 60
    prompts, outputs = rng.integers(1, 150, n), rng.integers(1, 120, n)
    cfg = SchedulerConfig(max_num_seqs=10, max_batched_tokens=96 if chunked else 256, preemption=mode,
                          swap_space_bytes=600, chunked_prefill=chunked)  # unchunked: every prompt fits the budget
    eager, lazy = (Scheduler(RequestTable.create(np.zeros(n), prompts, outputs), PagedAllocator(40, 16, 1), cfg)
                   for _ in range(2))
    lazy.lazy_computed = True
    now, arrived, settled = 0.0, 0, 0
    while arrived < n or eager.has_work:
        for _ in range(int(rng.integers(0, 3))):
            if arrived < n:
                eager.add_request(arrived)
                lazy.add_request(arrived)
                arrived += 1
        k = eager.decode_run_limit() if rng.random() < 0.6 else 0
        assert not k or lazy.decode_run_limit() == k
        if k:
            j = int(rng.integers(1, k + 1))
            now += j
            assert eager.advance_decode(j, now) == lazy.advance_decode(j, now)
        else:
            a, b = eager.schedule(now), lazy.schedule(now)
            now += 1.0
            assert (a is None) == (b is None)
            if a is None:
                continue
            assert a.decode_ids.tolist() == b.decode_ids.tolist() and a.prefill_ids == b.prefill_ids
            assert a.decode_context.tolist() == b.decode_context.tolist()  # true K/V counts, lazy or not
            assert a.step_shape() == b.step_shape() and a.preempted == b.preempted
            assert eager.complete_step(a, now) == lazy.complete_step(b, now)
        assert eager.running == lazy.running and eager.peak_used_blocks == lazy.peak_used_blocks
        if rng.random() < 0.15:  # settling releases the batch (the next step rebuilds it): compare the tables
            lazy.settle()
            eager.sync_generated()
            for col in ("computed", "generated", "status", "finish_s", "first_token_s"):
                np.testing.assert_array_equal(getattr(eager.t, col), getattr(lazy.t, col), err_msg=col)
            settled += 1
    lazy.settle()
    for col in ("computed", "generated", "status", "finish_s", "first_token_s", "preemptions"):
        np.testing.assert_array_equal(getattr(eager.t, col), getattr(lazy.t, col), err_msg=col)
    assert (lazy.t.status == FINISHED).all() and settled > 5 and lazy.num_preemptions == eager.num_preemptions > 0

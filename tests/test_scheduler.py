"""Scheduler: budgets at every step, preemption and re-admission, FCFS, chunked prefill, static batching."""

from __future__ import annotations

import numpy as np
import pytest

from sim.core.kv.contiguous import ContiguousAllocator
from sim.core.kv.paged import PagedAllocator
from sim.core.request import FINISHED, RequestTable
from sim.core.scheduler import Scheduler, SchedulerConfig
from sim.core.static_batch import StaticBatchScheduler


def drive(sched, table, *, dt=1.0, max_steps=100_000, check=None):
    """Run a scheduler to completion on a fake clock (every request arrives at 0); return plans."""
    for r in range(len(table)):
        sched.add_request(r)
    now, plans = 0.0, []
    while sched.has_work and len(plans) < max_steps:
        plan = sched.schedule(now)
        assert plan is not None, "scheduler stalled with work left"
        if check:
            check(plan)
        now += dt
        sched.complete_step(plan, now)
        plans.append(plan)
    assert not sched.has_work
    return plans


def table_of(prompts, outputs):
    n = len(prompts)
    return RequestTable.create(np.zeros(n), np.array(prompts), np.array(outputs))


@pytest.mark.parametrize("chunked", [True, False])
def test_budgets_respected_every_step(chunked):
    rng = np.random.default_rng(0)
    t = table_of(rng.integers(1, 300, 60), rng.integers(1, 80, 60))
    cfg = SchedulerConfig(max_num_seqs=8, max_batched_tokens=512, chunked_prefill=chunked)
    sched = Scheduler(t, PagedAllocator(400, 16, 1), cfg)

    def check(plan):
        assert plan.num_new_tokens <= 512
        assert plan.batch_size <= 8
        assert len(sched.running) <= 8
        if not chunked:  # a prompt is prefilled whole
            for r, ctx, n in zip(plan.prefill_ids, plan.prefill_context, plan.prefill_tokens, strict=True):
                assert ctx + n == t.prompt[r] + t.generated[r]

    drive(sched, t, check=check)
    assert (t.status == FINISHED).all()
    assert (t.generated == t.output).all()
    assert sched.alloc.num_free_blocks == 400  # nothing leaks


def test_first_token_is_end_of_prefill_step_and_fcfs():
    t = table_of([100, 100, 100], [3, 3, 3])
    sched = Scheduler(t, PagedAllocator(100, 16, 1), SchedulerConfig(max_num_seqs=1))
    drive(sched, t)
    # one at a time: prefill (step 1) gives the first token, two decodes finish it
    assert t.first_token_s.tolist() == [1.0, 4.0, 7.0]
    assert t.finish_s.tolist() == [3.0, 6.0, 9.0]
    assert t.admitted_s.tolist() == [0.0, 3.0, 6.0]


def test_chunked_prefill_splits_long_prompt():
    t = table_of([1000], [2])
    sched = Scheduler(t, PagedAllocator(100, 16, 1), SchedulerConfig(max_batched_tokens=256))
    plans = drive(sched, t)
    assert [p.num_prefill_tokens for p in plans[:4]] == [256, 256, 256, 232]
    assert t.first_token_s[0] == 4.0 and t.finish_s[0] == 5.0


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_preemption_and_readmission(mode):
    # 12 blocks of 16 = 192 slots; four requests growing to ~140 tokens each cannot all stay.
    t = table_of([40, 40, 40, 40], [100, 100, 100, 100])
    cfg = SchedulerConfig(max_num_seqs=4, preemption=mode, swap_space_bytes=1 << 30)
    sched = Scheduler(t, PagedAllocator(12, 16, 1), cfg)
    victims = []
    plans = drive(sched, t, check=lambda p: victims.extend(p.preempted))
    assert sched.num_preemptions > 0 and victims
    assert (t.status == FINISHED).all() and (t.generated == t.output).all()
    assert t.preemptions.sum() == sched.num_preemptions
    # the victim is always the most recently admitted running request: never request 0 here
    assert 0 not in victims
    if mode == "swap":
        assert any(p.swap_out_bytes for p in plans) and any(p.swap_in_bytes for p in plans)
        assert sched.swap_used_bytes == 0
    else:  # recompute re-prefills prompt + generated tokens
        re_prefill = [n for p in plans for r, n in zip(p.prefill_ids, p.prefill_tokens, strict=True) if n > 40]
        assert re_prefill
    assert sched.alloc.num_free_blocks == 12


def test_swap_falls_back_to_recompute_without_host_space():
    t = table_of([40, 40, 40, 40], [100, 100, 100, 100])
    cfg = SchedulerConfig(preemption="swap", swap_space_bytes=0)
    sched = Scheduler(t, PagedAllocator(12, 16, 1), cfg)
    plans = drive(sched, t)
    assert sched.num_preemptions > 0 and not any(p.swap_out_bytes for p in plans)


def test_contiguous_admission_needs_whole_reservation():
    t = table_of([10, 10, 10], [10, 10, 10])
    t.reserve[:] = 64  # 4 blocks each; the pool holds 8
    cfg = SchedulerConfig(contiguous=True)
    sched = Scheduler(t, ContiguousAllocator(8, 16, 1), cfg)
    first = []
    drive(sched, t, check=lambda p: first.append(len(sched.running)))
    assert max(first) == 2 and sched.num_preemptions == 0


def test_decode_run_limit_matches_single_steps():
    rng = np.random.default_rng(3)
    t1 = table_of(rng.integers(1, 60, 12), rng.integers(2, 90, 12))
    t2 = table_of(t1.prompt, t1.output)
    s1 = Scheduler(t1, PagedAllocator(40, 16, 1), SchedulerConfig(max_num_seqs=6))
    s2 = Scheduler(t2, PagedAllocator(40, 16, 1), SchedulerConfig(max_num_seqs=6))
    drive(s1, t1)
    for r in range(len(t2)):
        s2.add_request(r)
    now = 0.0
    while s2.has_work:
        k = s2.decode_run_limit()
        if k:
            now += k
            s2.advance_decode(k, now)
            continue
        plan = s2.schedule(now)
        now += 1.0
        s2.complete_step(plan, now)
    for col in ("first_token_s", "finish_s", "admitted_s", "preemptions", "generated"):
        np.testing.assert_array_equal(getattr(t1, col), getattr(t2, col))


@pytest.mark.parametrize(("mode", "alloc"), [("recompute", "paged"), ("swap", "paged"), ("recompute", "contiguous")])
def test_cached_decode_batch_always_matches_the_table(mode, alloc):
    """The scheduler keeps the all-decoding running batch (fewest outputs left, summed context)
    across steps instead of recomputing it; whenever it is live it must equal a fresh computation,
    through admissions, chunked prefills, preemptions, swaps, finishes and decode runs."""
    rng = np.random.default_rng(5)
    t = table_of(rng.integers(1, 120, 40), rng.integers(1, 90, 40))
    pool = PagedAllocator(30, 16, 1) if alloc == "paged" else ContiguousAllocator(60, 16, 1)
    if alloc == "contiguous":
        t.reserve[:] = t.prompt + t.output  # oracle: whole reservations, admission is the only wait
    cfg = SchedulerConfig(max_num_seqs=8, max_batched_tokens=128, preemption=mode, swap_space_bytes=400,
                          contiguous=alloc == "contiguous")
    sched = Scheduler(t, pool, cfg)

    def check():
        batch = sched._decode_batch
        if batch is None or batch.run is not sched.running_ids():
            return
        sched.sync_generated()  # a tracked batch's steps write computed only (Scheduler.sync_generated)
        run = batch.run
        assert ((t.prompt[run] + t.generated[run] - t.computed[run]) == 1).all() and (t.generated[run] >= 1).all()
        assert batch.min_remaining == int((t.output[run] - t.generated[run]).min())
        assert batch.context == int(t.computed[run].sum())

    now, arrived, checked = 0.0, 0, 0
    while arrived < len(t) or sched.has_work:
        for _ in range(int(rng.integers(0, 3))):
            if arrived < len(t):
                sched.add_request(arrived)
                arrived += 1
        k = sched.decode_run_limit() if rng.random() < 0.5 else 0
        if k:
            now += k
            sched.advance_decode(int(rng.integers(1, k + 1)), now)
        else:
            plan = sched.schedule(now)
            now += 1.0
            if plan is not None:
                sched.complete_step(plan, now)
        check()
        checked += sched._decode_batch is not None
    assert (t.status == FINISHED).all() and checked > 20
    assert (sched.num_preemptions > 0) == (alloc == "paged")  # a contiguous reservation never grows


def test_static_batch_behaves_like_generate():
    t = table_of([10, 50, 30, 20, 5], [4, 2, 8, 3, 1])
    sched = StaticBatchScheduler(t, PagedAllocator(100, 16, 1), batch_size=3)
    plans = drive(sched, t)
    # batch 1 = requests 0-2, padded to prompt 50 and output 8: 1 prefill + 7 decode steps
    assert plans[0].prefill_tokens == [50, 50, 50]
    assert t.first_token_s[:3].tolist() == [1.0, 1.0, 1.0]
    assert t.finish_s[:3].tolist() == [4.0, 2.0, 8.0]  # each sees its own last token...
    assert t.admitted_s[3:].tolist() == [8.0, 8.0]  # ...but nobody joins before the longest ends
    assert t.finish_s[3:].tolist() == [11.0, 9.0]
    assert all(p.batch_size == 3 for p in plans[:8])
    assert sched.alloc.num_free_blocks == 100


def test_prefix_hit_rate_counts_whole_prompts_as_vllm_does():
    """vLLM's PrefixCacheStats: queries += request.num_tokens at each first admission, however small
    the first chunk (here 64 of 1,000 tokens): hits / prompt tokens, not hits / first chunks."""
    t = table_of([1000, 1000], [2, 2])
    hashes = {0: [1, 2, 3, 4, 5, 6, 7, 8], 1: [1, 2, 3, 4, 5, 6, 7, 9]}  # 128-token hash blocks
    cfg = SchedulerConfig(max_num_seqs=4, max_batched_tokens=64, chunked_prefill=True)
    alloc = PagedAllocator(200, 16, 1, prefix_caching=True, prefix_block_size=128)
    sched = Scheduler(t, alloc, cfg, hashes.get)
    sched.add_request(0)
    now = 0.0
    while sched.has_work:  # request 0 alone, so its blocks are cached before request 1 looks
        plan = sched.schedule(now)
        now += 1.0
        sched.complete_step(plan, now)
    sched.add_request(1)
    while sched.has_work:
        plan = sched.schedule(now)
        now += 1.0
        sched.complete_step(plan, now)
    assert sched.prefix_queries == 2000  # both whole prompts, not 64 + (hits + 64)
    assert sched.prefix_hits == 7 * 128  # request 1 shares 7 of 8 hash blocks
    assert int(t.prefix_hit[1]) == 7 * 128

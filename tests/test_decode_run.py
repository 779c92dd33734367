"""The decode fast path's contract (sim/core/decode_run.py): a run stops before an arrival, a
finish, a block shortage, an admission and a block release; taking it in one go books exactly
what stepping one by one does (tables, KV books, times, counters); whole replays are identical."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sim.core import decode_run
from sim.core.kv import BREAKDOWN_FIELDS
from sim.core.kv.paged import PagedAllocator
from sim.core.request import RequestTable
from sim.core.scheduler import Scheduler, SchedulerConfig
from sim.run.deployment import Deployment
from sim.run.engine import build, simulate
from sim.run.metrics import StepRecorder
from sim.scenario import Scenario
from sim.trace import synthetic

LLAMA = Scenario(model="llama-3-8b", gpu="h100-sxm", kv_budget_gib=1.0, max_model_len=4096)
COST = Deployment.resolve(LLAMA).cost
FAR = 1e12  # a horizon no run reaches (the engine's next grid point is always finite)
TABLE_COLUMNS = ("computed", "generated", "status", "admitted_s", "first_token_s", "finish_s", "preemptions")


def table_of(prompts, outputs) -> RequestTable:
    n = len(prompts)
    return RequestTable.create(np.zeros(n), np.array(prompts), np.array(outputs))


def queued(prompts, outputs, blocks: int, **cfg) -> Scheduler:
    """A scheduler over a paged pool of `blocks` blocks of 16 with every request waiting."""
    sched = Scheduler(table_of(prompts, outputs), PagedAllocator(blocks, 16, 1), SchedulerConfig(**cfg))
    for r in range(len(prompts)):
        sched.add_request(r)
    return sched


class Twins:
    """Two schedulers built alike and driven alike: `check_run_equals_steps` takes a run on one
    and steps the other (a scheduler compiled by sim/native cannot be deep-copied). Reads go to
    the first; `add_request` and `step` act on both."""

    def __init__(self, make: Callable[[], Scheduler]) -> None:
        self.run, self.stepped = make(), make()

    def __getattr__(self, name: str):
        return getattr(self.run, name)

    def both(self) -> tuple[Scheduler, Scheduler]:
        return self.run, self.stepped

    def add_request(self, r: int) -> None:
        for s in self.both():
            s.add_request(r)

    def step(self, now: float, end: float) -> None:
        for s in self.both():
            plan = s.schedule(now)
            if plan is not None:
                s.complete_step(plan, end)


def decoding(sched: Scheduler | Twins, now: float = 0.0) -> float:
    """Step `sched` until every running request decodes (its prompts are in); returns the clock."""
    while sched.decode_batch() is None:
        if isinstance(sched, Twins):
            sched.step(now, now + 1.0)
        else:
            sched.complete_step(sched.schedule(now), now + 1.0)
        now += 1.0
    return now


def kv_books(alloc) -> tuple:
    """What the allocator's figures are made of (which physical block a request holds is not one:
    a run serves its members' block crossings in running order, stepping in time order)."""
    bd = alloc.breakdown([])
    return (alloc.num_free_blocks, tuple(getattr(bd, f) for f in BREAKDOWN_FIELDS),
            tuple(sorted((k, tuple(v.items())) for k, v in alloc.group_breakdown().items())))


def check_run_equals_steps(twins: Twins, k: int, now: float) -> None:
    """Taking k <= decode_run_limit() steps in one go == k schedule + complete_step calls, each
    of which must be a pure decode step of the same batch with no finish before the last."""
    sched, twin = twins.both()  # each its own table and allocator, in the same state
    run = sched.running_ids().tolist()
    finished_stepping: list[int] = []
    for j in range(k):
        plan = twin.schedule(now + j)
        assert plan is not None and plan.is_pure_decode and not plan.preempted
        assert plan.decode_ids.tolist() == run, "the batch changed inside the run"
        finished_stepping = twin.complete_step(plan, now + k if j == k - 1 else now + j + 1)
        assert not finished_stepping or j == k - 1, "a request finished before the run's last step"
    assert sched.advance_decode(k, now + k) == finished_stepping
    sched.sync_generated()  # both write generated when asked (Scheduler.sync_generated)
    twin.sync_generated()
    for col in TABLE_COLUMNS:
        np.testing.assert_array_equal(getattr(sched.t, col), getattr(twin.t, col), err_msg=col)
    assert sched.running == twin.running and sched.peak_used_blocks == twin.peak_used_blocks
    assert kv_books(sched.alloc) == kv_books(twin.alloc)


# --- when a run may be taken ---------------------------------------------------------------------
def test_a_run_ends_at_the_first_finish():
    sched = Twins(lambda: queued([40, 40, 40], [30, 12, 50], 100))
    t, now = sched.t, decoding(sched)
    k = sched.decode_run_limit()
    assert k == int((t.output[[0, 1, 2]] - t.generated[[0, 1, 2]]).min()) == 11
    check_run_equals_steps(sched, k, now)
    assert t.finish_s[1] == now + k and sched.running == [0, 2]  # the finish is the run's last step


def test_a_run_ends_before_a_block_shortage():
    """Two requests of 40 tokens in a pool of 7 blocks of 16: 6 blocks held, one free. The run
    stops at the last step that fits; the step after it must preempt (general path)."""
    sched = Twins(lambda: queued([40, 40], [100, 100], 7))
    now = decoding(sched)
    assert sched.alloc.num_free_blocks == 1
    k = sched.decode_run_limit()
    assert 0 < k < 99 and sched.alloc.fits_growth(sched.running_ids(), k)
    assert not sched.alloc.fits_growth(sched.running_ids(), k + 1)
    check_run_equals_steps(sched, k, now)
    assert sched.decode_run_limit() == 0
    assert sched.schedule(now + k).preempted  # the next step is not a pure decode step


def test_no_run_while_the_head_of_the_queue_could_be_admitted():
    t = table_of([40, 40, 40], [60, 60, 60])
    sched = Scheduler(t, PagedAllocator(100, 16, 1), SchedulerConfig(max_num_seqs=8))
    sched.add_request(0)
    sched.add_request(1)
    now = decoding(sched)
    assert sched.decode_run_limit() > 0
    sched.add_request(2)  # fits: the next step admits it
    assert sched.head_admissible(2) and sched.decode_run_limit() == 0
    assert sched.schedule(now).prefill_ids == [2]


@pytest.mark.parametrize("why", ["max_num_seqs", "no_blocks"])
def test_a_blocked_queue_does_not_stop_a_run(why):
    """A waiting head that cannot be admitted (no seat, or no blocks for its whole prompt) leaves
    the batch decoding; the run is as long as if nobody waited."""
    seqs, blocks = (2, 100) if why == "max_num_seqs" else (8, 9)
    sched = Twins(lambda: queued([40, 40, 100], [60, 60, 10], blocks, max_num_seqs=seqs))
    now = decoding(sched)
    assert sched.running == [0, 1] and list(sched.waiting) == [2]
    k = sched.decode_run_limit()
    assert k > 1
    check_run_equals_steps(sched, k, now)


def test_a_run_stops_where_a_sliding_window_releases_blocks():
    """gpt-oss-20b's sliding layers give blocks back as requests run: with a request waiting
    for room, the run ends at the step before the first release, so the admission that the
    freed blocks may allow happens when stepping would do it."""
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=0.05, max_num_seqs=512)  # 136 pages
    trace = synthetic(2, rate=1.0, input="fixed:value=200", output="fixed:value=400", seed=0)
    sched = Twins(lambda: build(trace, sc).replicas[0].sched)
    for s in sched.both():
        s.t.prompt[1] = 1750  # its whole prompt (110 full + 9 sliding pages) fits only an empty pool
    sched.add_request(0)
    now = decoding(sched)
    while sched.alloc.steps_until_free_rises(sched.running_ids()) < 2:  # a release a few steps ahead
        sched.step(now, now + 1)
        now += 1
    free_rises = sched.alloc.steps_until_free_rises(sched.running_ids())
    assert free_rises < sched.decode_batch().min_remaining
    assert sched.decode_run_limit() == sched.decode_batch().min_remaining  # nobody waits: no cut
    sched.add_request(1)
    assert not sched.head_admissible(1)
    assert sched.decode_run_limit() == free_rises
    check_run_equals_steps(sched, free_rises, now)


# --- the engine's side: step ends and the horizon ---------------------------------------------------
def two_decoding(output: int = 200) -> tuple[Scheduler, float]:
    sched = queued([300, 500], [output, output], 1000)
    return sched, decoding(sched)


def test_step_ends_are_the_sums_of_single_steps_bit_for_bit():
    sched, now = two_decoding(output=2 * decode_run.SHORT_RUN + 100)
    k, ctx = sched.decode_run_limit(), sched.decode_context_tokens()
    assert k > 2 * decode_run.SHORT_RUN  # past the Python loop: the numpy cumsum path too
    run = decode_run.plan_run(sched, COST, now, sched.decode_run_limit(), next_sample=FAR, next_arrival=None, max_steps=None)
    expected, t = [], now
    for j in range(k):
        t += COST.step_time(2, ctx + 2 * j)
        expected.append(t)
    assert run.batch == 2 and run.ends == expected


@pytest.mark.parametrize("at", [0, 3, 40])
def test_a_run_ends_at_the_step_that_reaches_the_next_arrival_or_sample(at):
    sched, now = two_decoding()
    full = decode_run.plan_run(sched, COST, now, sched.decode_run_limit(), next_sample=FAR, next_arrival=None, max_steps=None).ends
    for point in (full[at], (full[at] + full[at + 1]) / 2):
        want = at + 1 if point == full[at] else at + 2  # the step that reaches it still runs
        by_arrival = decode_run.plan_run(sched, COST, now, sched.decode_run_limit(), next_sample=FAR, next_arrival=point, max_steps=None)
        by_sample = decode_run.plan_run(sched, COST, now, sched.decode_run_limit(), next_sample=point, next_arrival=None, max_steps=None)
        assert by_arrival.ends == by_sample.ends == full[:want]
    assert decode_run.plan_run(sched, COST, now, sched.decode_run_limit(), next_sample=FAR, next_arrival=None, max_steps=5).ends == full[:5]


def test_an_arrival_behind_a_blocked_queue_does_not_end_a_run():
    sched = queued([300, 500, 100], [200, 200, 5], 1000, max_num_seqs=2)
    now = decoding(sched)
    run = decode_run.plan_run(sched, COST, now, sched.decode_run_limit(), next_sample=FAR, next_arrival=now + 1e-9, max_steps=None)
    assert len(run.ends) == sched.decode_run_limit() > 1


def test_bookings_put_every_step_in_the_bucket_its_end_falls_in():
    rec = StepRecorder(horizon_s=100.0)  # bucket width 0.125 s
    assert rec.width == 0.125  # buckets [0.25, 0.375), [0.375, 0.5)
    assert decode_run.DecodeRun(4, [0.26, 0.30, 0.33, 0.36]).early_steps(rec.bucket) == 0  # all 4 at 0.36
    cross = decode_run.DecodeRun(4, [0.30, 0.33, 0.36, 0.38])  # 0.375 starts a new bucket
    assert cross.early_steps(rec.bucket) == 3  # 3 at 0.36, the last at 0.38
    assert decode_run.DecodeRun(4, [0.38]).early_steps(rec.bucket) == 0


# --- properties over random states and whole replays --------------------------------------------------
SCHEDULERS = {
    "paged": (LLAMA, {}),
    "paged-small-swap": (LLAMA.replace(kv_budget_gib=0.05, preemption="swap"), {}),
    "contiguous": (LLAMA.replace(allocator="contiguous", reserve="max", kv_budget_gib=2.0), {}),
    "sliding": (Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=0.1, max_num_seqs=64), {}),
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(SCHEDULERS)), seed=st.integers(0, 10_000), max_seqs=st.sampled_from([4, 16, 256]))
@example(kind="sliding", seed=42, max_seqs=4)  # a sliding-window run whose peak of blocks lies before its end
def test_every_run_limit_is_a_run_of_pure_decode_steps(kind, seed, max_seqs):
    """From random states on a fake clock (arrivals between steps, random run lengths), every
    k <= decode_run_limit() taken in one go leaves exactly the books of k single steps (the peak
    of blocks in use included)."""
    sc = SCHEDULERS[kind][0].replace(max_num_seqs=max_seqs)
    trace = synthetic(40, rate=4.0, input="lognormal:mean=400:sigma=0.8", output="lognormal:mean=60:sigma=0.8",
                      seed=seed)
    sched = Twins(lambda: build(trace, sc).replicas[0].sched)
    rng = np.random.default_rng(seed)
    arrivals = np.flatnonzero(sched.t.status != 4).tolist()  # not rejected
    now, runs = 0.0, 0
    while arrivals or sched.has_work:
        for _ in range(int(rng.integers(0, 3))):
            if arrivals:
                sched.add_request(arrivals.pop(0))
        k = sched.decode_run_limit() if sched.has_work else 0
        if k:
            take = int(rng.integers(1, min(k, 40) + 1))
            check_run_equals_steps(sched, take, now)
            now, runs = now + take, runs + 1
            check_running_ids(sched)
            continue
        sched.step(now, now + 1.0)
        now += 1.0
        check_running_ids(sched)
    assert runs > 0


def check_running_ids(twins: Twins) -> None:
    """The ids array the scheduler keeps by cuts and appends (Scheduler.running_ids) is `running`."""
    for s in twins.both():
        ids = s.running_ids()
        assert ids.dtype == np.int64 and ids.tolist() == s.running


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), budget=st.sampled_from([0.1, 0.3, 2.0]), seqs=st.sampled_from([8, 256]),
       rate=st.sampled_from([5.0, 40.0]), chunked=st.booleans())
def test_replays_with_and_without_skip_ahead_are_identical(seed, budget, seqs, rate, chunked):
    trace = synthetic(150, rate=rate, input="lognormal:mean=300:sigma=0.8", output="lognormal:mean=120:sigma=0.8",
                      seed=seed)
    sc = LLAMA.replace(kv_budget_gib=budget, max_num_seqs=seqs, chunked_prefill=chunked)
    fast, slow = simulate(trace, sc), simulate(trace, sc, skip_ahead=False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    drop = ("sim_wall_s", "sim_events")
    assert {k: v for k, v in fast.summary.items() if k not in drop} == {k: v for k, v in slow.summary.items() if k not in drop}
    assert fast.summary["sim_events"] <= slow.summary["sim_events"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=40), st.integers(1, 12), st.randoms(use_true_random=False))
def test_leave_takes_every_member_done_in_running_order(remaining, steps, rnd):
    """DecodeBatch.leave: the members whose last token is sampled by the clock, in running order, out
    of `running` (one leaver, a few found by index, or many by one pass: decode_run.FEW_LEAVERS)."""
    ids = list(range(100, 100 + len(remaining)))
    rnd.shuffle(ids)  # running order is not id order
    batch = decode_run.DecodeBatch.of(np.array(ids, dtype=np.int64), remaining, context=0)
    batch.advance(steps)
    running = list(ids)
    done = batch.leave(running)
    due = {r: n for r, n in zip(ids, remaining, strict=True)}
    assert done == [r for r in ids if due[r] <= steps]
    assert running == [r for r in ids if due[r] > steps]
    assert sorted(k & decode_run.ID_MASK for k in batch.finishes) == sorted(running)


def test_finish_heap_orders_by_last_step_then_id_up_to_the_largest_id():
    """The finish heap packs (last step, id) in one int (decode_run.ID_BITS): the largest ids and
    long runs keep the pair's order, and leave hands back the ids, not the packed keys."""
    top = decode_run.ID_MASK
    ids = [top, 5, top - 1, 0]
    batch = decode_run.DecodeBatch.of(np.array(ids, dtype=np.int64), [3_000_000, 7, 3_000_000, 7], context=0)
    assert batch.min_remaining == 7
    batch.advance(7)
    running = list(ids)
    assert batch.leave(running) == [5, 0] and running == [top, top - 1]
    batch.advance(3_000_000 - 7)
    assert batch.leave(running) == [top, top - 1] and running == []

"""The decode fast path: k pure-decode steps taken in one go, with exactly the outcome of k steps.

Most engine steps of a busy replay are pure decode steps (every running request computes one
token and samples the next) in which nothing changes but token counts. The simulator jumps over
a run of them with one SimPy timeout instead of k. Everything that makes the jump exact lives
here; the scheduler (sim/core/scheduler.py) stays the policy it implements and the engine
(sim/run/engine.py) only asks for the limit (`decode_run_limit`) and a run (`plan_run`), waits
the run's end and books it.

When a run of k steps may be taken in one go (all must hold; `run_limit` + `plan_run`):
1. every running request is decoding (prompt all in K/V, one token sampled), nothing is swapped
   out, and the batch fits the token budget (`max_batched_tokens`): each step is the same batch;
2. no request finishes before the last step: k <= the fewest output tokens a member has still to
   sample (a finish changes the batch; one at the last step is applied at the run's end);
3. no block shortage: the allocator can grow every member by k tokens (`fits_growth(run, k)`),
   else k is cut to the largest growth that fits (the step after it preempts: general path);
4. no waiting request could be admitted: the head of the waiting queue does not fit now (the
   scheduler's own admission test, `head_admissible`), or `max_num_seqs` is reached; and while
   one waits behind free room, no step of the run releases blocks (a sliding-window or chunked
   group dropping blocks, `steps_until_free_rises`) after which it might fit;
5. no arrival the scheduler could act on: with an empty waiting queue the run ends at the first
   step that reaches the next arrival (that step still runs: arrivals join between steps); with a
   blocked queue arrivals only queue behind the head (rule 4 holds for them too);
6. no gauge sample inside the run: it ends at the first step that reaches the next metrics grid
   point, so gauges are sampled from the state at the step end, as when stepping;
7. the engine's `step_limit` is not passed.
A scheduler that cannot say (the general case) answers 0 and the engine takes one general step.

What must be booked for the k steps, so that the result is identical to stepping one by one:
- times: step j ends at the end of step j-1 plus `cost.decode_time(b, ctx + j*b)` (b members,
  ctx the summed K/V tokens at the start), summed sequentially: the very floats that k single
  steps give (`step_ends`; `CostModel.decode_step_times` is bit-identical to `decode_time`);
- tokens: every member computes and samples k tokens (`computed` += k; `generated` follows it,
  written by the scheduler when it stops tracking the batch: `DecodeBatch.write_generated`); the members
  whose last token is sampled at the last step finish at its end (`finish_s`, status, K/V freed
  in running order) and are returned to the caller;
- KV growth: the allocator grows every member by k tokens at once (`grow_by`), the same books as
  k appends; the peak of blocks in use is taken after the growth, where it lies when no block
  comes back during the run, else from the allocator's per-step peak (`blocks_to_grow` of a
  sliding or chunked group's allocator is the most blocks held at any step of the growth);
- counters (steps, decode tokens) go to the metrics bucket in which each step ends; all steps but
  the last end before the next grid point, so they share one bucket (`DecodeRun.early_steps`);
- gauges: sampled once, at the run's end, from the state after it (rule 6 makes that the state
  stepping would sample); the last batch size is b;
- arrivals behind a blocked queue that arrive by the start of the last step are queued before it,
  as stepping would (the engine does it; they count in the waiting gauge at the run's end).
tests/test_decode_run.py checks the contract (runs stop before an arrival, a finish, a block
shortage) and tests/test_engine.py that skip-ahead and stepping give identical frames.

`DecodeBatch` is the scheduler's all-decoding batch kept across steps (who finishes when, the
summed context), so that neither the fast path nor a single decode step scans the batch.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sim.core.request import RequestTable
from sim.core.step_types import PEAK_GRID_LIMIT, Ids, SkipAhead

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from sim.core.kv.base import KVAllocator

_all, _sum = np.logical_and.reduce, np.add.reduce  # cheap on small batches
# A finish heap entry is one int, (clock value at the member's last token) << ID_BITS | request id: it
# sorts as the (clock value, id) pair would, with one int compare and no tuple to build. Request ids
# are rows of the request table, far below 2**32 (a table that long would not fit in memory).
ID_BITS = 32
ID_MASK = (1 << ID_BITS) - 1
FEW_LEAVERS = 8  # DecodeBatch.leave finds up to this many leavers of one step by index, more by one set pass
SHORT_RUN = 128  # decode steps summed in Python (timer.ends) before a run goes to numpy


class StepTimer(Protocol):
    """One batch size's decode step time (sim.timing.decode_timer): per step, and a run's ends."""

    def __call__(self, kv: int) -> float: ...

    def ends(self, t: float, kv: int, k: int, horizon: float) -> list[float]: ...


class DecodeCost(Protocol):
    """The step-time source's pure-decode part (sim.timing.cost_model.CostModel)."""

    def decode_time(self, decode_seqs: int, decode_kv: int) -> float: ...

    def decode_timer(self, decode_seqs: int) -> StepTimer: ...

    def decode_step_times(self, k: int, batch: int, context_tokens_start: int) -> np.ndarray: ...


# --- the all-decoding batch -------------------------------------------------------------------
@dataclass(slots=True, init=False)  # __init__ written out: compiled, a dataclass's generated one runs as Python
class DecodeBatch:
    """The running batch while every member is decoding (computes one token per step).

    Valid for as long as the running ids array is the same object (admission, preemption and
    finishes all replace it); the scheduler carries it across admissions and finishes. A decode
    step adds one token to every member, so the summed context moves by a known amount and each
    member's last step is known in advance: `finishes` is a heap of the clock value at which each
    member samples its last token and its id (packed in one int: ID_BITS), so finding who finishes
    needs no scan. Its steps add to the table's `computed` only: a decoding member has generated =
    computed - prompt + 1, so `generated` is written once, when the scheduler stops tracking the
    batch (or a member finishes, or a reader asks: Scheduler.sync_generated), not once per step."""

    run: np.ndarray  # the running ids it describes
    context: int  # summed K/V tokens of the members (cost model input)
    clock: int  # decode steps this batch (and the batches it grew from) has taken
    finishes: list[int]  # heap of (clock at the last token) << ID_BITS | id; shared with the batch it is carried into
    # Lazy `computed` too (the single-replica replay only: nothing outside the scheduler reads the
    # table mid-run there): a member's table entry is its computed minus `clock`, written true
    # when it leaves or the batch is released (`release`), so a step writes no per-member array.
    lazy: bool = False
    left_at: int = -1  # after `leave` took out one member: its index in `running` (else -1)

    def __init__(self, run: np.ndarray, context: int, clock: int, finishes: list[int],
                 lazy: bool = False) -> None:
        self.run, self.context, self.clock, self.finishes, self.lazy = run, context, clock, finishes, lazy
        self.left_at = -1

    @classmethod
    def of(cls, run: np.ndarray, remaining: list[int], context: int, lazy: bool = False) -> DecodeBatch:
        ids = run.tolist()
        if len(ids) != len(remaining):
            raise ValueError(f"decode batch: {len(ids)} members but {len(remaining)} remaining counts")
        heap = [(remaining[i] << ID_BITS) | ids[i] for i in range(len(ids))]  # (compiled, zip(strict=True) calls Python)
        heapq.heapify(heap)
        return cls(run, context, 0, heap, lazy)

    @classmethod
    def from_table(cls, t: RequestTable, run: np.ndarray, lazy: bool = False) -> DecodeBatch | None:
        """The batch of `run` if every member is decoding now, else None."""
        c, g = t.computed[run], t.generated[run]
        if not run.size or not _all(t.prompt[run] + g - c == 1) or not _all(g >= 1):
            return None
        return cls.of(run, (t.output[run] - g).tolist(), int(_sum(c)), lazy)

    def offset(self) -> int:
        """What the table's `computed` of a member lacks now (0 unless lazy)."""
        return self.clock if self.lazy else 0

    @property
    def min_remaining(self) -> int:
        """Fewest output tokens a member has still to sample (0: someone is done)."""
        return (self.finishes[0] >> ID_BITS) - self.clock

    def advance(self, steps: int) -> None:
        self.clock += steps
        self.context += steps * self.run.size

    def leave(self, running: list[int]) -> list[int]:
        """Members whose last token has been sampled, in running order, taken out of the heap
        and out of `running` (changed in place); [] while nobody is done."""
        heap, due = self.finishes, (self.clock + 1) << ID_BITS  # entries below `due` are done
        self.left_at = -1
        if heap[0] >= due:
            return []
        first = heapq.heappop(heap) & ID_MASK
        if not heap or heap[0] >= due:  # the common case: one leaves, no set and no scan of the batch
            i = running.index(first)
            del running[i]
            self.left_at = i
            return [first]
        gone = [first]
        while heap and heap[0] < due:
            gone.append(heapq.heappop(heap) & ID_MASK)
        if len(gone) <= FEW_LEAVERS:  # each found by a scan that stops at it: no pass over the whole batch
            at = sorted([running.index(r) for r in gone])
            done = [running[i] for i in at]
            for i in reversed(at):
                del running[i]
            return done
        leaving = set(gone)
        done = [r for r in running if r in leaving]
        running[:] = [r for r in running if r not in leaving]
        return done

    def write_generated(self, t: RequestTable) -> None:
        """Members' `generated` from their `computed` (prompt + generated - 1 while decoding): the
        steps of a tracked batch add to computed only, and the scheduler writes generated once, when
        it stops tracking the batch (or a reader asks: Scheduler.sync_generated)."""
        run = self.run
        if run.size:
            t.generated[run] = t.computed[run] + self.offset() - t.prompt[run] + 1

    def release(self, t: RequestTable) -> None:
        """The scheduler stops tracking this batch: its members' computed and generated written true."""
        run, off = self.run, self.offset()
        if run.size and off:
            t.computed[run] += off
            self.lazy = False  # written: no longer offset
        self.write_generated(t)

    def carried(self, run: np.ndarray, context: int) -> DecodeBatch:
        """This batch after some members left: `run` the rest, `context` their summed K/V."""
        return DecodeBatch(run, context, self.clock, self.finishes, self.lazy)


def joined(batch: DecodeBatch | None, t: RequestTable, run: np.ndarray, prefill_ids: list[int],
           prefill_end: list[int], lazy: bool = False) -> DecodeBatch:
    """The decode batch after a step in which `batch` (None: there was none) decoded and every
    prefill (appended to `run` in this order) finished its prompt: all of `run` now decode
    (a lazy batch's joiners are entered at computed minus its clock: DecodeBatch.lazy)."""
    ctx = sum(prefill_end)
    if batch is None:
        cells = t.cells
        return DecodeBatch.of(run, [cells.output[r] - cells.generated[r] for r in prefill_ids], ctx, lazy)
    heap, clock, off = batch.finishes, batch.clock, batch.offset()
    output, generated, computed = t.cells.output, t.cells.generated, t.cells.computed
    for r in prefill_ids:
        heapq.heappush(heap, ((clock + output[r] - generated[r]) << ID_BITS) | r)
        if off:
            computed[r] = computed[r] - off
    return DecodeBatch(run, batch.context + ctx, clock, heap, batch.lazy)


# --- the continuous-batching scheduler's side: how far, and the k steps applied -----------------
class BatchLimits(Protocol):
    """The scheduler limits a run must respect (sim.core.scheduler.SchedulerConfig)."""

    @property
    def max_num_seqs(self) -> int: ...

    @property
    def max_batched_tokens(self) -> int: ...


class DecodeRunHost(Protocol):
    """The continuous-batching scheduler's state the fast path reads and books
    (sim.core.scheduler.Scheduler), named here so that this module needs no import of it."""

    peak_used_blocks: int

    @property
    def t(self) -> RequestTable: ...

    @property
    def alloc(self) -> KVAllocator: ...

    @property
    def cfg(self) -> BatchLimits: ...

    @property
    def running(self) -> Collection[int]: ...

    @property
    def waiting(self) -> Collection[int]: ...

    @property
    def swapped(self) -> Collection[int]: ...

    def running_ids(self) -> np.ndarray: ...

    def decode_batch(self) -> DecodeBatch | None: ...

    def head_admissible(self, batch_size: int) -> bool: ...


def run_limit(sched: DecodeRunHost) -> int:
    """Rules 1-4 of the module docstring for `sched`: how many next steps may be taken in one go
    (0: take the general path). Only valid while no new request arrives."""
    if sched.swapped or not sched.running:
        return 0
    cfg = sched.cfg
    b = len(sched.running)
    if b > cfg.max_batched_tokens:
        return 0
    room = bool(sched.waiting) and b < cfg.max_num_seqs
    if room and sched.head_admissible(b):
        return 0  # admission may happen this step: general path
    batch = sched.decode_batch()
    if batch is None:
        return 0
    k, run, alloc = batch.min_remaining, batch.run, sched.alloc
    if room:  # a waiting request may fit once blocks are dropped
        k = min(k, alloc.steps_until_free_rises(run))
        if k == 0:
            return 0
    if alloc.fits_growth(run, k):  # the allocator holds `computed` tokens of each
        return k
    return largest_fitting_growth(alloc, run, k)


def largest_fitting_growth(alloc: KVAllocator, run: Ids, k: int) -> int:
    """Largest j in [0, k) such that growing every member by j tokens fits (binary search; the
    caller knows k does not fit, and growth needs only rise with j)."""
    lo, hi = 0, k
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if alloc.fits_growth(run, mid):
            lo = mid
        else:
            hi = mid
    return lo


def context_tokens(sched: DecodeRunHost) -> int:
    """Summed K/V tokens of the running batch (cost model input for decode runs)."""
    batch = sched.decode_batch()
    return batch.context if batch is not None else int(_sum(sched.t.computed[sched.running_ids()]))


def grow(sched: DecodeRunHost, k: int) -> None:
    """The K/V and token books of k decode steps of the running batch (k <= run_limit(sched));
    the caller then releases the members that finished."""
    t, alloc = sched.t, sched.alloc
    batch = sched.decode_batch()  # before the table moves on: it is advanced below
    run = batch.run if batch is not None else sched.running_ids()  # the same array
    if alloc.steps_until_free_rises(run) < k:  # blocks come back inside the run: it may peak before its end
        _grow_past_releases(sched, run, k, batch.offset() if batch is not None else 0)
    else:
        alloc.grow_by(run, k)
    sched.peak_used_blocks = max(sched.peak_used_blocks, alloc.num_used_blocks)
    if batch is None:
        t.computed[run] += k
        t.generated[run] += k
        return
    if not batch.lazy:
        t.computed[run] += k
    batch.advance(k)  # its members' generated (and a lazy batch's computed) follow the clock (DecodeBatch)


def _grow_past_releases(sched: DecodeRunHost, run: np.ndarray, k: int, offset: int) -> None:
    """grow_by(run, k) for a run in which sliding or chunked groups give blocks back, booking the
    peak of blocks in use over its steps, as stepping would see it: blocks_to_grow is that peak
    (exactly for up to PEAK_GRID_LIMIT steps x requests, so longer runs grow in pieces)."""
    alloc, computed = sched.alloc, sched.t.computed[run] + offset
    piece = max(1, PEAK_GRID_LIMIT // run.size)
    done = 0
    while done < k:
        j = min(piece, k - done)
        peak = alloc.num_used_blocks + alloc.blocks_to_grow(run, computed + (done + j))
        sched.peak_used_blocks = max(sched.peak_used_blocks, peak)
        alloc.grow_by(run, j)
        done += j


# --- the engine's side: the run's step times and its books -------------------------------------
@dataclass(slots=True, init=False)  # (__init__ written out, as DecodeBatch's)
class DecodeRun:
    """len(ends) pure-decode steps of `batch` sequences, step j ending at ends[j]."""

    batch: int
    ends: list[float]

    def __init__(self, batch: int, ends: list[float]) -> None:
        self.batch, self.ends = batch, ends

    def early_steps(self, bucket: Callable[[float], int]) -> int:
        """Steps whose counters are booked at the second-to-last end (0: all at the last end).
        Every step is booked in the bucket its end falls in; all but the last end before the next
        grid point (rule 6), so they share one bucket, which differs from the last's at most."""
        ends = self.ends
        if len(ends) > 1 and bucket(ends[-2]) != bucket(ends[-1]):
            return len(ends) - 1
        return 0


def plan_run(sched: SkipAhead, cost: DecodeCost, t: float, limit: int, *, next_sample: float,
             next_arrival: float | None, max_steps: int | None) -> DecodeRun:
    """The decode run the engine takes from time t, given limit = sched.decode_run_limit() > 0
    (rules 1-4), cut by rules 5-7. next_sample: the next metrics grid point; next_arrival: the
    next request routed to this replica (None: no more); max_steps: steps left before the step
    limit (None: no limit). (The engine asks for the limit first: most steps have none.)"""
    horizon = next_sample
    if next_arrival is not None and not sched.num_waiting and next_arrival < horizon:
        horizon = next_arrival
    k = limit if max_steps is None else min(limit, max_steps)
    b = sched.num_running
    return DecodeRun(b, step_ends(cost, t, k, b, sched.decode_context_tokens(), horizon))


def step_ends(cost: DecodeCost, t: float, k: int, b: int, ctx: int, horizon: float) -> list[float]:
    """End times of up to k decode steps of a batch of b from `t` (summed context ctx),
    stopping at the first step that reaches `horizon`. Each end is the previous end plus the
    step's time, the very floats that stepping one at a time produces. Up to SHORT_RUN steps
    (nearly every run: most end at the next arrival) are summed by the timer's own loop, well under
    a microsecond a step; numpy's fixed cost (tens of microseconds a call) pays only past that."""
    step = cost.decode_timer(b)
    ends = step.ends(t, ctx, min(k, SHORT_RUN), horizon)
    k -= len(ends)
    if k <= 0 or ends[-1] >= horizon:
        return ends
    t = ends[-1]
    ctx += len(ends) * b
    first = step(ctx)  # step times only grow along a run: bounds the steps that fit
    if first > 0:
        k = min(k, int((horizon - t) / first) + 2)
    dts = cost.decode_step_times(k, b, ctx)
    rest = np.cumsum(np.concatenate(([t], dts)))[1:]  # sequential, like the loop above
    k = int(np.searchsorted(rest, horizon, side="left")) + 1
    return ends + rest[:k].tolist()

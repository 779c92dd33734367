"""SimPy replay: one engine process per replica asks its scheduler for a step, waits the step's
time from the cost model, and applies it.

Events: at most one SimPy timeout per engine step, and far fewer with skip-ahead: a run of pure
decode steps in which nothing changes but token counts is one timeout. A single replica has
nothing to interleave: its engine process is driven by `DirectClock`, which takes each timeout at
once (the same clock floats, no event objects). When a run may be taken and
what it must book so that `skip_ahead=False` gives identical results is the contract of
sim/core/decode_run.py; the engine asks the scheduler for the limit and the module for a run
(`plan_run`), waits the run's end and books it (`_decode_run`).

Arrivals: the trace is replayed by each replica's arrival feed (requests routed round-robin by
trace order, so replicas never wait on each other's timing); an engine takes every arrival up to
its clock at the start of each step, and an idle engine sleeps until its next arrival. That costs
no event per arrival, which matters on million-request traces.

Requests that can never run are counted, never silently dropped: a prompt of max_model_len tokens
or more is rejected (as vLLM does); an output that would pass max_model_len is clamped to fit;
a request whose K/V could not fit an empty pool is rejected, and on a per-group pool one whose
whole-sequence admission (window groups counted up to vLLM's cap) no empty pool passes, which
would block the queue for good. Summary keys `rejected`, `clamped`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import simpy
from mypy_extensions import mypyc_attr

from sim.core import decode_run
from sim.core.interfaces import Executor
from sim.core.interfaces import Scheduler as SchedulerPolicy
from sim.core.kv.base import KVAllocator
from sim.core.kv.hybrid import HybridPagedAllocator
from sim.core.kv.reserve import reserve_tokens_array
from sim.core.request import REJECTED, RequestTable
from sim.core.scheduler import Scheduler, SchedulerConfig
from sim.core.static_batch import StaticBatchScheduler
from sim.core.step_types import BREAKDOWN_FIELDS, StepPlan
from sim.errors import ScenarioError
from sim.memory.vllm_profile import scenario_vllm_pool
from sim.run import metrics, verdict
from sim.run.deployment import Deployment, scenario_async_scheduling, scenario_in_flight_tokens
from sim.run.modelled_step import ModelledExecutor
from sim.run.tier_metrics import tier_summary
from sim.run.tier_setup import TierFleet, build_tiers
from sim.scenario import Scenario
from sim.timing.cost_model import CostModel
from sim.timing.intervals import run_intervals
from sim.timing.knobs import host_link_bandwidth
from sim.trace.model import Trace

GiB = 1 << 30
PROGRESS_EVERY_S = 0.2


@dataclass
class Replica:
    """One data-parallel engine: its allocator, scheduler, arrival feed and clock."""

    index: int
    alloc: KVAllocator
    sched: SchedulerPolicy  # Scheduler or StaticBatchScheduler
    arrivals: list[int]  # request ids routed here, in arrival order
    times: list[float]  # their arrival times (plain lists: cheapest to walk one at a time)
    ptr: int = 0
    t: float = 0.0
    last_batch: int = 0
    steps: int = 0
    done: bool = False
    epoch: int = 0  # bumped before each wait on the clock (state may have moved): a router's view re-reads it


@dataclass
class Setup:
    """Everything derived from (trace, scenario) before the clock starts."""

    table: RequestTable
    replicas: list[Replica]
    cost: CostModel
    host_link_bw: float
    max_model_len: int
    num_blocks: int
    bytes_per_token: int
    budget_terms: dict[str, Any] | None
    rejected: int
    clamped: int
    scenario: Scenario
    deployment: Deployment  # what the scenario resolved to (sim/run/deployment.py)
    rejected_reasons: dict[str, int] = field(default_factory=dict)  # reason -> count (summary key)
    longest_prompt: int = 0  # tokens, over the whole trace: what max_model_len must exceed
    model_context: int = 0  # the model's own context window (max_position_embeddings)
    tiers: TierFleet | None = None  # KV tiers below the GPU pools (sim/run/tier_setup.py), if any


def _never_fits(table: RequestTable, reject: np.ndarray, dep: Deployment, probe: KVAllocator) -> np.ndarray:
    """Requests whose K/V could not fit an empty pool (rejected up front, as vLLM does)."""
    sc, bs, num_blocks = dep.scenario, dep.scenario.block_size, dep.num_blocks
    if dep.allocator.reserves_up_front and (dep.grouped or not sc.static_batch):
        reserve = table.prompt + table.output if sc.static_batch else table.reserve
        never = np.zeros(len(table), dtype=bool)
        for value in np.unique(reserve[~reject]).tolist():  # few distinct sizes
            if not probe.can_allocate(0, value):
                never |= reserve == value
        return never
    if sc.static_batch and not dep.grouped:
        return -(-(table.prompt + table.output) // bs) > num_blocks
    final = table.prompt + table.output - 1
    if isinstance(probe, HybridPagedAllocator):  # dep.grouped: pages per layer group
        if sc.static_batch:  # the prompt in one step
            return probe.peak_pages(final, table.prompt) > num_blocks
        # and the whole-sequence admission (its window groups capped) of its longest re-admission:
        # vLLM refuses to start unless a max_model_len request passes it
        return np.maximum(probe.peak_pages(final, sc.max_batched_tokens), probe.admission_pages(final)) > num_blocks
    return -(-final // bs) > num_blocks


def build(trace: Trace, target: Scenario | Deployment) -> Setup:
    """Lay out the replicas of a deployment for `trace` (a Scenario is resolved here, once:
    sim.run.deployment; callers that run one scenario many times pass its Deployment)."""
    dep = target if isinstance(target, Deployment) else Deployment.resolve(target)
    scenario = dep.scenario
    max_len, num_blocks, bpt = dep.max_model_len, dep.num_blocks, dep.bytes_per_token

    arrival, prompt, output = trace.arrays()
    if scenario.speedup != 1.0:  # the load dial: arrivals time-scaled, nothing else touched
        arrival = arrival / scenario.speedup
    table = RequestTable.create(arrival, prompt, output)
    over_len = table.prompt >= max_len
    reject = over_len.copy()
    over = ~reject & (table.prompt + table.output > max_len)
    table.output[over] = max_len - table.prompt[over]
    contiguous = dep.allocator.reserves_up_front
    if contiguous:
        table.reserve[:] = reserve_tokens_array(scenario.reserve, table.prompt, table.output, max_len)
    probe = dep.make_allocator(trace.prefix_block_size)
    reject |= _never_fits(table, reject, dep, probe)
    table.status[reject] = REJECTED
    reasons = {"over_max_model_len": int(over_len.sum()), "over_kv_pool": int((reject & ~over_len).sum())}

    hashes = None
    if scenario.prefix_caching and trace.has_prefix_hashes:
        column = trace.df["prefix_hashes"].to_numpy()

        def hashes(r: int) -> Any:
            return column[r]

    cfg = SchedulerConfig(
        max_num_seqs=scenario.max_num_seqs, max_batched_tokens=scenario.max_batched_tokens,
        chunked_prefill=scenario.chunked_prefill, preemption=scenario.preemption,
        swap_space_bytes=int(scenario.swap_space_gib * GiB), contiguous=contiguous)
    ids = np.flatnonzero(~reject)
    cost = dep.cost
    # The engine sees a request api_overhead_s after the client sent it; latencies count from the send.
    seen = table.arrival_s + cost.api_overhead_s if cost.api_overhead_s else table.arrival_s
    replicas = []
    for i in range(scenario.replicas):
        alloc = probe if i == 0 else dep.make_allocator(trace.prefix_block_size)
        if scenario.static_batch:
            sched: SchedulerPolicy = StaticBatchScheduler(table, alloc, scenario.static_batch, hashes)
        else:
            sched = Scheduler(table, alloc, cfg, hashes)
        mine = ids[i :: scenario.replicas]
        replicas.append(Replica(i, alloc, sched, mine.tolist(), seen[mine].tolist()))
    tiers = build_tiers(scenario, dep, len(replicas))
    if tiers is not None:
        for rep, stack in zip(replicas, tiers.stacks, strict=True):
            rep.alloc.attach_tiers(stack)  # type: ignore[attr-defined]  # paged (build_tiers checked)
            rep.sched.tiers = stack  # type: ignore[attr-defined]  # continuous batching (checked)
            swap = stack.swap_capacity_bytes()
            if swap is not None:  # the CPU tier is the swap space (its size and its host link)
                rep.sched.cfg = replace(cfg, swap_space_bytes=swap)  # type: ignore[attr-defined]
    host_bw = host_link_bandwidth(scenario, dep.gpu.host_link_bandwidth)
    return Setup(table, replicas, cost, host_bw, max_len,
                 num_blocks, bpt, dep.budget_terms, int(reject.sum()), int(over.sum()), scenario,
                 rejected_reasons=reasons, longest_prompt=int(table.prompt.max()) if len(table) else 0,
                 model_context=int(dep.spec.max_position_embeddings), deployment=dep, tiers=tiers)


def eviction_summary(text: str | None) -> dict[str, Any]:
    """Summary key `kv_eviction` (policy and the quality note) when the scenario caps KV per sequence."""
    if not text:
        return {}
    from models.eviction import QUALITY_NOTE

    return {"kv_eviction": {"policy": text, "note": QUALITY_NOTE}}


@mypyc_attr(allow_interpreted_subclasses=True)
class Simulation:
    """Runs one Setup on a SimPy clock (see the module docstring)."""

    def __init__(self, setup: Setup, *, skip_ahead: bool = True, step_limit: int | None = None,
                 progress: Callable[[float], None] | None = None) -> None:
        self.s = setup
        self.skip_ahead = skip_ahead
        self.step_limit = step_limit
        self.progress = progress
        self.env = simpy.Environment()
        self.executor: Executor = ModelledExecutor(setup.cost, setup.host_link_bw)
        last = float(setup.table.arrival_s[-1]) if len(setup.table) else 0.0
        self.rec = metrics.StepRecorder(horizon_s=max(last * 1.25, 1.0))
        self.total_steps = 0
        self.events = 0
        self.timed_events = setup.tiers is not None  # schedulers with KV loads or releases due at set times
        self._last_progress = 0.0
        self.n_done = setup.rejected
        # a caller's check as requests finish (sim/plan/early_stop.py: a probe's SLO bound), called
        # once n_done reaches check_at with n_done; it returns the next n_done to call it at, and
        # reads (and clears) finished_ids, the requests finished since. A hook, not a subclass:
        # compiled code calls it only at those counts, never per finish
        self.check: Callable[[int], int] | None = None
        self.check_at = 0
        self.finished_ids: list[int] = []
        self._group_sums: dict[str, dict[str, int]] = {}
        self._tier_occupancy: list[tuple[float, dict[str, int]]] = []  # (t, bytes per tier instance)
        self._group_samples = 0

    # --- gauges -------------------------------------------------------------------------------
    def gauges(self) -> np.ndarray:
        parts = dict.fromkeys(BREAKDOWN_FIELDS, 0)
        batch = running = waiting = cap = used = blocks = 0
        self._add_group_sample([rep.alloc.group_breakdown() for rep in self.s.replicas])
        if self.s.tiers is not None:
            self._tier_occupancy.append((self.env.now, self.s.tiers.occupancy_bytes()))
        for rep in self.s.replicas:
            bd = rep.alloc.breakdown(rep.sched.waiting_needs())
            for name in BREAKDOWN_FIELDS:
                parts[name] += getattr(bd, name)
            batch += rep.last_batch
            running += rep.sched.num_running
            waiting += rep.sched.num_waiting
            cap += rep.alloc.capacity_bytes
            used += rep.alloc.num_used_blocks
            blocks += rep.alloc.num_blocks
        return metrics.gauge_vector(batch, running, waiting, parts, cap, used, blocks)

    def _add_group_sample(self, per_replica: list[dict[str, dict[str, int]]]) -> None:
        """Add one gauge sample of the per-group KV parts, summed over replicas (several KV groups only)."""
        if not any(per_replica):
            return
        self._group_samples += 1
        for groups in per_replica:
            for label, parts in groups.items():
                acc = self._group_sums.setdefault(label, dict.fromkeys(parts, 0))
                for key, value in parts.items():
                    acc[key] += value

    def group_breakdown_mean(self) -> dict[str, dict[str, float]]:
        """Mean bytes per KV group and part over the run's gauge samples ({} for one group)."""
        n = self._group_samples or 1
        return {label: {k: v / n for k, v in parts.items()} for label, parts in self._group_sums.items()}

    # --- the public step API: the SimPy loop below and the GPU executor's wall-clock loop ---------
    def admit_arrivals(self, rep: Replica, t: float) -> None:
        """Hand the scheduler every request routed to `rep` that has arrived by `t`."""
        times, ids, add = rep.times, rep.arrivals, rep.sched.add_request
        ptr, n = rep.ptr, len(times)
        while ptr < n and times[ptr] <= t:
            add(ids[ptr])
            ptr += 1
        rep.ptr = ptr

    def next_arrival(self, rep: Replica) -> float | None:
        return rep.times[rep.ptr] if rep.ptr < len(rep.times) else None

    def _next_wake(self, rep: Replica) -> float | None:
        """When an idle replica has something to do: its next arrival, or a tier load completing."""
        t_next = self.next_arrival(rep)
        if self.timed_events:
            ev = next_event(rep.sched)
            if ev is not None and (t_next is None or ev < t_next):
                t_next = ev
        return t_next

    def _event_due(self, rep: Replica) -> bool:
        """A load completed (or a release is due) by the replica's clock: only a general step
        (`schedule`) applies it, so no decode run may be taken now."""
        if not self.timed_events:
            return False
        ev = next_event(rep.sched)
        return ev is not None and ev <= rep.t

    def record_idle(self, rep: Replica, t_wake: float) -> None:
        """`rep` sat idle until `t_wake`: its gauges held still over that time."""
        rep.last_batch = 0
        self.rec.sample_until(t_wake, self.gauges(), inclusive=False)

    def record_step(self, rep: Replica, plan: StepPlan, t_end: float, finished: list[int]) -> None:
        """Book one executed step (the scheduler's complete_step has already been applied)."""
        rep.last_batch = plan.batch_size
        rep.steps += 1
        self.total_steps += 1
        self.rec.add_counts(t_end, 1, plan.num_prefill_tokens, plan.num_decode_tokens, len(plan.preempted))
        if self.rec.needs_sample(t_end):
            self.rec.sample_until(t_end, self.gauges())
        if finished:
            self._finished(finished)

    def close(self, end: float) -> None:
        """The run is over at `end`: last metrics sample and a final progress report."""
        for rep in self.s.replicas:
            if isinstance(rep.sched, Scheduler):
                rep.sched.settle()  # the table's token counts true for whoever reads it next
        self.rec.finish(end, self.gauges())
        if self.progress is not None:
            self.progress(min(self.n_done / max(len(self.s.table), 1), 1.0))

    def result(self, trace_digest: str, wall_s: float, **overrides: Any) -> metrics.SimResult:
        """Frames and summary of the finished run; `overrides` add or replace summary keys."""
        s, reps = self.s, self.s.replicas
        requests = metrics.requests_frame(s.table)
        info: dict[str, Any] = dict(
            rejected=s.rejected, rejected_reasons=dict(s.rejected_reasons), clamped=s.clamped,
            unfinished=int(len(requests) - requests["finish_s"].notna().sum() - s.rejected),
            kv_capacity_bytes=sum(rep.alloc.capacity_bytes for rep in reps), num_blocks=s.num_blocks,
            block_size=s.scenario.block_size, bytes_per_token=s.bytes_per_token, replicas=len(reps),
            routing="round-robin", max_model_len=s.max_model_len, longest_prompt_tokens=s.longest_prompt,
            model_context_tokens=s.model_context, kv_budget_terms=s.budget_terms,
            num_steps=self.total_steps, sim_events=self.events, cost_model=s.cost.describe,
            kv_group_breakdown_mean=self.group_breakdown_mean(),
            async_scheduling=scenario_async_scheduling(s.scenario), max_in_flight_tokens=scenario_in_flight_tokens(s.scenario),
            **eviction_summary(s.scenario.kv_eviction),
            **scenario_vllm_pool(s.scenario, s.deployment.spec, s.deployment.gpu, s.deployment.max_model_len),
        )
        steps = self.rec.frame()
        info.update(verdict.load_summary(s.table.arrival_s, s.table.admitted_s, s.table.status == REJECTED,
                                          s.table.finish_s))
        sc = s.scenario
        info["binding"] = verdict.binding_of(steps, max_num_seqs=sc.max_num_seqs, max_batched_tokens=sc.max_batched_tokens,
                                             replicas=len(reps)).binding
        info.update(overrides)
        queries, hits = sum(rep.sched.prefix_queries for rep in reps), sum(rep.sched.prefix_hits for rep in reps)
        summary = metrics.summarize(
            requests, self.rec, peak_usage=max(rep.sched.peak_used_blocks for rep in reps) / s.num_blocks,
            num_preemptions=sum(rep.sched.num_preemptions for rep in reps),
            prefix_queries=queries, prefix_hits=hits, sim_wall_s=wall_s, **info)
        if s.tiers is not None:
            summary.update(tier_summary(s.tiers, requests, prefix_queries=queries, prefix_hits=hits,
                                        duration_s=summary["duration_s"], occupancy=self._tier_occupancy))
        summary.update(run_intervals(summary, s.scenario.profile))
        return metrics.SimResult(requests, steps, summary, s.scenario, trace_digest)

    def _finished(self, finished: list[int]) -> None:
        self.n_done += len(finished)
        if self.check is not None:
            self.finished_ids.extend(finished)
            if self.n_done >= self.check_at:
                self.check_at = self.check(self.n_done)
        if self.progress is not None:
            now = time.perf_counter()
            if now - self._last_progress >= PROGRESS_EVERY_S:
                self._last_progress = now
                self.progress(min(self.n_done / max(len(self.s.table), 1), 1.0))

    # --- the engine process ---------------------------------------------------------------------
    def engine(self, rep: Replica):
        """One replica: take what has arrived, then a decode run, a general step or an idle wait.
        The fleet (sim/fleet/engine.py) changes the two hooks: `_decode_run` and `_idle`."""
        env, sched, skip_ahead, limit = self.env, rep.sched, self.skip_ahead, self.step_limit
        while limit is None or self.total_steps < limit:
            times = rep.times  # (a fleet may route into the feed or replace it between steps)
            if rep.ptr < len(times) and times[rep.ptr] <= rep.t:  # admit_arrivals' own test, without the call
                self.admit_arrivals(rep, rep.t)
            work = sched.has_work
            due = self.timed_events and self._event_due(rep)  # (False whenever timed_events is)
            k = sched.decode_run_limit() if skip_ahead and work and not due else 0
            if k:
                yield from self._decode_run(rep, k)
                continue
            plan = sched.schedule(rep.t) if work else None
            if plan is None:  # idle (or blocked with nothing running)
                if (yield from self._idle(rep)):
                    continue
                break
            t_end = self.executor.execute(plan, rep.t)
            self.events += 1
            rep.epoch += 1
            yield env.timeout(t_end - rep.t)
            rep.t = t_end
            self.record_step(rep, plan, t_end, sched.complete_step(plan, t_end))
        rep.epoch += 1
        rep.done = True

    def _idle(self, rep: Replica):
        """Sleep to the replica's next arrival (or tier load); returns False at once if there is none."""
        t_next = self._next_wake(rep)
        if t_next is None:
            return False
        self.events += 1
        rep.epoch += 1
        yield self.env.timeout(max(t_next - self.env.now, 0.0))
        self.record_idle(rep, t_next)
        rep.t = max(rep.t, t_next)
        return True

    def _decode_run(self, rep: Replica, limit: int):
        """Take a decode run (at most `limit` steps, the scheduler's decode_run_limit) with one
        timeout and book it as its contract says (sim/core/decode_run.py)."""
        sched, rec = rep.sched, self.rec
        steps_left = None if self.step_limit is None else self.step_limit - self.total_steps
        horizon = rec.next_grid
        if self.timed_events:  # a load completing: the request joins the batch then
            ev = next_event(sched)
            horizon = horizon if ev is None else min(horizon, ev)
        run = decode_run.plan_run(sched, self.s.cost, rep.t, limit, next_sample=horizon,
                                  next_arrival=self.next_arrival(rep), max_steps=steps_left)
        self.events += 1
        rep.epoch += 1
        yield self.env.timeout(run.ends[-1] - rep.t)
        self.book_run(rep, run)

    def book_run(self, rep: Replica, run: decode_run.DecodeRun) -> None:
        """Book a decode run that has ended (its contract: sim/core/decode_run.py)."""
        sched, rec = rep.sched, self.rec
        ends, b = run.ends, run.batch
        k, t_end = len(ends), ends[-1]
        early = 0  # steps booked at the second-to-last end: only when it falls in another bucket
        if k > 1:
            if rep.ptr < len(rep.times) and rep.times[rep.ptr] <= ends[-2]:
                self.admit_arrivals(rep, ends[-2])  # arrivals behind a blocked queue, as stepping adds them
            early = run.early_steps(rec.bucket)
            if early:
                rec.add_counts(ends[-2], early, 0, early * b, 0)
        rep.t = t_end
        finished = sched.advance_decode(k, t_end)
        rep.last_batch = b
        rep.steps += k
        self.total_steps += k
        rec.add_counts(t_end, k - early, 0, (k - early) * b, 0)
        if rec.needs_sample(t_end):
            rec.sample_until(t_end, self.gauges())
        if finished:
            self._finished(finished)

    def run(self) -> None:
        reps = self.s.replicas
        if len(reps) == 1:  # nothing to interleave: the engine's timeouts summed in a plain loop
            if isinstance(reps[0].sched, Scheduler):  # and nobody reads the table mid-run
                reps[0].sched.lazy_computed = True
            clock = DirectClock()
            self.env = clock  # type: ignore[assignment]  # the part of simpy.Environment the engine uses
            clock.drive(self.engine(reps[0]))
        else:
            for rep in reps:
                self.env.process(self.engine(rep))
            self.env.run()
        self.close(max((rep.t for rep in reps), default=0.0))


def next_event(sched: Any) -> float | None:
    """When the scheduler's next KV load or release is due (None: none, or a scheduler without them)."""
    f = getattr(sched, "next_event_s", None)
    return f() if f is not None else None


class DirectClock:
    """The part of simpy.Environment one engine process uses (`now`, `timeout`), for a single
    replica: with one process there is nothing to order, so each timeout is taken at once.
    `now` moves exactly as SimPy's does (now + delay), so the results are the very same floats;
    it saves SimPy's event objects, heap and callbacks (~10% of a replay's CPU)."""

    def __init__(self) -> None:
        self.now = 0.0

    @staticmethod
    def timeout(delay: float) -> float:
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")  # as simpy.Timeout
        return delay

    def drive(self, process: Iterator[float]) -> None:
        """Run one engine process to its end."""
        for delay in process:
            self.now = self.now + delay


def simulate(trace: Trace, target: Scenario | Deployment, *, progress: Callable[[float], None] | None = None,
             step_limit: int | None = None, skip_ahead: bool = True) -> metrics.SimResult:
    """Replay `trace` under a scenario (or its resolved Deployment); docs/METRICS.md says what comes back."""
    wall0 = time.perf_counter()
    scenario = target.scenario if isinstance(target, Deployment) else target
    if scenario.router != "round-robin" or scenario.pd:
        what = f"pd={scenario.pd!r}" if scenario.pd else f"router={scenario.router!r}"
        raise ScenarioError(f"scenario: {what} needs the fleet's replay (sim.fleet.replay.simulate)")
    sim = Simulation(build(trace, target), skip_ahead=skip_ahead, step_limit=step_limit, progress=progress)
    sim.run()
    return sim.result(trace.digest(), time.perf_counter() - wall0)

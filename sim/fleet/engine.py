"""The fleet on one SimPy clock: a router takes each arrival at its arrival time and sees every
replica's live state (sim/fleet/live_view.py); replicas run as engine.Simulation's do.

State-free routers (round-robin, random, session affinity: sim/core/routing) decide without looking
at any replica, so their assignment is made before the clock starts and the replicas run exactly as
sim/run/engine.py runs a pre-split trace (round-robin reproduces `--replicas N` step for step).

State-dependent routers run a router process: at each arrival time it builds the views, asks the
router, appends the request to the chosen replica's feed and wakes that replica. Skip-ahead keeps
its exactness: a replica in a decode run when a request is routed to it cuts the run at the first
step that ends at or after the arrival (any prefix of a valid run is a valid run: the contract of
sim/core/decode_run.py), which is the step after which stepping would have admitted it; an idle
replica wakes at the arrival. tests/test_fleet.py checks that skip-ahead and stepping give the same
requests frame and router inputs at every arrival; the steps frame's gauges of several replicas are
sampled at one replica's step ends, so they may differ (as for `--replicas N`: tests/test_engine.py).
A cut only moves the run's end timer (`_arm`): the engine sleeps on one event per run and resumes
once, at the run's end, however often it was cut.
The replicas keep the single replica's lazy books (`Scheduler.lazy_computed`: a decode batch's
`computed` kept minus its clock, the paged allocator's tracked batch); the live views add a run's
lag (`Slot.lag`) where they read the table. P/D pools (pd.py) run eager.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from sim.core import decode_run
from sim.core.routing.registry import ROUTERS
from sim.core.routing.routers import RouterParams
from sim.core.routing.view import RoutedRequest
from sim.core.scheduler import Scheduler
from sim.fleet import fleet_metrics
from sim.fleet.live_view import UNSET, LiveView, Slot
from sim.run import metrics
from sim.run.engine import Replica, Setup, Simulation, next_event
from sim.trace.model import Trace


@mypyc_attr(allow_interpreted_subclasses=True)  # sim/fleet/pd.py's pools
class FleetSimulation(Simulation):
    """engine.Simulation with a router in the loop (module docstring)."""

    routes_the_trace: ClassVar[bool] = True  # False: arrivals come from elsewhere (P/D handoffs); feeds start empty

    def __init__(self, setup: Setup, trace: Trace, *, skip_ahead: bool = True, step_limit: int | None = None,
                 progress: Callable[[float], None] | None = None) -> None:
        super().__init__(setup, skip_ahead=skip_ahead, step_limit=step_limit, progress=progress)
        sc = setup.scenario
        kind = ROUTERS.lookup(sc.router)
        self.router_name = kind.name
        self.router = kind.make(RouterParams(len(setup.replicas), sc.seed, sc.router_kv_weight))
        self.state_free = kind.state_free
        # KV loads and releases due at set times: KV tiers (the base's test), P/D pools' remote KV
        self.timed_events = self.timed_events or not self.plain_engine_for_pre_split
        self.slots = [Slot() for _ in setup.replicas]
        self.routing_done = False
        self.request_of = _request_source(trace, setup.table.prompt)
        self.samples = fleet_metrics.ReplicaSamples(len(setup.replicas))
        if kind.name == "round-robin" and self.routes_the_trace:  # build() already split the trace round-robin
            for rep, slot in zip(setup.replicas, self.slots, strict=True):
                slot.routed = len(rep.arrivals)
                slot.routed_prompt = int(setup.table.prompt[rep.arrivals].sum())
            self.routing_done = True
            return
        self._order, self._seen = _arrival_order(setup)
        for rep in setup.replicas:  # the router fills the feeds
            rep.arrivals, rep.times = [], []
        if self.state_free and self.routes_the_trace:
            self._route_all_now()

    # --- routing --------------------------------------------------------------------------------
    def _route_all_now(self) -> None:
        reps = self.s.replicas
        for r, t in zip(self._order, self._seen, strict=True):
            self.assign(reps[self.router.choose(self.request_of(r, t), ())], r, t)
        self.routing_done = True

    def assign(self, rep: Replica, r: int, t: float) -> None:
        rep.arrivals.append(r)
        rep.times.append(t)
        slot = self.slots[rep.index]
        slot.routed += 1
        slot.routed_prompt += int(self.s.table.prompt[r])
        slot.prefilling.append(r)

    def router_process(self):
        env, reps, slots, table = self.env, self.s.replicas, self.slots, self.s.table
        views = [LiveView(rep, slots[rep.index], table, 0.0) for rep in reps]  # views read live state
        for r, t in zip(self._order, self._seen, strict=True):
            if t > env.now:
                self.events += 1
                yield env.timeout(t - env.now)
            for v in views:
                v.now = t
            rep = reps[self.router.choose(self.request_of(r, t), views)]
            self.assign(rep, r, t)
            self.wake(rep, t, arrival=True)
        self.routing_done = True
        for rep in reps:
            self.wake_idle(rep)

    def wake_idle(self, rep: Replica) -> None:
        """Wake the replica if it sleeps with nothing to do (it may have to exit now)."""
        if self.slots[rep.index].mode == "idle":
            self.wake(rep, self.env.now)

    def wake(self, rep: Replica, t: float, arrival: bool = False) -> None:
        """Something for `rep` at time t: an idle engine wakes; a decode run is cut at the first step
        ending at or after t, except for an arrival behind a blocked queue (it only queues, as the
        decode run contract's rule 5 says: book_run admits it before the run's last step). A cut
        moves the run's end timer; the engine sleeps on until the (new) end."""
        slot = self.slots[rep.index]
        if not arrival:
            rep.epoch += 1  # the caller may have changed the replica's state (a P/D release)
        if slot.mode == "run":
            if arrival and rep.sched.num_waiting:
                return
            run = slot.run
            assert run is not None
            cut = _cut(run, max(t, self.env.now))
            if cut is not run:
                slot.run = cut
                self._arm(slot, cut.ends[-1])
            return
        wake: Any = slot.wake
        if slot.mode == "idle" and not wake.triggered:
            wake.succeed()

    def _arm(self, slot: Slot, end: float) -> None:
        """(Re)set the run's end timer: the latest one armed ends the run (Slot.timer_fired)."""
        timer = self.env.timeout(end - self.env.now)
        slot.timer = timer
        timer.callbacks.append(slot.timer_fired)
        self.events += 1

    # --- the engine process of one replica: sim/run/engine.py's, with two hooks of its own ---------
    plain_engine_for_pre_split: ClassVar[bool] = True  # a pool whose replicas wait on other pools sets False

    @property
    def _plain(self) -> bool:
        """Replicas fed before the clock starts and waiting on nobody: the base engine's hooks as they are."""
        return self.state_free and self.plain_engine_for_pre_split

    def keeps_running(self, rep: Replica) -> bool:
        """Must the replica's engine stay up with nothing queued (a pool holding blocks for others)?"""
        return False

    def _idle(self, rep: Replica):
        """Sleep until the next arrival, a remote-KV event or a wake() (a request routed here or a P/D
        release); False at once when routing is over and nothing will come."""
        if self._plain:
            return (yield from super()._idle(rep))
        env, slot = self.env, self.slots[rep.index]
        t_event = self.next_arrival(rep)
        if self.timed_events:
            t_event = _earliest(next_event(rep.sched), t_event)
        if self.routing_done and t_event is None and not self.keeps_running(rep):
            return False
        slot.mode, slot.wake = "idle", env.event()
        waits = [slot.wake] if t_event is None else [slot.wake, env.timeout(max(t_event - env.now, 0.0))]
        self.events += 1
        rep.epoch += 1
        yield env.any_of(waits)
        slot.mode = ""
        self.record_idle(rep, env.now)
        rep.t = max(rep.t, env.now)
        return True

    def _decode_run(self, rep: Replica, limit: int):
        """A decode run that an arrival routed here (or a remote-KV event) cuts short: wake() moves
        its end timer, so the engine resumes once, at the run's (possibly cut) end."""
        if self._plain:
            return (yield from super()._decode_run(rep, limit))
        sched, slot = rep.sched, self.slots[rep.index]
        steps_left = None if self.step_limit is None else self.step_limit - self.total_steps
        run = decode_run.plan_run(sched, self.s.cost, rep.t, limit, next_sample=self.rec.next_grid,
                                  next_arrival=self.next_arrival(rep), max_steps=steps_left)
        t_event = next_event(sched) if self.timed_events else None
        if t_event is not None:
            run = _cut(run, t_event)
        slot.run, slot.run_ids, slot.mode, slot.headroom = run, _running_ids(sched), "run", UNSET
        slot.lag = _computed_lag(sched)
        slot.done = done = self.env.event()
        self._arm(slot, run.ends[-1])
        rep.epoch += 1
        yield done
        run = slot.run
        slot.run = slot.run_ids = slot.timer = None
        slot.mode = ""
        self.book_run(rep, run)
        return None

    # --- per-replica books (fleet_metrics) -------------------------------------------------------
    def gauges(self) -> Any:
        self.samples.add(self.env.now, self.s.replicas)
        return super().gauges()

    def record_idle(self, rep: Replica, t_wake: float) -> None:
        self.samples.idle_s[rep.index] += max(t_wake - rep.t, 0.0)
        super().record_idle(rep, t_wake)

    def run(self) -> None:
        for rep in self.s.replicas:  # the single replica's lazy books: the views add a run's lag (Slot.lag)
            if isinstance(rep.sched, Scheduler):
                rep.sched.lazy_computed = True
        if self.state_free:
            super().run()
            return
        # the router process beside the engines, on SimPy's clock even for one replica (the base's
        # DirectClock drives a lone engine and nothing else)
        reps, env = self.s.replicas, self.env
        env.process(self.router_process())
        for rep in reps:
            env.process(self.engine(rep))
        env.run()
        self.close(max((rep.t for rep in reps), default=0.0))

    def result(self, trace_digest: str, wall_s: float, **overrides: Any) -> metrics.SimResult:
        res = super().result(trace_digest, wall_s, **{"routing": self.router_name, **overrides})
        res.summary.update(fleet_metrics.fleet_summary(self, res))
        return res


def _running_ids(sched: Any) -> Any:
    """The running batch's ids (both schedulers keep them; the static batch as `batch`)."""
    f = getattr(sched, "running_ids", None)
    return f() if f is not None else getattr(sched, "batch", None)


def _computed_lag(sched: Any) -> int:
    """What the table's `computed` of the running batch lacks (a lazy decode batch's clock; 0 else)."""
    if not isinstance(sched, Scheduler) or not sched.lazy_computed:
        return 0
    batch = sched.decode_batch()
    return batch.offset() if batch is not None else 0


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _cut(run: decode_run.DecodeRun, t: float) -> decode_run.DecodeRun:
    """The run up to the first step that ends at or after t (all of it if none does)."""
    j = bisect_left(run.ends, t)
    return run if j >= len(run.ends) - 1 else decode_run.DecodeRun(run.batch, run.ends[: j + 1])


def _arrival_order(setup: Setup) -> tuple[list[int], list[float]]:
    """Every admitted request id in the order the engine sees them (seen time, then id)."""
    ids = sorted(r for rep in setup.replicas for r in rep.arrivals)
    seen = {r: t for rep in setup.replicas for r, t in zip(rep.arrivals, rep.times, strict=True)}
    ids.sort(key=lambda r: seen[r])  # stable: equal times keep id order
    return ids, [seen[r] for r in ids]


def _request_source(trace: Trace, prompt: Any) -> Callable[[int, float], RoutedRequest]:
    df = trace.df
    hashes = df["prefix_hashes"].to_numpy() if trace.has_prefix_hashes else None
    session = df["session_id"].to_numpy() if "session_id" in df.columns else None

    def request(r: int, t: float) -> RoutedRequest:
        s = session[r] if session is not None else None
        return RoutedRequest(r, t, int(prompt[r]), hashes[r] if hashes is not None else None,
                             str(s) if s is not None and s == s and str(s) else None)

    return request

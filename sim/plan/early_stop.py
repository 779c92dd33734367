"""A search probe that already misses its SLO stops early, on a bound that is exact, not a guess.

A latency objective is a statistic over the finished requests' finite values (sim.run.metrics:
np.percentile, linear interpolation; or the mean). While a run is under way, the values of the
requests that have finished are final. If m of them already exceed the limit, the statistic over
the run's end set of N' values (N' at most N, the requests that can yield a value) must exceed it
when:
- pQ (q = Q / 100): linear interpolation reads sorted values at floor(h) and ceil(h), h = (N' - 1) q;
  both exceed the limit when floor(h) >= N' - m. N' - floor((N' - 1) q) never falls as N' grows,
  so checking at N' = N covers every N' the run can end with: m >= N - floor((N - 1) q).
- mean: latencies are >= 0, so mean >= (sum of the finished values) / N' >= that sum / N > limit.
The probe then fails whatever the rest of the run does, so the search's pass/fail answers, and its
brackets and rates, are those of the full runs. Goodput is not bounded here (its probes run out).

The check runs every ~1/200 of the requests finishing, on running totals (MissTally: the requests
finished since the last check); certain_misses, over every value, confirms a stop and words it.
"""

from __future__ import annotations

import math
import time

import numpy as np

from sim.core.request import REJECTED, RequestTable
from sim.fleet.engine import FleetSimulation
from sim.fleet.replay import simulate
from sim.plan.slo import Slo
from sim.run.deployment import Deployment
from sim.run.engine import Simulation, build
from sim.run.metrics import SimResult
from sim.trace import Trace

CHECKS_PER_RUN = 200
QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


class ProbeMissed(Exception):
    """Raised from inside the replay when the SLO can no longer be met (the reason, one phrase)."""


def _values(table: RequestTable, metric: str, done: np.ndarray) -> np.ndarray:
    """The metric's values of the finished requests (as sim.run.metrics.requests_frame has them)."""
    if metric == "ttft":
        return table.first_token_s[done] - table.arrival_s[done]
    if metric == "e2e":
        return table.finish_s[done] - table.arrival_s[done]
    if metric == "queue":
        return table.admitted_s[done] - table.arrival_s[done]
    out = table.output[done]
    multi = out > 1
    return (table.finish_s[done][multi] - table.first_token_s[done][multi]) / (out[multi] - 1)


def certain_misses(slo: Slo, table: RequestTable) -> str | None:
    """The first objective the run must miss however it ends, as a phrase; None while each can still hold."""
    done = np.isfinite(table.finish_s)
    can_finish = table.status != REJECTED
    for metric, stat, limit in slo.targets:
        n = int(np.count_nonzero(can_finish & (table.output > 1))) if metric == "tpot" else int(np.count_nonzero(can_finish))
        v = _values(table, metric, done)
        v = v[np.isfinite(v)]
        if n == 0 or v.size == 0:
            continue
        if stat == "mean":
            if float(v.sum()) / n > limit:
                return f"{metric}_mean > {limit:g} s (stopped early: finished requests alone push it over)"
            continue
        over = int(np.count_nonzero(v > limit))
        if over >= n - math.floor((n - 1) * QUANTILES[stat]):
            return (f"{metric}_{stat} > {limit:g} s (stopped early: {over:,} of {n:,} requests "
                    f"already over, enough to fix the {stat})")
    return None


class MissTally:
    """certain_misses' test kept as running totals: the values of finished requests are final, so
    each check reads only the requests finished since the last one (the engine's finished_ids) and
    counts N afresh, instead of every value again: O(new) per check but for N's count. A quantile's
    count of values over the limit is exact; a mean's running sum may differ from the one-pass sum
    in the last bits, so a stop is always confirmed by certain_misses."""

    def __init__(self, slo: Slo, table: RequestTable) -> None:
        self.slo = slo
        self.multi = table.output > 1  # outputs are fixed before the run: requests with a TPOT
        self.num_multi = int(np.count_nonzero(self.multi))
        self.values = [0] * len(slo.targets)  # finite values so far, per objective
        self.over = [0] * len(slo.targets)  # of them over the limit (quantiles)
        self.sums = [0.0] * len(slo.targets)  # their sum (means)

    def may_stop(self, table: RequestTable, new: np.ndarray) -> bool:
        """`new`: the ids of the requests finished since the last call."""
        rejected = np.flatnonzero(table.status == REJECTED)  # N: the requests that can still yield a value
        n_all = len(table) - rejected.size
        n_multi = self.num_multi - int(np.count_nonzero(self.multi[rejected]))
        for i, (metric, stat, limit) in enumerate(self.slo.targets):
            v = _values(table, metric, new)
            v = v[np.isfinite(v)]
            self.values[i] += v.size
            if stat == "mean":
                self.sums[i] += float(v.sum())
            else:
                self.over[i] += int(np.count_nonzero(v > limit))
            n = n_multi if metric == "tpot" else n_all
            if n == 0 or self.values[i] == 0:
                continue
            if stat == "mean":
                if self.sums[i] / n > limit * (1 - 1e-9):
                    return True
            elif self.over[i] >= n - math.floor((n - 1) * QUANTILES[stat]):
                return True
        return False


class StopCheck:
    """The engine's check hook (Simulation.check): every ~1/CHECKS_PER_RUN of the requests
    finishing, the bound on running totals; raises ProbeMissed once the SLO must miss (module doc)."""

    def __init__(self, sim: Simulation, slo: Slo) -> None:
        self.sim, self.slo = sim, slo
        self.every = max(1, len(sim.s.table) // CHECKS_PER_RUN)
        self.tally = MissTally(slo, sim.s.table)

    def __call__(self, done: int) -> int:
        table, ids = self.sim.s.table, self.sim.finished_ids
        new = np.array(ids, dtype=np.intp)
        ids.clear()
        if self.tally.may_stop(table, new):
            reason = certain_misses(self.slo, table)
            if reason is not None:
                raise ProbeMissed(reason)
        return done + self.every


def simulate_or_stop(trace: Trace, dep: Deployment, slo: Slo) -> SimResult:
    """sim.fleet.replay.simulate's replay (the same result when it runs out), raising ProbeMissed
    as soon as the SLO can no longer be met."""
    if dep.scenario.pd:  # two pools: no early stop (the replay runs out)
        return simulate(trace, dep)
    wall0 = time.perf_counter()
    setup = build(trace, dep)
    sim: Simulation
    if dep.scenario.replicas == 1 and dep.scenario.router == "round-robin":
        sim = Simulation(setup)
    else:
        sim = FleetSimulation(setup, trace)
    check = StopCheck(sim, slo)
    sim.check, sim.check_at = check, check.every
    sim.run()
    return sim.result(trace.digest(), time.perf_counter() - wall0)

"""The sustainable rate's 90% interval by replay, not by first order.

A run's intervals (sim/timing/intervals.py) bound each latency by exp([lo, hi]) of a log error. The
rate an SLO allows does not scale like that: the limits are absolute seconds, so an engine 10%
slower can lose far more than 10% of the rate where an objective sits near its limit on a flat curve
(TPOT p99 under a memory-bound decode). So the interval is the rate the search's own bracket finds
for the same configuration with every step time scaled by k = exp(hi) (pessimistic) and exp(lo)
(optimistic).

One factor for every step, from the E2E log bounds: a replay has one engine, whose steps cannot be
slow by the TTFT factor for one objective and by the TPOT factor for another. E2E is the metric whose
error is closest to the step-time error itself: a request's E2E is the time-weighted sum of the
prefill and decode steps it sees; TPOT sees decode steps only, and TTFT's bound carries the queueing
error the replay reproduces on its own (taking it would count that amplification twice). It is also
the bound the first-order interval uses, so the two differ only by what the replay adds.

Scaled step times by the exact time-scaling identity, not by a second knob in the step-time hot
path: a system whose step times are all x k, fed arrivals x k, runs the very same schedule with every
time x k (no policy reads the clock: the scheduler, the allocators and the routers act on the order
of events and on token counts). So "passes S at level L with steps x k" <=> "the original passes S / k
(every limit divided by k) at level k L", for a trace (level = speed-up) and a synthetic spec alike
(its gaps are the seed's draws x 1 / rate). The API term is absolute, so the original runs it / k
(then x k: the same seconds as the scaled system's). Time that is neither a step nor the API term
breaks the identity: KV moved over links (P/D transfers, KV tier loads and stores) and swap over the
host link (`identity_blockers`); those rows keep the first-order bound, labelled. The identity holds
in the engine: tests/test_rate_interval.py runs a calibration profile with every coefficient x k
(the memory and compute scales of sim/fidelity/calibrate.py, both = k: every step time x k) and finds
its latencies k x the original's at k x the level.

Cost: two brackets of probes per configuration (a few runs each: each starts at the answer's level,
where the first order says the scaled system's edge is). The search's own full run at that level is
judged again under S / k by both ends instead of being run again (`shareable`; a row carries the part
of it the SLO reads, `slo_summary`), so the two ends share nothing else and, under "best", run side by
side on the search's pool (`EndJob`, sim.plan.executors), one end per worker: the interval's wall
time is the slower end's, not the sum. Without a pool (one worker, Ray, or "all" in a worker) they run
one after the other, the high end judging the low end's first run again where the search's is not
given. `SearchOptions.rate_intervals` picks which rows: "best" (default; the best row by the search's
criterion, after the search), "all" or "first-order". Every row says which method made its interval
(`rate_interval_source`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sim.plan.bracket import largest_passing
from sim.plan.guided import guided_largest_passing
from sim.plan.slo import Slo
from sim.run.deployment import Deployment
from sim.scenario import Scenario
from sim.timing.intervals import rate_bounds

RESIMULATED = "re-simulated"
FIRST_ORDER = "first order"
MODES = ("best", "all", "first-order")
FACTOR_METRIC = "e2e_s"
# sim.plan.config_search.probe(workload, dep, level, slo, early_stop) -> Probe
Probing = Callable[[Any, Deployment, float, Slo, bool], Any]
MAX_SPAN = 16.0  # the scaled bracket stays within level / 16 .. level x 16: past that the end is "beyond"


class _Beyond(Exception):
    """The scaled bracket asked for a level past MAX_SPAN of the answer's (the end is open)."""


@dataclass(frozen=True)
class RateInterval:
    """A row's `max_rate_interval` and how it was made."""

    bounds: list[float] | None
    source: str | None  # RESIMULATED, FIRST_ORDER, None (no interval)
    note: str
    step_factors: tuple[float, float] | None = None  # (optimistic, pessimistic) step-time factors
    probes: int = 0
    cpu_s: float = 0.0

    def fields(self) -> dict[str, Any]:
        """The row keys (module doc)."""
        return {"max_rate_interval": self.bounds, "rate_interval_source": self.source,
                "rate_interval_note": self.note,
                "rate_interval_step_factors": list(self.step_factors) if self.step_factors else None,
                "rate_interval_probes": self.probes, "rate_interval_cpu_s": round(self.cpu_s, 3)}


def step_factors(interval_method: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """(exp(lo), exp(hi)) of the E2E log bounds: the step-time factors of the two ends (module doc)."""
    bounds = (interval_method or {}).get("log_bounds") if isinstance(interval_method, Mapping) else None
    if not isinstance(bounds, Mapping) or FACTOR_METRIC not in bounds:
        return None
    lo, hi = float(bounds[FACTOR_METRIC][0]), float(bounds[FACTOR_METRIC][1])
    return (math.exp(lo), math.exp(hi)) if math.isfinite(lo) and math.isfinite(hi) and lo <= hi else None


def identity_blockers(scenario: Scenario) -> list[str]:
    """Times in the scenario that are not step times or the API term (module doc): where the replay
    at a scaled level would not be the scaled system, so the interval stays first order."""
    out = []
    if scenario.pd:
        out.append("P/D moves KV over a link")
    if scenario.cpu_tier_gib or scenario.nvme_tier_gib or scenario.remote_tier_gib:
        out.append("KV tiers load and store over links")
    if scenario.preemption == "swap" and scenario.swap_space_gib > 0:
        out.append("swap moves KV over the host link")
    return out


def scaled_slo(slo: Slo, k: float) -> Slo:
    """Every latency limit divided by k (goodput's fraction unchanged: per request, the same limits)."""
    return replace(slo, targets=tuple((m, s, limit / k) for m, s, limit in slo.targets))


def scaled_deployment(dep: Deployment, k: float) -> Deployment:
    """The deployment whose API term is / k (the identity's original system, module doc)."""
    api = dep.cost.api_overhead_s
    return dep if not api else replace(dep, cost=replace(dep.cost, api_overhead_s=api / k))


def full_margin(p: Any, slo: Slo) -> float | None:
    """The tightest objective's value / limit of a probe that ran out (pass or miss); None if stopped
    early or with a goodput part. The answer's own level runs out, so a miss there still says how far."""
    if p.stopped or slo.goodput is not None:
        return None
    ratios = [float(v) / limit for m, s, limit in slo.targets
              if (v := (p.summary.get(f"{m}_s") or {}).get(s)) is not None]
    return max(ratios) if len(ratios) == len(slo.targets) and ratios else None


def slo_summary(summary: Mapping[str, Any], slo: Slo) -> dict[str, Any]:
    """The part of a run's summary that `slo` reads (completed and each objective's statistic): what a
    row keeps of its answer's run so that the interval's ends can judge it again (`AnswerRun`)."""
    out: dict[str, Any] = {"completed": summary.get("completed", 0)}
    for metric, stat, _ in slo.targets:
        value = (summary.get(f"{metric}_s") or {}).get(stat)
        out.setdefault(f"{metric}_s", {})[stat] = None if value is None else float(value)
    return out


@dataclass(frozen=True)
class AnswerRun:
    """The search's full run at the answer's level as a row keeps it (`slo_summary`): enough to be
    judged under S / k (`violations`, `full_margin`) as a sim.plan.config_search.Probe would be."""

    level: float
    summary: dict[str, Any]
    violations: tuple[str, ...] = ()
    stopped: bool = False

    @property
    def met(self) -> bool:
        return not self.violations


@dataclass(frozen=True)
class ScaledEdge:
    """Where the system with steps x k stops meeting the SLO, as a level of the workload."""

    level: float | None  # the largest level met (None: not even level / MAX_SPAN or the floor)
    probes: int  # runs made (a run shared from elsewhere not counted)
    beyond: bool = False  # met up to level x MAX_SPAN, never missed: `level` is a lower bound
    at_level: Any = None  # the full run at the answer's level (sim.plan.config_search.Probe), to share
    cpu_s: float = 0.0  # process CPU of the runs, where they ran (`run_end`)


@dataclass(frozen=True)
class EndJob:
    """One end of a row's interval as a task for a worker (sim.plan.executors): the scenario (resolved
    there), the step-time factor, the answer's level and its shared run (or None)."""

    scenario: Scenario
    k: float
    level: float
    at: Any = None


# runs the ends' jobs, in any order of execution, answering in the jobs' order (sim.plan.executors)
Ends = Callable[[list[EndJob]], list[ScaledEdge]]


def run_end(workload: Any, options: Any, job: EndJob, probe: Probing) -> ScaledEdge:
    """One end (`scaled_max_level`) where it runs, with the CPU it took there."""
    start = time.process_time()
    edge = scaled_max_level(workload, Deployment.resolve(job.scenario), options, job.k, job.level, probe, job.at)
    return replace(edge, at_level=None, cpu_s=time.process_time() - start)  # the other end has its own


def shareable(at: Any, dep: Deployment, slo: Slo) -> bool:
    """A full run at the answer's level serves every k when nothing in it depends on k: no API term (it
    runs / k) and no goodput part (judged per request, which a probe does not keep)."""
    return at is not None and not at.stopped and not dep.cost.api_overhead_s and slo.goodput is None


def scaled_max_level(workload: Any, dep: Deployment, options: Any, k: float, level: float, probe: Probing,
                     at: Any = None) -> ScaledEdge:
    """The largest level at which the system with steps x k meets the SLO: the original's largest
    level meeting S / k, / k (module doc). The bracket starts at k x (the first order's answer,
    level / k) = level, with the search's tolerance, and stays within MAX_SPAN of it. `probe` is the
    search's own (sim.plan.config_search.probe: one run at one level, passed in: that module calls this one).
    `at`: a full run of the original at `level` (the search's answer, or the other end's first run),
    judged again under S / k instead of running it again where `shareable`."""
    slo_k, dep_k = scaled_slo(options.slo, k), scaled_deployment(dep, k)
    ran: list[tuple[float, bool]] = []
    first: list[Any] = []

    def run(lv: float) -> Any:
        if lv > level * MAX_SPAN:
            raise _Beyond
        if not first and lv == level and shareable(at, dep, options.slo):
            p = replace(at, violations=tuple(slo_k.violations(at.summary)))
        else:
            early = options.early_stop and bool(first)  # the first runs out: its margin places the next
            p = probe(workload, dep_k, lv, slo_k, early)
            ran.append((lv, p.met))
        if not first:
            first.append(p)
        return p

    floor = max(workload.min_level, level / MAX_SPAN)
    try:
        if options.guided:
            found = guided_largest_passing(run, lambda p: p.met, lambda p: full_margin(p, slo_k), level,
                                           options.tolerance, floor, near=True)
        else:
            found = largest_passing(run, lambda p: p.met, level, options.tolerance, floor, near=True)
    except _Beyond:
        met = [lv for lv, ok in ran if ok] + ([level] if first and first[0].met else [])
        return ScaledEdge(max(met) / k, len(ran), True, first[0] if first else None)
    return ScaledEdge(found.lo / k if found.lo is not None else None, len(ran), found.capped,
                      first[0] if first else None)


def resimulated(workload: Any, dep: Deployment, options: Any, level: float, rate: float,
                interval_method: Mapping[str, Any] | None, probe: Probing, at: Any = None,
                ends: Ends | None = None) -> RateInterval:
    """The row's interval by replay (module doc), or the first-order one, labelled, where the
    identity does not hold or there is no method. `at`: the search's full run at `level`, if kept.
    `ends`: runs the two ends side by side (a pool's workers); None: one after the other, here."""
    factors = step_factors(interval_method)
    blockers = identity_blockers(dep.scenario)
    if factors is None or blockers or not rate > 0:
        why = "; ".join(blockers) if blockers else "no interval method"
        return first_order(rate, interval_method, f"not re-simulated: {why}")
    if ends is not None:  # the slower steps (k = exp(hi)) give the low end
        low, high = ends([EndJob(dep.scenario, factors[1], level, at), EndJob(dep.scenario, factors[0], level, at)])
        cpu_s = low.cpu_s + high.cpu_s
    else:
        start = time.process_time()
        low = scaled_max_level(workload, dep, options, factors[1], level, probe, at)
        high = scaled_max_level(workload, dep, options, factors[0], level, probe, at or low.at_level)
        cpu_s = time.process_time() - start
    probes = low.probes + high.probes
    bounds = [workload.rate(e.level) if e.level is not None else 0.0 for e in (low, high)]
    note = (f"step times x{factors[1]:.3f} and x{factors[0]:.3f} (E2E 90% log bounds), the search's bracket "
            f"re-run for each ({probes} runs)")
    if low.level is None:
        note += f"; the slower engine misses even at 1/{MAX_SPAN:g} of the rate"
    if high.beyond:
        note += f"; the faster engine never missed up to x{MAX_SPAN:g} (the high end is at least this)"
    return RateInterval(bounds, RESIMULATED, note, factors, probes, cpu_s)


def first_order(rate: float, interval_method: Mapping[str, Any] | None, why: str) -> RateInterval:
    """sim.timing.intervals.rate_bounds (the rate / the step-time factor), labelled as such."""
    bounds = rate_bounds(rate, interval_method, FACTOR_METRIC)
    if bounds is None:
        return RateInterval(None, None, "no interval")
    return RateInterval(bounds, FIRST_ORDER, f"the rate / the step-time factor (queueing near the limit not "
                        f"re-simulated): {why}", step_factors(interval_method))


def row_fields(workload: Any, dep: Deployment, options: Any, level: float | None, rate: float,
               interval_method: Mapping[str, Any] | None, probe: Probing, at: Any = None) -> dict[str, Any]:
    """The interval keys of one searched row (config_search's hook): by replay under "all", else first
    order, labelled ("best" re-simulates the best row after the search: `refine_best`)."""
    mode = getattr(options, "rate_intervals", "best")
    if not rate > 0 or level is None:
        return RateInterval(None, None, "no rate met the SLO").fields()
    if mode == "all":
        return resimulated(workload, dep, options, level, rate, interval_method, probe, at).fields()
    why = ("only the best row is re-simulated (sim search --rate-intervals all: every row)" if mode == "best"
           else "--rate-intervals first-order")
    return first_order(rate, interval_method, why).fields()


def best_rows(rows: list[dict[str, Any]], target_rate: float | None, by: str = "cost") -> list[int]:
    """The row that is best by `by` (sim.plan.rank.CRITERIA), as a list (none when nothing fits). One
    row: a second criterion's best doubled the cost (measured, docs/PLAN.md); the page's other
    criteria show their best row's first-order interval, labelled."""
    from sim.plan.rank import best_row

    best = best_row(rows, target_rate, by)
    return [] if best is None else [int(best["row"])]


def refine_best(rows: list[dict[str, Any]], workload: Any, options: Any, probe: Probing, by: str = "cost",
                ends: Ends | None = None) -> None:
    """Under "best": the best row's interval by replay (module doc), in place, after the search; the
    row's answer run (`slo_summary`) is judged again by both ends, which `ends` runs side by side."""
    from sim.timing.intervals import load_profile_quietly, method_for

    if getattr(options, "rate_intervals", "best") != "best":
        return
    for i in best_rows(rows, options.target_rate, by):
        r = rows[i]
        if r.get("rate_interval_source") == RESIMULATED or not r.get("slo_met_at_max") or r.get("level") is None:
            continue
        if r.get("capped"):  # met at every level tried: the rate is a lower bound, its interval too
            r["rate_interval_note"] = ("not re-simulated: the SLO was met at every rate tried, so the rate is a lower "
                                       "bound; " + str(r.get("rate_interval_note") or ""))
            continue
        scenario = Scenario.from_dict(r["scenario"])
        dep = Deployment.resolve(scenario)
        method = method_for(dep.cost.describe, load_profile_quietly(scenario.profile)).describe()
        level = float(r["level"])
        at = AnswerRun(level, dict(r["slo_summary"])) if r.get("slo_summary") else None
        r.update(resimulated(workload, dep, options, level, float(r["max_rate_per_s"]), method, probe, at,
                             ends).fields())

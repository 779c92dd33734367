"""One configuration's search under an SLO: the largest arrival rate whose run meets every
objective, what that rate yields per GPU and per user, what it costs, and what binds there.

`search_config` resolves the scenario once (sim.run.deployment) and probes it (sim.plan.bracket),
each probe a full `simulate` run of the workload at one load level with the scenario's seed. The
sweep over many configurations (sim.plan.search) hands them to an executor (sim.plan.executors),
which calls `search_config` in its worker: this module is what both import. Figures (docs/PLAN.md):
- max_rate_per_s: the workload's mean arrival rate at the largest passing level;
- tok_s_per_gpu = max_rate_per_s x output tokens per completed request / (tp x replicas);
- tok_s_per_user = 1 / mean TPOT of that run (the decode speed one user sees);
- gpus_for_target = ceil(target_rate / max_rate_per_s) x tp x replicas (copies scale linearly);
- cost_per_mtok = USD per GPU-hour / (tok_s_per_gpu x 3600) x 1e6;
- binding: sim.run.verdict at the max rate (or at the lowest rate probed if none passed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from models.spec import SpecError
from sim.errors import DoesNotFit
from sim.fleet.layout import fleet_gpus, pools_of
from sim.fleet.replay import simulate
from sim.memory.vllm_profile import scenario_vllm_pool
from sim.plan.bracket import largest_passing
from sim.plan.early_stop import ProbeMissed, simulate_or_stop
from sim.plan.guided import guided_largest_passing
from sim.plan.prices import cost_per_mtok, price_for
from sim.plan.rate_interval import row_fields as rate_interval_fields
from sim.plan.rate_interval import slo_summary
from sim.plan.slo import Slo
from sim.plan.tier_prices import tier_usd_per_gpu_hour
from sim.plan.workload import Workload
from sim.run.deployment import Deployment
from sim.run.verdict import binding_detail
from sim.scenario import Scenario

ALWAYS_SHOWN = ("model", "gpu", "tp", "replicas", "kv_dtype", "allocator", "max_num_seqs")


@dataclass(frozen=True)
class SearchOptions:
    """What every configuration's search shares (small: it travels with every task)."""

    slo: Slo
    tolerance: float = 0.02
    target_rate: float | None = None
    prices: dict[str, float] = field(default_factory=dict)  # GPU -> USD/hour overrides
    shown: tuple[str, ...] = ALWAYS_SHOWN  # scenario fields copied into each row
    early_stop: bool = True  # a probe stops once it must miss (sim.plan.early_stop); False: every probe runs out
    reuse: bool = True  # a configuration's search starts near the previous one's answer (sim.plan.executors chains)
    guided: bool = True  # the next level read off the probes' margins (sim.plan.guided); False: bisection
    rate_intervals: str = "best"  # which rows' rate intervals are re-simulated (sim.plan.rate_interval.MODES)


@dataclass(frozen=True)
class Probe:
    """One run at one load level: did it meet the SLO, and the figures a row needs."""

    level: float
    rate: float
    violations: tuple[str, ...]
    binding: str
    binding_shares: dict[str, float]
    summary: dict[str, Any]
    stopped: bool = False  # stopped early: a certain miss, its summary empty (never a row's figures)

    @property
    def met(self) -> bool:
        return not self.violations

    def margin(self, slo: Slo) -> float | None:
        """The tightest latency objective's value / limit (<= 1: all met), for a probe that met the SLO;
        None for a miss (it may have stopped early: read only from passes, the search probes the same
        levels with and without early stop) or an SLO with a goodput part (not read off the latencies)."""
        if not self.met or slo.goodput is not None:
            return None
        ratios = []
        for metric, stat, limit in slo.targets:
            value = (self.summary.get(f"{metric}_s") or {}).get(stat)
            if value is None:
                return None
            ratios.append(float(value) / limit)
        return max(ratios, default=None)


def probe(workload: Workload, dep: Deployment, level: float, slo: Slo, early_stop: bool = False) -> Probe:
    """One run of the workload at `level` on the resolved deployment (`early_stop`: it may stop as
    soon as it must miss the SLO, sim.plan.early_stop)."""
    trace = workload.at(level)
    if early_stop:
        try:
            result = simulate_or_stop(trace, dep, slo)
        except ProbeMissed as missed:
            return Probe(level, workload.rate(level), (str(missed),), "", {}, {}, stopped=True)
    else:
        result = simulate(trace, dep)
    detail = binding_detail(result)
    s = result.summary
    keep = ("requests", "completed", "rejected", "output_tokens", "num_preemptions", "ttft_s", "tpot_s", "e2e_s",
            "queue_s", "kv_cache_usage_perc", "mean_batch_size", "mean_num_waiting", "duration_s", "interval_method")
    return Probe(level, workload.rate(level), tuple(slo.violations(s, result.requests)), detail.binding,
                 detail.shares, {k: s.get(k) for k in keep})


def search_config(workload: Workload, scenario: Scenario, options: SearchOptions,
                  near: float | None = None) -> dict[str, Any]:
    """One configuration's row (module doc); a deployment that cannot hold the model and any KV
    (weights too large for tp x GPU memory) is a row with binding "does_not_fit", not an error.
    `near`: a level close to the answer (a similar configuration's): the bracket starts there with
    small steps (sim.plan.bracket); else at the workload's start level, doubling."""
    try:
        dep = Deployment.resolve(_runnable(scenario))  # once: every probe runs this deployment
    except (SpecError, DoesNotFit) as exc:
        return unfit_row(scenario, options, str(exc))
    refusal = vllm_refusal(dep)
    if refusal and scenario.kv_pool == "vllm":  # a P/D pool at another TP than the one resolved here
        return unfit_row(scenario, options, f"scenario: kv_pool='vllm': {refusal}")
    run = lambda level: probe(workload, dep, level, options.slo, options.early_stop)  # noqa: E731
    start, floor = near or workload.start_level, workload.min_level
    if options.guided:
        found = guided_largest_passing(run, lambda p: p.met, lambda p: p.margin(options.slo), start,
                                       options.tolerance, floor, near=near is not None)
    else:
        found = largest_passing(run, lambda p: p.met, start, options.tolerance, floor=floor, near=near is not None)
    at = found.lo_probe if found.lo_probe is not None else found.hi_probe
    assert at is not None
    if at.stopped:  # no level passed: the row shows the lowest level's full run
        at = probe(workload, dep, at.level, options.slo)
    gpus = fleet_gpus(scenario)
    met = found.lo_probe is not None
    rate = at.rate if met else 0.0
    s = at.summary
    per_request = s["output_tokens"] / s["completed"] if s["completed"] else 0.0
    tok_s_per_gpu = rate * per_request / gpus
    tpot = (s["tpot_s"] or {}).get("mean")
    price = price_for(scenario.gpu, options.prices)
    tier_price = tier_usd_per_gpu_hour(scenario, gpus)  # KV tiers' DRAM and NVMe (sim/plan/tier_prices.py)
    if price is not None and tier_price:
        price += tier_price
    row: dict[str, Any] = {name: getattr(scenario, name) for name in options.shown}
    row.update({
        "gpus": gpus,
        "max_rate_per_s": rate,
        **rate_interval_fields(workload, dep, options, found.lo, rate, s.get("interval_method"), probe, at),  # sim.plan.rate_interval
        "interval_method": (s.get("interval_method") or {}).get("method"),
        "level": found.lo,
        "workload": workload.describe(found.lo) if met and found.lo is not None else None,
        "tok_s_per_gpu": tok_s_per_gpu,
        "tok_s_per_user": 1.0 / tpot if met and tpot else None,
        "gpus_for_target": gpus_for_target(options.target_rate, rate, gpus),
        "usd_per_gpu_hour": price,
        **({"tier_usd_per_gpu_hour": tier_price} if tier_price else {}),
        "cost_per_mtok": cost_per_mtok(price, tok_s_per_gpu) if met else None,
        "binding": at.binding,
        "binding_shares": at.binding_shares,
        "slo_met_at_max": met,
        "capped": found.capped,
        "ttft_p99_s": (s["ttft_s"] or {}).get("p99"),
        "tpot_p99_s": (s["tpot_s"] or {}).get("p99"),
        "e2e_p99_s": (s["e2e_s"] or {}).get("p99"),
        "num_preemptions": s["num_preemptions"],
        "kv_usage_peak": (s["kv_cache_usage_perc"] or {}).get("peak"),
        "missed_above": list(found.hi_probe.violations) if found.hi_probe is not None else [],
        "slo_summary": slo_summary(s, options.slo) if met else None,  # what the SLO read at the max rate
        "probes": len(found.probes),
        "step_time_source": dep.cost.source,
        "vllm_would_not_start": refusal,
        "scenario": scenario.to_dict(),
    })
    return row


def _runnable(scenario: Scenario) -> Scenario:
    """A P/D scenario whose pools both name their TP runs no replica at `tp` (sim/fleet/layout.py
    pools_of): resolve it at the decode pool's, so a `tp` too small for the weights is not a
    does_not_fit row for a fleet that never uses it."""
    if scenario.pd and scenario.prefill_tp and scenario.decode_tp and scenario.tp != scenario.decode_tp:
        return scenario.replace(tp=scenario.decode_tp)
    return scenario


def vllm_refusal(dep: Deployment) -> str | None:
    """vLLM's start-up error when it would refuse any pool of this fleet (sim/memory/vllm_startup_check.py:
    a replica's KV cannot hold one request at max_model_len; each P/D pool at its own TP), else None."""
    pools = pools_of(dep.scenario)
    for pool in pools:
        sc = dep.scenario if pool.tp == dep.scenario.tp else dep.scenario.replace(tp=pool.tp)
        startup = scenario_vllm_pool(sc, dep.spec, dep.gpu, dep.max_model_len).get("vllm_startup") or {}
        if startup.get("starts") is False:
            return str(startup["message"]) if len(pools) == 1 else f"the {pool.role} pool: {startup['message']}"
    return None


def unfit_row(scenario: Scenario, options: SearchOptions, why: str) -> dict[str, Any]:
    row: dict[str, Any] = {name: getattr(scenario, name) for name in options.shown}
    row.update({"gpus": fleet_gpus(scenario), "max_rate_per_s": 0.0, "level": None, "workload": None,
                "max_rate_interval": None, "rate_interval_source": None, "interval_method": None,
                "tok_s_per_gpu": 0.0, "tok_s_per_user": None, "gpus_for_target": None,
                "usd_per_gpu_hour": price_for(scenario.gpu, options.prices), "cost_per_mtok": None,
                "binding": "does_not_fit", "binding_shares": {}, "slo_met_at_max": False, "capped": False,
                "ttft_p99_s": None, "tpot_p99_s": None, "e2e_p99_s": None, "num_preemptions": 0,
                "kv_usage_peak": None, "missed_above": [why], "slo_summary": None, "probes": 0, "step_time_source": None,
                "vllm_would_not_start": None, "scenario": scenario.to_dict()})
    return row


def gpus_for_target(target_rate: float | None, max_rate: float, gpus_per_copy: int) -> int | None:
    if target_rate is None or not max_rate > 0:
        return None
    return math.ceil(target_rate / max_rate - 1e-9) * gpus_per_copy


def search_chain(workload: Workload, scenarios: list[Scenario], options: SearchOptions) -> list[dict[str, Any]]:
    """Rows of configurations searched one after another, each starting near the last answer
    found (grid order puts configurations that differ in one field side by side)."""
    rows: list[dict[str, Any]] = []
    for scenario in scenarios:
        rows.append(search_config(workload, scenario, options, next_start(rows, options)))
    return rows


def next_start(rows: list[dict[str, Any]], options: SearchOptions) -> float | None:
    """Where the next configuration of a chain starts: the last level that met the SLO (uncapped)
    among the rows before it, or None (the workload's start) without reuse or such a row."""
    if not options.reuse:
        return None
    return next((r["level"] for r in reversed(rows) if r["slo_met_at_max"] and not r["capped"]), None)

"""The Plan's answer in words and one table, for the page, the snapshot and the HTML report alike:
requests/s per replica under the SLO, what binds there and which objective missed at the next rate
up, GPUs for the target with the fractional replica count, the alternatives, the workload (trace,
rate, load factor) and the step-time source. A report that held only the drilled-into run left an
ops team without the answer (issue 24).

Reads a search result's dict (sim.plan.search.SearchResult.to_dict, also stored in snapshots), so an
older snapshot missing a key still renders: absent figures are left out, never invented.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.core.tiers.scope import TIER_SCOPES
from sim.plan.slo import SloError, parse_slo
from sim.plan.tier_prices import TIER_USD_PER_GB_MONTH
from sim.report.plan_charts import row_label, varied_fields
from sim.report.served import BINDING_WORDS

DEFAULT_TOLERANCE = 0.02  # the search's bisection tolerance when the result does not say


@dataclass(frozen=True)
class PlanAnswer:
    """One row's answer (the best row unless asked for another)."""

    row: int
    config: str
    rate_per_replica: float
    replicas: int
    slo: str  # in words
    binding: str  # in words
    missed_next: tuple[str, ...]  # objectives missed at the next rate probed above
    target_rate: float | None
    replicas_exact: float | None  # target / rate per replica (the fractional count)
    replicas_needed: int | None
    gpus_needed: int | None
    gpus_low: int | None  # the count if the rate were the tolerance higher (None: the same count)
    workload: str | None
    load_factor: float | None
    step_times: str
    tolerance: float
    rate_interval: tuple[float, float] | None = None  # per replica, 90% (sim/plan/rate_interval.py)
    interval_method: str | None = None
    tiers: str | None = None  # the KV tiers and what they cost per GPU-hour, in words (sim/plan/tier_prices.py)
    rate_interval_source: str | None = None  # "re-simulated" or "first order" (None: an older snapshot's, first order)
    rate_interval_note: str | None = None  # how it was made, in words


def slo_words(plan: Mapping[str, Any]) -> str:
    try:
        return parse_slo(str(plan.get("slo", ""))).words()
    except SloError:  # a snapshot's SLO this version cannot read: its own text
        return str(plan.get("slo", ""))


def plan_answer(plan: Mapping[str, Any], row: int | None = None) -> PlanAnswer | None:
    """The answer for `row` (default: the best); None when no row meets the SLO."""
    rows: Sequence[dict[str, Any]] = plan.get("rows") or []
    if row is None:
        best = plan.get("best")
        row = best["row"] if isinstance(best, Mapping) else None
    if row is None or not 0 <= row < len(rows) or not rows[row].get("max_rate_per_s"):
        return None
    r = rows[row]
    replicas = int((r.get("scenario") or {}).get("replicas") or r.get("replicas") or 1)
    tp = int((r.get("scenario") or {}).get("tp") or r.get("tp") or 1)
    per_replica = float(r["max_rate_per_s"]) / replicas
    target = plan.get("target_rate")
    tolerance = float(plan.get("tolerance") or DEFAULT_TOLERANCE)
    exact = needed = gpus = low = None
    if target:
        exact = float(target) / per_replica
        needed = math.ceil(exact - 1e-9)
        gpus = needed * tp
        fewer = math.ceil(exact / (1 + tolerance) - 1e-9) * tp  # the rate is known to within the tolerance
        low = fewer if fewer != gpus else None
    return PlanAnswer(row, row_label(r, varied_fields(rows)), per_replica, replicas, slo_words(plan),
                      BINDING_WORDS.get(str(r.get("binding")), str(r.get("binding"))),
                      tuple(str(m) for m in r.get("missed_above") or ()), float(target) if target else None,
                      exact, needed, gpus, low, r.get("workload"), r.get("level"),
                      str(plan.get("step_times") or r.get("step_time_source") or ""), tolerance,
                      _per_replica(r.get("max_rate_interval"), replicas), r.get("interval_method"),
                      tier_words(r), r.get("rate_interval_source"), r.get("rate_interval_note"))


def tier_words(r: Mapping[str, Any]) -> str | None:
    """'KV tiers: CPU 1000 GiB per replica; their DRAM and NVMe add $0.410 per GPU-hour ...' (None: no tier)."""
    sc = r.get("scenario") or {}
    shared = TIER_SCOPES.lookup(str(sc.get("cpu_tier_scope") or "replica")).per_node  # a validated scenario's
    cpu_per = "replica, pooled by the node's replicas" if shared else "replica"
    sizes = [f"{name} {float(sc.get(field) or 0):g} GiB per {per}" for name, field, per in
             (("CPU", "cpu_tier_gib", cpu_per), ("NVMe", "nvme_tier_gib", "node"), ("remote", "remote_tier_gib", "run"))
             if float(sc.get(field) or 0) > 0]
    if not sizes:
        return None
    price = r.get("tier_usd_per_gpu_hour")
    gpu = r.get("usd_per_gpu_hour")
    cost = (f"; their DRAM and NVMe add ${float(price):.4f} per GPU-hour (included in the ${float(gpu):.3f} "
            f"per GPU-hour behind the cost per token; DRAM ${TIER_USD_PER_GB_MONTH['cpu']:.3f} and NVMe "
            f"${TIER_USD_PER_GB_MONTH['nvme']:.4f} per GB-month, docs/TIERS.md)"
            if price and gpu else "; no GPU price, so no cost")
    return "KV tiers: " + ", ".join(sizes) + cost + "."


def _per_replica(bounds: Any, replicas: int) -> tuple[float, float] | None:
    if not isinstance(bounds, list | tuple) or len(bounds) != 2:
        return None
    return float(bounds[0]) / replicas, float(bounds[1]) / replicas


def rate_words(rate: float, bounds: tuple[float, float] | None) -> str:
    """'4.1 requests/s (3.8-4.4)': the rate with its 90% interval when there is one."""
    return f"{rate:.3g} requests/s" + (f" ({bounds[0]:.3g}-{bounds[1]:.3g})" if bounds else "")


def answer_lines(a: PlanAnswer) -> list[str]:
    """The answer as sentences, most important first."""
    lines = [f"{a.config}: {rate_words(a.rate_per_replica, a.rate_interval)} per replica under {a.slo}."]
    missed = f"; at the next rate up it misses {', '.join(a.missed_next)}" if a.missed_next else ""
    lines.append(f"What binds: {a.binding}{missed}.")
    if a.target_rate is not None and a.replicas_exact is not None:
        text = (f"For {a.target_rate:g} requests/s: {a.target_rate:g} / {a.rate_per_replica:.3g} = "
                f"{a.replicas_exact:.2f} replicas -> {a.replicas_needed} replicas = {a.gpus_needed} GPUs.")
        if a.gpus_low is not None:
            text += (f" The rate is found to within {a.tolerance:.0%}, and at {a.tolerance:.0%} more per replica "
                     f"{a.gpus_low} GPUs would do: the count sits on that margin.")
        lines.append(text)
    if a.tiers:
        lines.append(a.tiers)
    if a.workload:
        load = f" (load factor x{a.load_factor:g} of the trace's own rate)" if a.load_factor else ""
        lines.append(f"Workload: {a.workload}{load}.")
    if a.rate_interval is not None:
        lines.append(interval_sentence(a))
    if a.step_times:
        lines.append(a.step_times if a.step_times.startswith("Step times") else f"Step times: {a.step_times}.")
    return lines


def interval_sentence(a: PlanAnswer) -> str:
    """Which method made the answer's range (sim/plan/rate_interval.py): never left to guess."""
    head = (f"The range is a 90% interval from the {a.interval_method or 'validated error'} of the step times "
            "(docs/CALIBRATION.md, Intervals): ")
    if a.rate_interval_source == "re-simulated":
        return head + f"re-simulated, the largest rate meeting the SLO with {a.rate_interval_note or 'every step slower and faster'}."
    return head + "first order, the rate scaled by the step-time error, not re-simulated" + (
        f" ({a.rate_interval_note})." if a.rate_interval_note else ".")


def alternatives(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every configuration searched, one row each (the table beside the answer)."""
    rows: Sequence[dict[str, Any]] = plan.get("rows") or []
    varied = varied_fields(rows)
    return [{"config": row_label(r, varied), "max req/s": r.get("max_rate_per_s"),
             "GPUs for target": r.get("gpus_for_target"), "binds": r.get("binding"),
             "missed above": ", ".join(str(m) for m in r.get("missed_above") or []),
             "90% interval": interval_cell(r),
             "$ per M tokens": r.get("cost_per_mtok"), "tiers $ per GPU-h": r.get("tier_usd_per_gpu_hour"),
             "step times": r.get("step_time_source")} for r in rows]


def interval_cell(r: Mapping[str, Any]) -> str | None:
    """'3.40-6.22 (re-simulated)': a row's rate interval with the method that made it."""
    band = r.get("max_rate_interval")
    if not isinstance(band, list | tuple) or len(band) != 2:
        return None
    return f"{float(band[0]):.3g}-{float(band[1]):.3g} ({r.get('rate_interval_source') or 'first order'})"


def drilled_row(plan: Mapping[str, Any], scenario: Mapping[str, Any]) -> int | None:
    """The row whose scenario this run is (the Plan page's drill-down), else None."""
    for i, r in enumerate(plan.get("rows") or []):
        if r.get("scenario") == dict(scenario):
            return i
    return None


def answer_html(plan: Mapping[str, Any], row: int | None = None) -> str:
    """The report's first section: the answer, then the alternatives table."""
    a = plan_answer(plan, row)
    if a is None:
        head = f"<p>No configuration meets {html.escape(slo_words(plan))} at any rate tried.</p>"
    else:
        head = "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in answer_lines(a)) + "</ul>"
    table = alternatives(plan)
    cols = list(table[0]) if table else []

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        return f"{v:.3g}" if isinstance(v, float) else html.escape(str(v))

    body = "".join("<tr>" + "".join(f"<td>{cell(r[c])}</td>" for c in cols) + "</tr>" for r in table)
    heads = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    return (f'<section id="plan-answer"><h2>The answer</h2>{head}<h3>Alternatives</h3>'
            f"<table><tr>{heads}</tr>{body}</table></section>")

"""The sweep: every configuration's row under one SLO (sim.plan.config_search holds one row's
search and its figures, docs/PLAN.md). Configurations are independent, so `search` hands them to
an executor (sim.plan.executors: inline, a process pool, or Ray tasks) and collects rows as they
finish; then, the executor still open, the best row's rate interval by replay (sim.plan.rate_interval).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.plan.config_search import SearchOptions, probe
from sim.plan.executors import make_executor
from sim.plan.one_source import one_source
from sim.plan.rank import best_row, pareto_rows
from sim.plan.rate_interval import refine_best
from sim.plan.workload import Workload
from sim.scenario import Scenario


@dataclass
class SearchResult:
    rows: list[dict[str, Any]]
    slo: str
    target_rate: float | None
    cancelled: bool = False
    configs: int = 0
    step_times: str = ""  # the one step-time source of every row, in a sentence (sim.plan.one_source)
    tolerance: float = 0.02  # the bisection's: each row's rate is known to within it
    best_by: str = "cost"  # what "best" means (sim.plan.rank.CRITERIA)

    def to_dict(self) -> dict[str, Any]:
        return {"slo": self.slo, "target_rate": self.target_rate, "configs": self.configs, "step_times": self.step_times,
                "tolerance": self.tolerance,
                "completed": len(self.rows), "cancelled": self.cancelled, "rows": self.rows,
                "best": best_row(self.rows, self.target_rate, self.best_by), "pareto": pareto_rows(self.rows)}


def search(workload: Workload, configs: list[Scenario], options: SearchOptions, *, workers: int = 1,
           ray: str | None = None, progress: Callable[[int, int], None] | None = None,
           best_by: str = "cost") -> SearchResult:
    """Every configuration's row, in grid order. Ctrl-C (KeyboardInterrupt) stops the sweep and
    keeps the rows finished so far (`cancelled`). progress(done, total) after each row. Every row is
    timed by one step-time source (sim.plan.one_source: all on the roofline where the tables miss some)."""
    chosen = one_source(configs)
    configs = list(chosen.scenarios)
    rows: dict[int, dict[str, Any]] = {}
    cancelled = False
    with make_executor(workload, options, workers=workers, ray=ray) as ex:
        try:
            for index, row in ex.run(configs):
                rows[index] = row
                if progress is not None:
                    progress(len(rows), len(configs))
        except KeyboardInterrupt:
            cancelled = True
            ex.cancel()
        if not cancelled:  # the best row's rate interval by replay (sim.plan.rate_interval), its ends on the pool
            refine_best([rows[i] for i in sorted(rows)], workload, options, probe, best_by, ex.ends())
    return SearchResult([rows[i] for i in sorted(rows)], options.slo.text(), options.target_rate, cancelled,
                        len(configs), chosen.note, options.tolerance, best_by)

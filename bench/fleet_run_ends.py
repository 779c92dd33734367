"""Where a replay's engine iterations come from: general steps, and decode runs by what ended them.

A replay's CPU time follows its engine iterations (a general step, or one decode run of many steps
taken in one go: sim/core/decode_run.py), not its step count. This prints them for the speed
suite's fleet (8 replicas, Azure conv at load x8) and for one replica on the trace at load x1 (the
same request rate per replica), so the two can be compared. A run is counted under the first of:
an arrival (routed there: a cut, or the replica's own feed), a metrics grid point, a member's last
token (rule 2 of decode_run), else other (a block limit, a possible admission, a timed event).

  .venv/bin/python bench/fleet_run_ends.py [--router kv-precise] [--replicas 8]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.speed_suite import TRACES  # noqa: E402
from sim.core import decode_run  # noqa: E402
from sim.fleet import engine as fleet_engine  # noqa: E402
from sim.fleet.replay import simulate  # noqa: E402
from sim.run.engine import Simulation  # noqa: E402
from sim.scenario import Scenario  # noqa: E402
from sim.trace import load_trace  # noqa: E402


def count(trace: Any, scenario: Scenario) -> dict[str, Any]:
    """Iterations of one replay, by kind (the engine's methods wrapped for this run only)."""
    counts: collections.Counter[str] = collections.Counter()
    cut_runs: dict[int, object] = {}  # id -> run (kept alive: ids stay unique)
    grid_of: dict[int, tuple[object, float]] = {}  # id -> (run, the grid point it was planned against)
    book, step, cut, plan = Simulation.book_run, Simulation.record_step, fleet_engine._cut, decode_run.plan_run

    def counted_plan(*args: Any, **kw: Any) -> Any:
        run = plan(*args, **kw)
        grid_of[id(run)] = (run, kw["next_sample"])
        return run

    def counted_cut(run: Any, t: float) -> Any:
        out = cut(run, t)
        if out is not run:
            cut_runs[id(out)] = out
        return out

    def counted_book(self: Simulation, rep: Any, run: Any) -> None:
        grid, done = grid_of.pop(id(run), (None, self.rec.next_grid))[1], self.n_done
        book(self, rep, run)
        nxt = self.next_arrival(rep)
        if id(run) in cut_runs or (nxt is not None and nxt <= run.ends[-1]):
            counts["runs ended by an arrival routed there"] += 1
        elif run.ends[-1] >= grid:
            counts["runs ended by a metrics grid point"] += 1
        elif self.n_done > done:
            counts["runs ended by a member's last token"] += 1
        else:
            counts["runs ended otherwise"] += 1

    def counted_step(self: Simulation, *args: Any) -> None:
        counts["general steps"] += 1
        step(self, *args)

    Simulation.book_run, Simulation.record_step, fleet_engine._cut = counted_book, counted_step, counted_cut  # type: ignore[method-assign]
    decode_run.plan_run = counted_plan  # type: ignore[assignment]
    try:
        c0 = time.process_time()
        res = simulate(trace, scenario)
        cpu = time.process_time() - c0
    finally:
        Simulation.book_run, Simulation.record_step, fleet_engine._cut = book, step, cut  # type: ignore[method-assign]
        decode_run.plan_run = plan  # type: ignore[assignment]
    runs = sum(v for k, v in counts.items() if k.startswith("runs"))
    return {"replicas": scenario.replicas, "router": scenario.router, "load": scenario.speedup,
            "simulated_s": round(res.summary["duration_s"], 1), "steps": res.summary["num_steps"],
            "iterations": counts["general steps"] + runs, "decode runs": runs, **counts,
            "cpu_s (counting included)": round(cpu, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--router", default="kv-precise")
    ap.add_argument("--replicas", type=int, default=8)
    args = ap.parse_args()
    trace = load_trace(TRACES / "AzureLLMInferenceTrace_conv.csv")
    base = Scenario(model="llama-3-8b", gpu="h100-sxm")
    n = args.replicas
    for sc in (base.replace(replicas=n, router=args.router, speedup=float(n)), base):
        print(json.dumps(count(trace, sc)), flush=True)


if __name__ == "__main__":
    main()

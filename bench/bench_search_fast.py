"""The Plan search's answer time (issue 30): 8 configurations of llama-3.1-70b (TP4 and TP8 on
h100-sxm and h200, bf16 and fp8 KV) on the Azure conversation trace under ttft_p99=2,tpot_p99=0.1
(the Plan page's default SLO), searched twice:
- full: every probe runs out, every configuration starts at x1 and bisects (SearchOptions
  early_stop=False, reuse=False, guided=False), in this process;
- fast: the defaults (probes stop once they must miss, a chain's configurations start near the last
  answer, the next level is read off the passes' margins) on one worker per core.
Prints wall and CPU seconds (this process + its workers) and probes of each, and every rate side by
side; exit 1 if a fast rate differs from the full one by more than the tolerance (2%) or the fast
search's wall time is over 15 s (on a shared machine the wall time says little: read the CPU time).

Run: .venv/bin/python bench/bench_search_fast.py [--skip-full] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.speed_suite import TRACES  # noqa: E402
from sim.plan.config_search import SearchOptions  # noqa: E402
from sim.plan.grid import expand, parse_grid  # noqa: E402
from sim.plan.search import search  # noqa: E402
from sim.plan.slo import parse_slo  # noqa: E402
from sim.plan.workload import Workload  # noqa: E402
from sim.scenario import Scenario  # noqa: E402

GRID = {"model": "llama-3.1-70b", "tp": "4,8", "gpu": "h100-sxm,h200", "kv_dtype": "bf16,fp8"}
SLO = "ttft_p99=2,tpot_p99=0.1"
TOLERANCE = 0.02
TARGET_WALL_S = 15.0


def cpu_now() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime  # children: reaped pool workers


def timed(workload: Workload, options: SearchOptions, workers: int) -> dict:
    configs = expand(Scenario(), parse_grid(GRID))
    t0, c0 = time.perf_counter(), cpu_now()
    result = search(workload, configs, options, workers=workers)
    return {"wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(cpu_now() - c0, 2), "workers": workers,
            "probes": sum(r["probes"] for r in result.rows), "rates": [r["max_rate_per_s"] for r in result.rows],
            # the best row's rate interval, re-simulated after the search, its two ends side by side on the
            # workers (sim.plan.rate_interval): its runs, their CPU (in the workers) and the bounds
            "interval_runs": sum(r.get("rate_interval_probes") or 0 for r in result.rows),
            "interval_cpu_s": round(sum(r.get("rate_interval_cpu_s") or 0.0 for r in result.rows), 2),
            "intervals": [r["max_rate_interval"] for r in result.rows if r.get("rate_interval_source") == "re-simulated"],
            "configs": [f"{r['gpu']} tp{r['tp']} {r['kv_dtype']}" for r in result.rows]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-full", action="store_true", help="only the fast search (no rate check)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    workload = Workload.from_ref(str(TRACES / "AzureLLMInferenceTrace_conv.csv"))
    slo = parse_slo(SLO)
    fast = timed(workload, SearchOptions(slo, TOLERANCE), max(1, min(8, os.cpu_count() or 1)))
    out = {"fast": fast}
    bad = [] if fast["wall_s"] <= TARGET_WALL_S else [f"fast search wall {fast['wall_s']} s > {TARGET_WALL_S} s"]
    if not args.skip_full:
        full = timed(workload, SearchOptions(slo, TOLERANCE, early_stop=False, reuse=False, guided=False), 1)
        out["full"] = full
        for name, a, b in zip(full["configs"], full["rates"], fast["rates"], strict=True):
            if abs(b / a - 1) > TOLERANCE:
                bad.append(f"{name}: fast rate {b:.4g} vs full {a:.4g} (> {TOLERANCE:.0%})")
    out["problems"] = bad
    if args.json:
        print(json.dumps(out))
    else:
        for name, row in out.items():
            print(name, row)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

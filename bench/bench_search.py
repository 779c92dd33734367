"""Search throughput: configurations per minute vs workers, on the process pool and on local Ray.

A fixed 12-configuration grid (llama-3-8b on h100-sxm; KV budget x KV dtype x max_num_seqs) under
ttft_p99=1, tpot_p99=0.05 on a ShareGPT-like synthetic workload. Figures go to docs/PERFORMANCE.md.

Run: .venv/bin/python bench/bench_search.py [--workers 1,2] [--ray] [--n 400] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.plan.config_search import SearchOptions  # noqa: E402
from sim.plan.grid import expand, parse_grid  # noqa: E402
from sim.plan.search import search  # noqa: E402
from sim.plan.slo import parse_slo  # noqa: E402
from sim.plan.workload import Workload  # noqa: E402
from sim.scenario import Scenario  # noqa: E402

GRID = {"kv_budget_gib": "0.5,2,8", "kv_dtype": "bf16,fp8", "max_num_seqs": "32,256"}
SLO = "ttft_p99=1,tpot_p99=0.05"


def one(workload: Workload, workers: int, ray: str | None) -> dict:
    configs = expand(Scenario(), parse_grid(GRID))
    t0 = time.perf_counter()
    result = search(workload, configs, SearchOptions(parse_slo(SLO)), workers=workers, ray=ray)
    wall = time.perf_counter() - t0
    probes = sum(r["probes"] for r in result.rows)
    return {"executor": "ray" if ray else ("pool" if workers > 1 else "inline"), "workers": workers,
            "configs": len(configs), "probes": probes, "wall_s": round(wall, 2),
            "configs_per_min": round(len(configs) / wall * 60, 1), "rows": result.rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--ray", action="store_true", help="also run on a local Ray instance with the most workers")
    ap.add_argument("--n", type=int, default=400, help="requests in the workload")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    workload = Workload.from_ref(f"synthetic:preset=sharegpt-like,n={args.n},rate=10,seed=0")
    counts = [int(w) for w in args.workers.split(",")]
    runs = [one(workload, w, None) for w in counts]
    if args.ray:
        import ray

        from sim.plan.executors import code_modules

        t0 = time.perf_counter()
        ray.init(num_cpus=max(counts), include_dashboard=False, log_to_driver=False,
                 runtime_env={"py_modules": code_modules()})
        start = time.perf_counter() - t0
        runs.append({**one(workload, max(counts), "auto"), "ray_init_s": round(start, 2)})
        ray.shutdown()
    same = all(r["rows"] == runs[0]["rows"] for r in runs)
    out = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
                      f"{platform.python_version()}", "grid": GRID, "slo": SLO, "n": args.n, "same_rows": same,
           "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs]}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for r in out["runs"]:
            print(f"{r['executor']:>6} x{r['workers']}: {r['configs']} configs ({r['probes']} probes) in {r['wall_s']} s "
                  f"= {r['configs_per_min']} configs/min" + (f" (+{r['ray_init_s']} s ray.init)" if "ray_init_s" in r else ""))
        print(f"same rows on every executor: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""`sim calibrate --run`'s fit by replay (sim/fidelity/calibrate.py), timed: the Levenberg-Marquardt
fit it uses against the Nelder-Mead fit it replaced (scipy, at most 40 replays, the same settings
as before), on the shared RTX 4090 run when ../shared is there, else the bundled samples/vllm_run.
Prints each fit's replays, CPU and wall seconds, scales and squared log error, and the calibrated
replay's mean errors; exit 1 if the fit in use lands worse than Nelder-Mead and beyond every mean
within ~1% (a summed squared log error of 1e-4).

Run: .venv/bin/python bench/bench_calibrate.py [--run RUN_DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.fidelity.calibrate import MAX_REPLAYS, Fit, from_run  # noqa: E402
from sim.fidelity.run_record import load_run_dir  # noqa: E402
from sim.fidelity.validate import validate  # noqa: E402

CLOSE_ENOUGH = 1e-4  # squared log errors summed: every mean within ~1%, far inside a real run's run-to-run spread
SHARED_RUN = Path(os.environ.get("KVSIM_SHARED", ROOT.parent / "shared")) / "fidelity" / "rtx4090-llama-3.1-8b" / "run"


def nelder_mead(log_errors, n: int) -> tuple[np.ndarray, float]:
    """The fit before 2026-11-28: scipy's simplex on the summed squared log errors."""
    from scipy.optimize import minimize

    simplex = np.vstack([np.zeros(n), 0.15 * np.eye(n)])
    result = minimize(lambda x: float(np.sum(log_errors(x) ** 2)), np.zeros(n), method="Nelder-Mead",
                      options={"maxfev": 40, "xatol": 0.005, "fatol": 1e-6, "initial_simplex": simplex})
    return result.x, float(result.fun)


def timed_fit(run, fit: Fit | None) -> dict:
    c0, w0 = time.process_time(), time.perf_counter()
    profile = from_run(run, fit=fit)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        path.write_text(json.dumps(profile))
        v = validate(run, profile=str(path))
    f = profile["fit"]
    return {"method": f["method"], "replays": f["replays"], "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "memory_scale": round(f["memory_scale"], 4), "compute_scale": round(f["compute_scale"], 4),
            "squared_log_error": f["squared_log_error"],
            "mean_error": {m: round(v.error(m), 4) for m in ("TTFT", "TPOT", "E2E")}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", help="a run directory (default: the shared RTX 4090 run, else samples/vllm_run)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    where = Path(args.run) if args.run else SHARED_RUN if SHARED_RUN.is_dir() else ROOT / "samples" / "vllm_run"
    run = load_run_dir(where)
    rows = {"in use": timed_fit(run, None), "nelder-mead": timed_fit(run, nelder_mead)}
    worse = rows["in use"]["squared_log_error"] > max(rows["nelder-mead"]["squared_log_error"], CLOSE_ENOUGH)
    if args.json:
        print(json.dumps({"run": str(where), "max_replays": MAX_REPLAYS, "rows": rows, "worse": worse}, indent=2))
    else:
        print(f"run: {where}")
        for name, row in rows.items():
            print(f"{name:12} {json.dumps(row)}")
        if worse:
            print("the fit in use lands worse than Nelder-Mead, and some mean is off by more than ~1%")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())

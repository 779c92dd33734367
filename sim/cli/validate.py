"""`python -m sim validate RUN_DIR [--profile P] [--json]`: replay a measured vLLM run and compare.

RUN_DIR holds meta.json, requests.jsonl and timeseries.csv (the run-record format,
docs/CALIBRATION.md); a .zip of them works too. Prints measured vs simulated TTFT/TPOT/E2E
(mean, p50, p90, p99), throughput, and the running / waiting / KV-usage series side by side.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from sim.cli.common import print_json
from sim.cli.run_source import add_run_args


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("validate", help="replay a measured vLLM run and compare with the simulation",
                              description="Replay a measured vLLM run (meta.json, requests.jsonl, timeseries.csv) "
                              "through kvsim with the run's engine config; print measured vs simulated.")
    p.add_argument("run_dir", metavar="RUN", help="run directory (sim observe's or the run-record format), a .zip "
                   "of one, or a benchmark file: vllm bench serve / guidellm / genai-perf / inference-perf JSON, "
                   "or a CSV of arrival,input,output,ttft,e2e (docs/VALIDATE.md)")
    p.add_argument("--profile", metavar="PATH", help="calibration profile JSON (docs/CALIBRATION.md)")
    p.add_argument("--json", action="store_true", help="print the comparison and series as JSON")
    add_run_args(p)
    return p


def _coverage_line(v: Any) -> str:
    from sim.fidelity.validate import interval_coverage

    c = interval_coverage(v.run, v.result)
    if not c["windows"]:
        return "intervals: no window to check"
    return (f"intervals ({c['method']}, nominal {c['level']:.0%}): {c['inside']} of {c['windows']} measured "
            f"window means inside ({c['inside'] / c['windows']:.0%})")


def _pool_line(v: Any) -> str:
    from sim.fidelity.validate import predicted_pool

    p = predicted_pool(v.run)
    if "num_gpu_blocks" in (v.run.meta.get("assumed") or {}):
        return f"KV pool: {p['measured']:,} blocks, assumed ({v.run.meta['assumed']['num_gpu_blocks']})"
    if p["predicted"] is None:
        return f"KV pool: {p['measured']:,} blocks measured; vLLM's accounting not modelled here ({p.get('reason')})"
    low, high = p["range"]
    return (f"KV pool: {p['measured']:,} blocks measured, {p['predicted']:,} by vLLM {p['vllm_version']}'s accounting "
            f"({p['error']:+.1%}; {low:,}-{high:,} with the compile cache not known to be warm; the replay uses the measured pool)")


def format_validation(v: Any) -> str:
    def fmt(x: float, metric: str) -> str:
        if x is None or not math.isfinite(x):
            return "-"
        return f"{x * 1e3:.1f} ms" if metric == "TPOT" else f"{x:.2f}" + (" s" if metric in ("TTFT", "E2E") else "")

    lines = [f"run {v.run.source}: {len(v.run.requests)} requests on {v.scenario.gpu}; "
             f"step times from {v.result.summary['cost_model']['source']}",
             _pool_line(v), _coverage_line(v),
             f"{'metric':<20}{'stat':<6}{'measured':>14}{'simulated':>14}{'error':>9}"]
    for row in v.table.itertuples():
        err = "-" if not math.isfinite(row.error) else f"{row.error:+.1%}"
        lines.append(f"{row.metric:<20}{row.stat:<6}{fmt(row.measured, row.metric):>14}"
                     f"{fmt(row.simulated, row.metric):>14}{err:>9}")
    s = v.series
    step = max(len(s) // 20, 1)
    lines.append("series (measured / simulated): t_s  running  waiting  KV usage")
    for row in s.iloc[::step].itertuples():
        lines.append(f"{row.t_s:8.0f}  {row.measured_num_running:5.0f} / {row.simulated_num_running:<6.1f}"
                     f"{row.measured_num_waiting:6.0f} / {row.simulated_num_waiting:<7.1f}"
                     f"{row.measured_kv_cache_usage_perc:6.1%} / {row.simulated_kv_cache_usage_perc:.1%}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from sim.cli.run_source import load_measured
    from sim.fidelity.validate import validate

    v = validate(load_measured(args.run_dir, args), profile=args.profile)
    if args.json:
        print_json(v.as_dict())
    else:
        print(format_validation(v))
    return 0

"""`python -m sim search (--trace T | --synthetic S) --model M --gpu G[,G...] --slo ... [--json]`:
the largest arrival rate each configuration serves under the SLO, its tokens/s per GPU and per
user, GPUs for a target rate, cost per million output tokens and what binds (docs/PLAN.md).

Every scenario flag of `sim run` is accepted here as a comma list (`--tp 1,2,4 --kv-dtype
bf16,fp8`); the grid is their cross product. Ctrl-C stops the sweep and prints the rows finished.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from sim.cli.common import CliError, print_json
from sim.cli.scenario_args import FIELDS, add_trace_args
from sim.plan.rank import CRITERIA
from sim.scenario import Scenario

BOOL_FIELDS = ("prefix_caching", "chunked_prefill")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("search", help="largest rate per configuration under an SLO, cost and what binds",
                              description="For every configuration in the grid (scenario flags as comma lists), find "
                              "the largest arrival rate whose run meets every SLO (bracketing, then levels read off the "
                              "measured margins or bisection, to 2%%; same seed at every probe) and report tokens/s per "
                              "GPU and per user, GPUs for --target-rate, cost per million output tokens and the binding constraint (docs/PLAN.md).")
    add_trace_args(p)
    g = p.add_argument_group("scenario grid (each flag takes one value or a comma list)")
    d = Scenario()
    for name in FIELDS:
        flag = "--" + name.replace("_", "-")
        default = getattr(d, name)
        if name in BOOL_FIELDS:
            g.add_argument(flag, nargs="?", const="true", metavar="on,off", help=f"default {default}")
        else:
            g.add_argument(flag, metavar="V[,V...]", help=None if default is None else f"default {default}")
    p.add_argument("--slo", required=True, help="objectives, e.g. ttft_p99=1.0,tpot_p99=0.05[,e2e_p99=30,goodput=0.99]")
    p.add_argument("--target-rate", type=float, metavar="R", help="requests/s to serve: GPUs needed per configuration")
    p.add_argument("--price", metavar="GPU=USD,...", help="USD per GPU-hour (defaults with sources: docs/PLAN.md)")
    p.add_argument("--tolerance", type=float, default=0.02, help="the search stops at hi/lo <= 1 + this (default 0.02)")
    p.add_argument("--workers", type=int, default=None,
                   help="local worker processes (default: one per CPU core, at most one per configuration; 1: in this process)")
    p.add_argument("--ray", metavar="auto|ADDRESS", help="run probes as Ray tasks: 'auto' joins a running cluster "
                   "or starts a local one; or a cluster address (ray://head:10001)")
    p.add_argument("--best-by", choices=tuple(CRITERIA), default="cost",
                   help="what 'best' means: lowest $ (default), fewest GPUs for the target, highest requests/s per GPU")
    p.add_argument("--rate-intervals", choices=("best", "all", "first-order"), default="best",
                   help="which rows' 90%% rate intervals are re-simulated with every step slower and faster (the "
                   "search's bracket re-run twice per row; the rest keep the first-order interval, labelled): "
                   "the best row by --best-by (default), all, or none (docs/PLAN.md)")
    p.add_argument("--json", action="store_true", help="print {rows, best, pareto, ...} as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def grid_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Scenario field -> comma-list text for every flag given (model always)."""
    return {name: getattr(args, name) for name in FIELDS if getattr(args, name, None) is not None}


def run(args: argparse.Namespace) -> int:
    from sim.plan.config_search import ALWAYS_SHOWN, SearchOptions
    from sim.plan.grid import expand, parse_grid
    from sim.plan.prices import parse_prices
    from sim.plan.search import search
    from sim.plan.slo import SloError, parse_slo
    from sim.plan.workload import Workload

    if args.model is None:
        raise CliError("--model is required")
    if args.workers is not None and args.workers < 1:
        raise CliError("--workers must be >= 1")
    if not 0 < args.tolerance < 1:
        raise CliError("--tolerance must be in (0, 1)")
    if args.target_rate is not None and not args.target_rate > 0:
        raise CliError("--target-rate must be > 0 requests/s")
    try:
        slo = parse_slo(args.slo)
        prices = parse_prices(args.price)
    except (SloError, ValueError) as exc:
        raise CliError(str(exc)) from None
    grid = parse_grid(grid_from_args(args))
    configs = expand(Scenario(), grid)
    validate_configs(configs)
    workers = args.workers if args.workers is not None else max(1, min(len(configs), os.cpu_count() or 1))
    swept = tuple(n for n, v in grid.items() if len(v) > 1 and n not in ALWAYS_SHOWN)
    options = SearchOptions(slo, args.tolerance, args.target_rate, prices, ALWAYS_SHOWN + swept,
                            rate_intervals=args.rate_intervals)
    ref = f"synthetic:{args.synthetic.removeprefix('synthetic:')}" if args.synthetic is not None else args.trace
    if args.synthetic is not None and args.trace_format:
        raise CliError("--format applies to --trace files only")
    workload = Workload.from_ref(ref, args.trace_format)
    callback, bar = progress_bar(len(configs), not args.no_progress and not args.json)
    try:
        result = search(workload, configs, options, workers=workers, ray=args.ray, progress=callback,
                        best_by=args.best_by)
    finally:
        if bar is not None:
            bar.close()
    out = result.to_dict()
    if args.json:
        print_json(out)
    else:
        print(format_table(out))
    if result.cancelled:
        print(f"cancelled: {len(result.rows)} of {len(configs)} configurations finished", file=sys.stderr)
        return 130
    return 0


def validate_configs(configs: list[Scenario]) -> None:
    """Unknown models/GPUs fail here with one line, before any worker starts."""
    from models.gpus import get_gpu
    from sim.run.deployment import Deployment

    for name in sorted({c.gpu for c in configs}):
        get_gpu(name)
    for sc in {(c.model, c.kv_heads, c.kv_eviction): c for c in configs}.values():
        Deployment.model_of(sc)


def progress_bar(total: int, enabled: bool) -> tuple[Any, Any]:
    if not enabled or not sys.stderr.isatty():
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=total, desc="configurations", unit="cfg", file=sys.stderr, leave=False)

    def update(done: int, _total: int) -> None:
        bar.update(done - bar.n)

    return update, bar


def format_table(out: dict[str, Any]) -> str:
    """One line per configuration, named by the GPU and the fields that differ between rows."""
    rows = out["rows"]
    head = f"SLO {out['slo']}" + (f", target {out['target_rate']:g} req/s" if out["target_rate"] else "")
    varied = [k for k in rows[0]["scenario"] if k in rows[0] and len({str(r[k]) for r in rows}) > 1] if rows else []
    labels = [" ".join([r["gpu"]] + [f"{k}={r[k]}" for k in varied if k != "gpu"]) for r in rows]
    width = max([len(label) for label in labels] + [6])
    lines = [head, f"{'config':<{width}} {'max req/s':>10} {'tok/s/GPU':>10} {'tok/s/user':>10} {'GPUs@target':>11} "
             f"{'$/Mtok':>8} {'step_source':>11}  binding"]
    for label, row in zip(labels, rows, strict=True):
        rate = (">" if row["capped"] else "") + format(row["max_rate_per_s"], ".4g")
        lines.append(f"{label:<{width}} {rate:>10} {row['tok_s_per_gpu']:>10.0f} "
                     f"{_num(row['tok_s_per_user'], '.1f'):>10} {_num(row['gpus_for_target'], 'd'):>11} "
                     f"{_num(row['cost_per_mtok'], '.3f'):>8} {row.get('step_time_source') or '-':>11}  {row['binding']}")
    if any(r["capped"] for r in rows):
        lines.append("> met the SLO at every rate tried (x16384 the start): the workload has too few requests to "
                     "load this deployment; use a larger n or a longer trace")
    lines += [f"{label}: not a candidate: {row['vllm_would_not_start']}"
              for label, row in zip(labels, rows, strict=True) if row.get("vllm_would_not_start")]
    if out.get("step_times"):
        lines.append(out["step_times"])
    best = out["best"]
    lines.append(f"best ({best.get('criterion', 'lowest $')}): {labels[best['row']]}" if best else "best: no configuration meets the SLO at any rate")
    if best and rows[best["row"]].get("max_rate_interval"):  # before the best line, after the step times
        r = rows[best["row"]]
        lines.insert(-1, f"90% interval of the best: {r['max_rate_interval'][0]:.4g}-{r['max_rate_interval'][1]:.4g} "
                     f"req/s, {r.get('rate_interval_source')} ({r.get('rate_interval_note')})")
    return "\n".join(lines)


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)

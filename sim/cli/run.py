"""`python -m sim run (--trace PATH | --synthetic SPEC) --model M --gpu G ...`: replay one scenario.

Prints a short text summary (or --json the summary dict), writes the frames with --out DIR
(requests and steps as parquet, CSV if pyarrow is missing, plus scenario.json and summary.json)
and a self-contained HTML report with --html FILE.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sim.cli.common import CliError, print_json
from sim.cli.scenario_args import add_scenario_args, add_trace_args, scenario_from_args, trace_from_args


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("run", help="replay a trace through the simulator",
                              description="Replay a trace through one scenario and report latency, throughput "
                              "and where the KV memory went (docs/METRICS.md).")
    add_trace_args(p)
    add_scenario_args(p)
    p.add_argument("--out", metavar="DIR", help="write requests/steps frames, scenario.json and summary.json here")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--fleet", metavar="FILE", help="a fleet in JSON or YAML (.yaml/.yml): router, replicas or prefill/decode pools, KV link ("
                   "docs/FLEET.md); applied over the scenario flags")
    p.add_argument("--slo", metavar="SPEC", help="add a `goodput` key: requests meeting every limit, e.g. "
                   "ttft_p99=1.0,tpot_p99=0.05 (each target's value is the per-request limit; docs/METRICS.md)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def progress_bar(enabled: bool) -> tuple[Any, Any]:
    """(callback, bar) for simulate(progress=...): a tqdm bar on stderr when it is a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=1000, desc="simulating", unit="‰", file=sys.stderr, leave=False)

    def update(fraction: float) -> None:
        bar.update(int(fraction * 1000) - bar.n)

    return update, bar


def simulate_with_progress(trace: Any, scenario: Any, show: bool) -> Any:
    from sim.fleet.replay import simulate

    callback, bar = progress_bar(show)
    try:
        return simulate(trace, scenario, progress=callback)
    finally:
        if bar is not None:
            bar.close()


def write_outputs(result: Any, out: str) -> Path:
    """requests / steps frames (parquet, else CSV), scenario.json, summary.json."""
    d = Path(out)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--out {out}: cannot create directory ({exc.strerror})") from None
    for name, df in (("requests", result.requests), ("steps", result.steps)):
        try:
            df.to_parquet(d / f"{name}.parquet", index=False)
        except ImportError:
            df.to_csv(d / f"{name}.csv", index=False)
    (d / "scenario.json").write_text(result.scenario.to_json() + "\n", encoding="utf-8")
    (d / "summary.json").write_text(json.dumps(result.summary, indent=2, default=str) + "\n", encoding="utf-8")
    return d


def write_html(result: Any, path: str, trace: str | None = None) -> None:
    from sim.report.html_report import write_html_report

    try:
        write_html_report(result, path, trace=trace)
    except OSError as exc:
        raise CliError(f"{path}: cannot write the HTML report ({exc.strerror or exc})") from None


def format_summary(s: dict[str, Any]) -> str:
    def ms(block: dict[str, Any], key: str) -> str:
        v = block.get(key)
        return "-" if v is None else f"{v * 1e3:.1f} ms"

    from sim.report.served import latency_basis, load_verdict, not_served, rejection_fix
    from sim.report.summary_lines import fleet_lines, kv_line, prefix_line, tier_line

    kv = s["kv_breakdown_mean"]
    fix = rejection_fix(s)
    lines = [line for line in (load_verdict(s), not_served(s), fix.text if fix else None) if line]
    lines += [
        f"requests {s['requests']}, completed {s['completed']}, rejected {s.get('rejected', 0)}, "
        f"clamped {s.get('clamped', 0)}, unfinished {s.get('unfinished', 0)}",
        latency_basis(s),
        f"simulated {s['duration_s']:.1f} s in {s['sim_wall_s']:.2f} s wall "
        f"({s['duration_s'] / max(s['sim_wall_s'], 1e-9):.0f}x real time)",
        f"throughput {s['throughput_tok_s']:.1f} tok/s, {s['req_per_s']:.2f} req/s, "
        f"mean batch {s['mean_batch_size']:.1f}, preemptions {s['num_preemptions']}",
        "TTFT mean {} p99 {} | TPOT mean {} p99 {} | E2E p50 {} | queue mean {}".format(
            ms(s["ttft_s"], "mean"), ms(s["ttft_s"], "p99"), ms(s["tpot_s"], "mean"), ms(s["tpot_s"], "p99"),
            ms(s["e2e_s"], "p50"), ms(s["queue_s"], "mean")),
        kv_line(s),
        "KV breakdown (time-weighted): " + ", ".join(f"{k} {v:.1%}" for k, v in kv.items()),
    ]
    lines += [line for line in (prefix_line(s), tier_line(s)) if line]
    if s.get("kv_group_breakdown_mean"):
        lines.append(group_line(s["kv_group_breakdown_mean"]))
    if s.get("kv_eviction"):
        lines.append(f"KV eviction {s['kv_eviction']['policy']}: {s['kv_eviction']['note']}")
    if s.get("goodput"):
        g = s["goodput"]
        pools = "".join(f", {p['role']} ({p['slo']}) {p['share']:.1%}" for p in g.get("pools", []) if p["slo"])
        lines.append(f"goodput ({g['slo']}): {g['share']:.1%} of requests, {g['tokens_per_s']:.1f} tok/s{pools}")
    return "\n".join(lines + fleet_lines(s))


def group_line(groups: dict[str, dict[str, float]]) -> str:
    """The KV pool held per layer group (run mean): GiB held and its split (several KV groups only)."""
    def one(label: str, parts: dict[str, float]) -> str:
        held = parts.get("held", 0.0) or 1.0
        split = ", ".join(f"{k.replace('_', ' ')} {parts[k] / held:.0%}"
                          for k in ("token_states", "reserved", "internal_frag") if k in parts)
        return f"{label} {parts.get('held', 0.0) / 2**30:.2f} GiB held ({split})"

    return "KV by layer group (mean): " + "; ".join(one(label, parts) for label, parts in groups.items())


def _slo(text: str | None) -> Any:
    """--slo parsed (None without it); a bad spec is one CliError line, before the run starts."""
    if text is None:
        return None
    from sim.cli.common import CliError
    from sim.plan.slo import SloError, parse_slo

    try:
        slo = parse_slo(text)
    except SloError as exc:
        raise CliError(str(exc)) from None
    if slo.goodput is not None:
        raise CliError("--slo: goodput=F is the search's objective; sim run reports the share met (drop goodput=)")
    return slo


def run(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    if getattr(args, "fleet", None):
        from sim.fleet.fleet_file import apply_fleet_file

        scenario = apply_fleet_file(scenario, args.fleet)
    slo = _slo(getattr(args, "slo", None))
    trace = trace_from_args(args)
    result = simulate_with_progress(trace, scenario, not args.no_progress and not args.json)
    if slo is not None:
        from sim.plan.goodput import goodput_summary

        result.summary["goodput"] = goodput_summary(slo, result.requests, result.summary)
    if args.out:
        write_outputs(result, args.out)
    if args.html:
        write_html(result, args.html, args.trace or f"synthetic:{args.synthetic}")
    if args.json:
        print_json(result.summary)
    else:
        print(format_summary(result.summary))
    return 0

"""`python -m sim trace PATH`: load (or generate) a trace, optionally transform it, print its summary.

PATH is a trace file in any supported format or "synthetic:<spec>" (docs/TRACES.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from sim.cli.common import CliError, print_json
from sim.guard import limits
from sim.guard.cli_parser import bounded_float, bounded_int


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from sim.trace import DEFAULT_MAX_BYTES, FORMATS

    p = subparsers.add_parser(
        "trace",
        help="load a trace and summarise it",
        description="Load a trace file (format detected from its header/JSON keys) or a synthetic:<spec>, "
        "apply optional transforms, and print format, rows, duration, rate and token statistics.",
    )
    p.add_argument("path", help='trace file, or "synthetic:n=1000,rate=5,..." (see docs/TRACES.md)')
    p.add_argument("--format", choices=sorted(FORMATS), help="skip detection and read as this format")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--max-mb", type=bounded_float(0, 64 * 1024, lo_open=True), default=DEFAULT_MAX_BYTES / 2**20, help="file size limit in MiB (default %(default)g)")
    g = p.add_argument_group("BurstGPT options")
    g.add_argument("--model", help="keep only rows whose Model starts with this (case-insensitive)")
    g.add_argument("--log-type", help="keep only rows whose Log Type starts with this, e.g. conversation or api")
    g.add_argument("--keep-failed", action="store_true", help="keep failed requests (0 response tokens) as 1-token outputs")
    t = p.add_argument_group("transforms (applied in this order)")
    t.add_argument("--window", metavar="START:END", help="keep arrivals in [START, END) seconds (END may be empty)")
    t.add_argument("--subsample", type=bounded_float(0, 1, lo_open=True), metavar="FRACTION", help="keep a seeded random fraction of requests")
    t.add_argument("--speedup", type=bounded_float(0, 1e6, lo_open=True), metavar="K", help="replay K times faster")
    t.add_argument("--clamp", type=bounded_int(2, limits.MAX_TOKENS), metavar="TOKENS", help="make input+output <= TOKENS (input cut first)")
    t.add_argument("--seed", type=bounded_int(0, limits.MAX_SEED), default=0, help="seed for --subsample (default 0)")
    p.add_argument("--out", metavar="CSV", help="also write the (transformed) trace as a generic CSV")
    return p


def run(args: argparse.Namespace) -> int:
    from sim.trace import clamp_context, resolve_trace, speedup, subsample, window

    options: dict[str, Any] = {}
    if not args.path.startswith("synthetic:"):
        options = {"model": args.model, "log_type": args.log_type, "keep_failed": args.keep_failed or None}
        options["max_bytes"] = int(args.max_mb * 2**20)
    trace = resolve_trace(args.path, args.format, **{k: v for k, v in options.items() if v is not None})
    if args.window:
        start, sep, end = args.window.partition(":")
        try:
            if not sep:
                raise ValueError
            bounds = float(start or 0), float(end) if end else None
        except ValueError:
            raise CliError(f"--window {args.window!r}: expected START:END in seconds") from None
        trace = window(trace, *bounds)
    if args.subsample is not None:
        trace = subsample(trace, args.subsample, seed=args.seed)
    if args.speedup is not None:
        trace = speedup(trace, args.speedup)
    if args.clamp is not None:
        trace = clamp_context(trace, args.clamp)
    if args.out:
        try:
            trace.to_csv(args.out)
        except OSError as exc:
            raise CliError(f"--out {args.out}: {exc.strerror or exc}") from None
    summary = trace.summary()
    if args.json:
        print_json(summary)
    else:
        print(_human(summary))
    return 0


def _human(s: dict[str, Any]) -> str:
    rate = f"{s['rate_per_s']:.3f} req/s" if s["rate_per_s"] is not None else "n/a"
    lines = [
        f"{s['source']}  [{s['format']}]  digest {s['digest']}",
        f"  requests  {s['rows']:,} over {s['duration_s']:,.1f} s  ({rate})",
    ]
    for key in ("input_tokens", "output_tokens"):
        st = s[key]
        lines.append(
            f"  {key:<14}mean {st['mean']:,.1f}  p50 {st['p50']:,.0f}  p99 {st['p99']:,.0f}  "
            f"min {st['min']:,}  max {st['max']:,}"
        )
    if "sessions" in s:
        lines.append(f"  sessions  {s['sessions']:,}")
    if "prefix_block_size" in s:
        lines.append(f"  prefix hashes over {s['prefix_block_size']}-token blocks")
    lines += [f"  applied: {h}" for h in s.get("history", [])]
    lines += [f"  warning: {w}" for w in s.get("warnings", [])]
    return "\n".join(lines)

"""`python -m sim observe URL (--trace T | --synthetic S) [--model M] [--out DIR]`: measure a live server.

Replays the trace against an OpenAI-compatible server (vLLM) at its arrival times, streams every
answer, scrapes /metrics once a second and writes the run record `sim validate` and
`sim calibrate` read (sim/fidelity/observe.py; docs/CALIBRATION.md). Ctrl-C stops and keeps what
was measured. Prints the record's directory and the counts (--json: meta.json's `observed`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
from typing import Any

from sim.cli.common import print_json
from sim.cli.scenario_args import add_async_scheduling_arg, add_trace_args, trace_from_args
from sim.fidelity.observe_record import DTYPES


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("observe", help="replay a trace against a live vLLM server and record the run",
                              description="Send a trace's requests to an OpenAI-compatible server (vLLM) at their "
                              "arrival times, stream the answers, scrape /metrics, and write a run record for "
                              "`sim validate` / `sim calibrate`.")
    p.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    add_trace_args(p)
    p.add_argument("--model", help="the served model name to send (default: the server's first model)")
    p.add_argument("--model-config", metavar="M", help="kvsim's model for the simulation (catalog name, HF id, "
                   "config.json or directory; default: the served name, or the server's model directory)")
    p.add_argument("--out", metavar="DIR", help="run directory to write (default: observe-<UTC time>)")
    p.add_argument("--speedup", type=float, default=1.0, help="divide arrival times by this (default 1)")
    p.add_argument("--max-concurrency", type=int, help="at most N requests in flight (default: open loop)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per-request limit in seconds (default 600)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prompt token ids")
    p.add_argument("--scrape-interval-s", type=float, default=1.0, help="seconds between /metrics samples (default 1)")
    g = p.add_argument_group("engine (what the server does not report; written to meta.json, used by validate)")
    g.add_argument("--gpu", help="the server's GPU (kvsim catalog name)")
    g.add_argument("--tp", type=int, help="tensor-parallel size (default 1)")
    g.add_argument("--max-num-seqs", type=int, help="the server's max_num_seqs (default: vLLM's for the GPU)")
    g.add_argument("--max-batched-tokens", type=int, help="max_num_batched_tokens (default: vLLM's for the GPU)")
    g.add_argument("--weight-dtype", choices=tuple(DTYPES), help="model dtype (default bf16)")
    add_async_scheduling_arg(g)
    p.add_argument("--json", action="store_true", help="print the run's counts as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def run(args: argparse.Namespace) -> int:
    from sim.cli.common import CliError
    from sim.fidelity.observe import ObserveOptions, observe
    from sim.fidelity.observe_record import EngineGuess

    for name in ("tp", "max_num_seqs", "max_batched_tokens", "max_concurrency"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise CliError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.gpu:
        from models.gpus import get_gpu

        get_gpu(args.gpu)  # an unknown GPU is one line before anything is sent
    trace = trace_from_args(args)
    out = args.out or f"observe-{datetime.datetime.now(datetime.UTC):%Y%m%d-%H%M%S}"
    guess = EngineGuess(model=args.model_config, gpu=args.gpu, tp=args.tp, max_num_seqs=args.max_num_seqs,
                        max_batched_tokens=args.max_batched_tokens, weight_dtype=args.weight_dtype,
                        async_scheduling=args.async_scheduling)
    opts = ObserveOptions(args.url, args.model, speedup=args.speedup, max_concurrency=args.max_concurrency,
                          request_timeout_s=args.timeout_s, seed=args.seed, guess=guess,
                          scrape_interval_s=args.scrape_interval_s)
    bar = None
    if not args.no_progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(trace), desc="requests", unit="req", file=sys.stderr, leave=False)

    def progress(o: Any) -> None:
        if bar is not None:
            bar.update(o.completed + o.failed - bar.n)
            if o.failed:
                bar.set_postfix(failed=o.failed)

    def say(line: str) -> None:
        (bar.write if bar is not None else print)(line, file=sys.stderr)

    try:
        outcome = asyncio.run(observe(trace, opts, out, say=say, progress=progress))
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        import json
        from pathlib import Path

        print_json(json.loads((Path(out) / "meta.json").read_text())["observed"])
    else:
        fails = ", ".join(f"{n} {k}" for k, n in sorted(outcome.failures.items()))
        print(f"{outcome.completed} of {outcome.planned} requests completed in {outcome.duration_s:.1f} s"
              + (f"; failed: {fails}" if fails else "") + (f"; not sent: {outcome.planned - outcome.sent}"
                                                             if outcome.sent < outcome.planned else "")
              + f"; {outcome.scrapes} /metrics samples")
        print(f"wrote {out} (python -m sim validate {out})")
    return 0 if outcome.completed else 1

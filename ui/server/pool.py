"""Simulations for every visitor of one server, in a bounded pool of worker processes.

Why: a run used to execute on the visitor's own Streamlit thread. With 16 people, page loads took
23 s and one long Compare made everyone wait, because CPU-bound Python on the server's threads
shares one GIL. Here runs go to `workers` processes (default: the core count); the server's
threads only wait and draw progress, so pages stay responsive.

- Three kinds of job: one scenario on one trace (`submit`), a Plan page search (`submit_search`,
  the whole sweep inline in one worker), and a Validate page replay of a measured run (`submit_validate`). Each is keyed by what determines its answer, never by the
  label a page shows: (trace digest, scenario JSON), or ("search:" + trace digest, grid and options).
- Identical jobs are computed once: a second request for a key in flight watches the same job, and
  a finished one is served from a byte-bounded LRU (ui/server/lru.py).
- The line is kept here: at most `workers` jobs are handed to the processes at a time, so a queued
  job knows its place and a job nobody watches any more leaves the line before it starts. A started one finishes, goes into the cache and leaves the
  table of jobs even if nobody polls it again (so nothing outside the bound piles up).
- Workers report progress through one queue; the first message says the job started.
- Workers run niced (WORKER_NICE), so pages are drawn first when runs fill every core.
- All workers start when the service is made (and import the simulator then), never later from a
  visitor's thread: see _stub_main for why that matters inside Streamlit.
Settings (environment, read once per server): KVSIM_RUN_WORKERS, KVSIM_RESULT_CACHE_MIB.
"""

from __future__ import annotations

import importlib.machinery
import itertools
import json
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from models.registry import added_entries, apply_entries
from sim.plan.config_search import SearchOptions
from sim.plan.workload import Workload
from sim.report.snapshot import Snapshot
from sim.scenario import Scenario
from sim.trace import Trace
from ui.server.lru import ByteLRU, CacheStats, cache_bytes_from_env
from ui.validate_job import Files, Shown, replay

WORKERS_ENV = "KVSIM_RUN_WORKERS"
CACHE_ENV = "KVSIM_RESULT_CACHE_MIB"
DEFAULT_CACHE_MIB = 256
# Workers run at this niceness: they still take every idle cycle, but when the server's page threads
# want a core (a visitor opening a page while fleet-sized runs compute) the kernel serves those first.
WORKER_NICE = 10
MAX_WORKERS = 64
RunKey = tuple[str, str]  # (trace digest, scenario JSON), ("search:" + trace digest, grid and options JSON),
# or ("validate:" + the run files' digest, "")

_progress_queue: Any = None  # set in each worker by _init_worker


def _init_worker(progress_queue: Any) -> None:
    global _progress_queue
    _progress_queue = progress_queue
    os.nice(WORKER_NICE)  # page threads first: a page load must not queue behind the server's own runs


def _warm_up(hold_s: float) -> None:
    """Import the simulator and hold the worker briefly, so each warm-up call starts its own process."""
    import sim.run.engine  # noqa: F401

    time.sleep(hold_s)


@contextmanager
def _stub_main() -> Iterator[None]:
    """multiprocessing re-runs the parent's __main__ in each new worker; inside Streamlit that is the
    page script being run. A stub whose spec is named "__main__" is skipped by the workers."""
    saved = sys.modules.get("__main__")
    stub = types.ModuleType("__main__")
    stub.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    sys.modules["__main__"] = stub
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _simulate(key: RunKey, trace: Trace, scenario_json: str, plugins: list[tuple[str, str, object]]) -> Snapshot:
    """Runs in a worker process: the simulation and its downsampled view, with progress messages.
    `plugins`: options the server registered at run time (models.registry.added_entries)."""
    from sim.fleet.replay import simulate  # the heavy import, once per worker

    apply_entries(plugins)
    _progress_queue.put((key, 0.0))
    sent = [0]

    def progress(fraction: float) -> None:
        pct = int(100 * min(max(float(fraction), 0.0), 1.0))
        if pct >= sent[0] + 5:  # a few messages, not thousands
            sent[0] = pct
            _progress_queue.put((key, pct / 100))

    result = simulate(trace, Scenario.from_json(scenario_json), progress=progress)
    return Snapshot.from_result(result, trace)


def _search(key: RunKey, workload: Workload, configs: list[Scenario], options: SearchOptions,
            plugins: list[tuple[str, str, object]]) -> dict[str, Any]:
    """Runs in a worker process: a Plan search (sim.plan.search, inline), progress after each configuration."""
    from sim.plan.search import search

    apply_entries(plugins)
    _progress_queue.put((key, 0.0))

    def progress(done: int, total: int) -> None:
        _progress_queue.put((key, done / total))

    return search(workload, configs, options, progress=progress).to_dict()


def _validate(key: RunKey, files: Files | None, plugins: list[tuple[str, str, object]],
              overrides: tuple[tuple[str, Any], ...] = (), fit: bool = False) -> Shown:
    """Runs in a worker process: a Validate page replay (ui.validate_job), and a profile fit if asked."""
    apply_entries(plugins)
    _progress_queue.put((key, 0.0))
    return replay(files, overrides, fit)


def run_key(trace: Trace, scenario: Scenario) -> RunKey:
    return trace.digest(), scenario.to_json()


def search_key(trace: Trace, configs: list[Scenario], options: SearchOptions) -> RunKey:
    """A search's answer depends on the trace, the grid and the options (SLO, target, prices, columns)."""
    described = {"configs": [c.to_dict() for c in configs], "slo": options.slo.text(), "target": options.target_rate,
                 "prices": options.prices, "shown": list(options.shown), "tol": options.tolerance}
    return "search:" + trace.digest(), json.dumps(described, sort_keys=True)


@dataclass
class _Job:
    work: Callable[..., Any]
    args: tuple[Any, ...]
    order: int
    watchers: int = 1
    future: Future | None = None  # None: waiting in this service's line, not yet handed to a worker
    fraction: float | None = None  # None: no progress message yet


@dataclass(frozen=True)
class RunState:
    """Where one job is. `place`: 1 = next to start (queued only); `result`: a Snapshot for a run,
    the search's dict for a search (done only); `error`: the job's exception (failed only)."""

    phase: Literal["queued", "running", "done", "failed", "gone"]
    place: int = 0
    fraction: float = 0.0
    result: Any = None
    error: BaseException | None = None

    @property
    def snapshot(self) -> Snapshot | None:
        return self.result if isinstance(self.result, Snapshot) else None


@dataclass(frozen=True)
class ServiceStats:
    workers: int
    running: int
    queued: int
    submitted: int  # jobs started in worker processes since the server started
    cache: CacheStats

    def line(self) -> str:
        mib = 1 << 20
        return (f"Server: {self.workers} simulation workers, {self.running} running, {self.queued} queued; "
                f"results cache {self.cache.entries} runs, {self.cache.bytes / mib:,.1f} of "
                f"{self.cache.max_bytes / mib:,.0f} MiB")


def settings_from_env(env: dict[str, str] | None = None) -> tuple[int, int]:
    """(workers, cache bytes) from the environment; a bad value is a one-line ValueError."""
    env = dict(os.environ) if env is None else env
    text = env.get(WORKERS_ENV, "").strip() or str(os.cpu_count() or 1)
    if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS:
        raise ValueError(f"{WORKERS_ENV}={text!r}: must be a whole number between 1 and {MAX_WORKERS}")
    return int(text), cache_bytes_from_env(CACHE_ENV, DEFAULT_CACHE_MIB, env)


class RunService:
    """submit -> state (poll) -> done; release when a visitor stops waiting."""

    def __init__(self, workers: int, cache_bytes: int) -> None:
        ctx = mp.get_context("spawn")  # never fork a server that runs threads
        self.workers = workers
        self._progress = ctx.Queue()
        self._pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                         initargs=(self._progress,))
        with _stub_main():  # every worker starts now, while __main__ is harmless
            warm = [self._pool.submit(_warm_up, 0.2) for _ in range(workers)]
        for future in warm:
            future.result()
        self.results: ByteLRU[Any] = ByteLRU(cache_bytes)  # Snapshots and search dicts
        self._jobs: dict[RunKey, _Job] = {}
        self._lock = threading.RLock()  # _finished may run at once, in a thread that holds it
        self._order = itertools.count()
        self._submitted = 0
        self._closed = False

    @classmethod
    def from_env(cls) -> RunService:
        return cls(*settings_from_env())

    def submit(self, trace: Trace, scenario: Scenario) -> RunKey:
        """Start (or join, or find cached) the run of `scenario` on `trace`; returns its key."""
        key = run_key(trace, scenario)
        return self._submit(key, _simulate, (key, trace, key[1], added_entries()))

    def submit_search(self, trace: Trace, configs: list[Scenario], options: SearchOptions) -> RunKey:
        """Start (or join, or find cached) a Plan search of `configs` on `trace`; returns its key."""
        key = search_key(trace, configs, options)
        return self._submit(key, _search, (key, Workload(trace=trace), configs, options, added_entries()))

    def submit_validate(self, files: Files | None, digest: str, overrides: tuple[tuple[str, Any], ...] = (),
                        fit: bool = False) -> RunKey:
        """Start (or join, or find cached) the replay of a measured run; `digest`: files_digest(files,
        overrides, fit)."""
        key = ("validate:" + digest, "")
        return self._submit(key, _validate, (key, files, added_entries(), overrides, fit))

    def _submit(self, key: RunKey, work: Callable[..., Any], args: tuple[Any, ...]) -> RunKey:
        if self.results.get(key) is not None:
            return key
        with self._lock:
            job = self._jobs.get(key)
            if job is not None:
                job.watchers += 1
                return key
            self._jobs[key] = _Job(work, args, next(self._order))
            self._dispatch()
        return key

    def _dispatch(self) -> None:
        """Hand waiting jobs to free workers, oldest first. The line is kept here, not in the executor:
        an executor marks a few queued futures as running ahead of time, and those cannot be cancelled."""
        with self._lock:
            if self._closed:
                return
            waiting = sorted((j.order, key) for key, j in self._jobs.items() if j.future is None)
            free = self.workers - sum(1 for j in self._jobs.values() if j.future is not None and not j.future.done())
            for _, key in waiting[:max(free, 0)]:
                job = self._jobs[key]
                job.future = self._pool.submit(job.work, *job.args)
                self._submitted += 1
                job.future.add_done_callback(lambda done, key=key: self._finished(key, done))

    def _finished(self, key: RunKey, future: Future) -> None:
        """A job ended (in the pool's thread): cache its result, forget the job if nobody watches it,
        start the next one in line."""
        with self._lock:
            if future.exception() is None:
                self.results.put(key, future.result())
            job = self._jobs.get(key)
            if job is not None and job.future is future and job.watchers <= 0:
                del self._jobs[key]
            self._dispatch()

    def state(self, key: RunKey) -> RunState:
        self._drain_progress()
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and job.future is not None and job.future.done():
                del self._jobs[key]
                error = job.future.exception()
                if error is not None:
                    return RunState("failed", error=error)
                return RunState("done", result=job.future.result())  # cached by _finished unless over the bound
            if job is not None and job.future is None:
                ahead = sum(1 for j in self._jobs.values() if j.future is None and j.order < job.order)
                return RunState("queued", place=ahead + 1)
            if job is not None:
                return RunState("running", fraction=job.fraction or 0.0)
        cached = self.results.get(key)
        return RunState("done", result=cached) if cached is not None else RunState("gone")

    def release(self, key: RunKey) -> bool:
        """One visitor stops waiting; the last one drops the job if it is still in line. True if dropped."""
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                return False
            job.watchers -= 1
            if job.watchers > 0:
                return False
            if job.future is None:
                del self._jobs[key]
                return True
            if job.future.done():
                del self._jobs[key]
            return False  # a running one finishes, is cached and leaves in _finished

    def stats(self) -> ServiceStats:
        self._drain_progress()
        with self._lock:
            running = sum(1 for j in self._jobs.values() if j.future is not None and not j.future.done())
            queued = sum(1 for j in self._jobs.values() if j.future is None)
            return ServiceStats(self.workers, running, queued, self._submitted, self.results.stats())

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _drain_progress(self) -> None:
        with self._lock:
            while True:
                try:
                    key, fraction = self._progress.get_nowait()
                except queue_mod.Empty:
                    return
                job = self._jobs.get(key)
                if job is not None:
                    job.fraction = fraction

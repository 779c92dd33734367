"""Under concurrent load the server's caches stay within their byte bounds (issue 18), and what the
server holds after the load is the caches' contents, not a pile of finished jobs: memory goes back
towards the idle level when the caches are emptied.

Many visitors at once (threads, as Streamlit runs sessions): each asks the shared RunService for
runs of its own, some stop waiting half way (the job finishes unwatched), and others upload traces
into the trace cache. A sampler reads both caches' byte totals all along.
"""

from __future__ import annotations

import gc
import threading
import time
import tracemalloc

import pytest

from sim.scenario import Scenario
from sim.trace import parse_synthetic_spec
from ui import trace_picker
from ui.server.pool import RunService

MiB = 1 << 20
RESULTS_BOUND = 1 * MiB
TRACE_BOUND = 1 * MiB
VISITORS, RUNS_EACH, UPLOADS = 6, 5, 24


def _visitor(service: RunService, trace, index: int, errors: list[str]) -> None:
    for run in range(RUNS_EACH):
        scenario = Scenario(model="llama-3-8b", kv_budget_gib=1.0, seed=1000 * index + run)
        key = service.submit(trace, scenario)
        if run == RUNS_EACH - 1 and index % 2:  # this visitor leaves without waiting for its last run
            service.release(key)
            continue
        deadline = time.monotonic() + 300
        while (state := service.state(key)).phase in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.02)
        if state.phase != "done":
            errors.append(f"visitor {index} run {run}: {state.phase} {state.error}")


def _uploader(errors: list[str]) -> None:
    for i in range(UPLOADS):  # distinct files, as different people upload different traces
        data = parse_synthetic_spec(f"preset=sharegpt-like,n=2000,rate=5,seed={i}").generate().df.to_csv(index=False)
        trace = trace_picker._load_upload(data.encode(), f"upload-{i}.csv")
        if len(trace) != 2000:
            errors.append(f"upload {i}: {len(trace)} rows")


@pytest.mark.slow
def test_caches_stay_within_their_bounds_under_concurrent_load(monkeypatch):
    monkeypatch.setenv(trace_picker.TRACE_CACHE_ENV, str(TRACE_BOUND // MiB))
    trace_picker.trace_cache.clear()  # a fresh cache_resource, made with the bound above
    traces = trace_picker.trace_cache()
    assert traces.max_bytes == TRACE_BOUND
    trace = parse_synthetic_spec("preset=sharegpt-like,n=300,rate=20,seed=3").generate()
    service = RunService(workers=2, cache_bytes=RESULTS_BOUND)
    gc.collect()
    tracemalloc.start()
    idle = tracemalloc.get_traced_memory()[0]
    highest = {"results": 0, "traces": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            highest["results"] = max(highest["results"], service.stats().cache.bytes)
            highest["traces"] = max(highest["traces"], traces.stats().bytes)
            time.sleep(0.005)

    errors: list[str] = []
    sampler = threading.Thread(target=sample)
    workers = [threading.Thread(target=_visitor, args=(service, trace, i, errors)) for i in range(VISITORS)]
    workers.append(threading.Thread(target=_uploader, args=(errors,)))
    try:
        sampler.start()
        for t in workers:
            t.start()
        for t in workers:
            t.join(600)
        deadline = time.monotonic() + 120
        while service._jobs and time.monotonic() < deadline:  # the unwatched runs finish and leave
            time.sleep(0.05)
        stop.set()
        sampler.join()
        assert not errors, errors
        results = service.stats()
        left = VISITORS // 2  # runs whose visitor left: dropped if still in line, else finished
        assert VISITORS * RUNS_EACH - left <= results.submitted <= VISITORS * RUNS_EACH and not service._jobs
        assert results.cache.entries < results.submitted  # more than fits: the LRU evicted
        assert traces.stats().entries < UPLOADS
        assert 0 < highest["results"] <= RESULTS_BOUND and 0 < highest["traces"] <= TRACE_BOUND
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - idle
        # what stays is the two caches' contents (each within its bound) and little else
        assert held <= RESULTS_BOUND + TRACE_BOUND + 2 * MiB, f"{held / MiB:.1f} MiB held after the load"
        service.results.clear()
        traces.clear()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0] - idle
        assert after <= 1 * MiB, f"{after / MiB:.1f} MiB still held after the caches were emptied"
    finally:
        stop.set()
        tracemalloc.stop()
        service.shutdown()
        trace_picker.trace_cache.clear()

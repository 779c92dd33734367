"""The server's shared run service: worker processes, runs computed once per (trace, scenario),
place in line and release of queued runs, byte-bounded caches, one-line errors from workers."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from models.spec import SpecError
from sim.run.engine import simulate
from sim.scenario import Scenario
from sim.trace import parse_synthetic_spec
from ui.server.lru import ByteLRU, cache_bytes_from_env, size_of
from ui.server.pool import RunService, run_key, settings_from_env

TRACE = parse_synthetic_spec("preset=sharegpt-like,n=60,rate=20,seed=3").generate()
SMALL = Scenario(model="llama-3-8b", kv_budget_gib=1.0)


def wait(service: RunService, key, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = service.state(key)
        if state.phase in ("done", "failed", "gone"):
            return state
        time.sleep(0.05)
    raise AssertionError(f"run {key[1][:40]} did not finish in {timeout_s} s")


@pytest.fixture(scope="module")
def one_worker():
    service = RunService(workers=1, cache_bytes=64 << 20)
    yield service
    service.shutdown()


def test_byte_lru_keeps_under_its_bound_and_evicts_least_recent():
    frame = pd.DataFrame({"x": range(1000)})  # 8,000 bytes of data + index
    each = size_of(frame)
    cache: ByteLRU[pd.DataFrame] = ByteLRU(max_bytes=3 * each)
    for i in range(10):
        cache.put(i, frame.copy())
        assert cache.stats().bytes <= cache.max_bytes
        if i == 5:
            assert cache.get(4) is not None  # touched: 4 is now the most recent but one
    assert cache.stats().entries == 3 and cache.get(9) is not None and cache.get(0) is None
    big = pd.DataFrame({"x": range(100_000)})
    assert cache.put("big", big) is big and cache.get("big") is None  # larger than the bound: served, not kept
    with pytest.raises(ValueError, match="KVSIM_X=.*between 1 and"):
        cache_bytes_from_env("KVSIM_X", 256, {"KVSIM_X": "0"})
    assert cache_bytes_from_env("KVSIM_X", 256, {}) == 256 << 20


def test_settings_from_env_one_line_errors():
    assert settings_from_env({"KVSIM_RUN_WORKERS": "3", "KVSIM_RESULT_CACHE_MIB": "64"}) == (3, 64 << 20)
    for bad in ("0", "-1", "two", "1000"):
        with pytest.raises(ValueError, match="KVSIM_RUN_WORKERS"):
            settings_from_env({"KVSIM_RUN_WORKERS": bad})


def test_identical_runs_in_flight_are_computed_once_and_match_a_direct_run(one_worker):
    before = one_worker.stats().submitted
    first = one_worker.submit(TRACE, SMALL)
    second = one_worker.submit(TRACE, SMALL)  # another page, same scenario, while the first is in flight
    assert first == second == run_key(TRACE, SMALL)
    state = wait(one_worker, first)
    assert state.phase == "done"
    assert one_worker.stats().submitted == before + 1
    direct = simulate(TRACE, SMALL).summary
    assert state.snapshot.summary["completed"] == direct["completed"]
    assert state.snapshot.summary["ttft_s"]["p99"] == pytest.approx(direct["ttft_s"]["p99"])
    one_worker.submit(TRACE, SMALL)  # finished: served from the cache
    assert one_worker.state(first).phase == "done" and one_worker.stats().submitted == before + 1


def test_queued_runs_know_their_place_and_can_be_released(one_worker):
    keys = [one_worker.submit(TRACE, Scenario(model="llama-3-8b", kv_budget_gib=1.0, seed=s)) for s in (11, 12, 13, 14)]
    last = one_worker.state(keys[-1])
    assert last.phase == "queued" and last.place >= 2
    assert one_worker.state(keys[-2]).place < last.place
    assert one_worker.release(keys[-1]) is True  # nobody else watches it and it has not started
    assert one_worker.state(keys[-1]).phase == "gone"
    deadline = time.monotonic() + 60
    while one_worker.state(keys[0]).phase == "queued" and time.monotonic() < deadline:
        time.sleep(0.01)
    nxt = one_worker.state(keys[1])
    assert nxt.phase == "queued" and nxt.place == 1  # next in line while the one worker is busy
    assert one_worker.release(keys[1]) is True  # the next in line can be dropped too
    assert one_worker.state(keys[1]).phase == "gone" and one_worker.state(keys[2]).place == 1
    for key in (keys[0], keys[2]):
        assert wait(one_worker, key).phase == "done"
    assert one_worker.stats().queued == 0 and one_worker.stats().running == 0


def test_worker_errors_come_back_as_the_same_one_line_error(one_worker):
    too_big = Scenario(model="llama-3-70b", gpu="l4", kv_budget_gib=None)
    state = wait(one_worker, one_worker.submit(TRACE, too_big))
    assert state.phase == "failed" and isinstance(state.error, SpecError) and "\n" not in str(state.error)


def test_result_cache_stays_under_its_bound_as_runs_pile_up():
    service = RunService(workers=2, cache_bytes=1 << 20)
    try:
        sizes = []
        for seed in range(6):
            state = wait(service, service.submit(TRACE, Scenario(model="llama-3-8b", kv_budget_gib=1.0, seed=seed)))
            assert state.phase == "done"
            sizes.append(size_of(state.snapshot))
            stats = service.stats().cache
            assert stats.bytes <= stats.max_bytes
        assert stats.entries < 6 or sum(sizes) <= stats.max_bytes  # something was evicted unless all fit
    finally:
        service.shutdown()


def _two_pages_same_scenario() -> None:
    import streamlit as st

    from sim.scenario import Scenario
    from sim.trace import parse_synthetic_spec
    from ui.runner import run_scenario, run_scenarios, server_stats

    trace = parse_synthetic_spec("preset=sharegpt-like,n=40,rate=10,seed=5").generate()
    scenario = Scenario(model="llama-3-8b", kv_budget_gib=1.0, seed=99)
    before = server_stats().submitted
    a = run_scenario(trace, scenario, "Simulating (Simulate page)")
    compared = run_scenarios(trace, {"baseline": scenario, "other": scenario.replace(seed=98)}, catch=(ValueError,))
    b = compared["baseline"]  # the Compare page's path, under another label
    st.write(f"submitted {server_stats().submitted - before}; same summary {a.summary == b.summary}")


def test_the_same_scenario_from_two_pages_simulates_once():
    at = AppTest.from_function(_two_pages_same_scenario, default_timeout=180).run()
    assert not at.exception
    assert at.markdown[-1].value == "submitted 2; same summary True"  # the baseline joined a's run; "other" is new


def test_a_plan_search_runs_once_in_a_worker_and_matches_the_inline_search(one_worker):
    from sim.plan.config_search import SearchOptions
    from sim.plan.search import search
    from sim.plan.slo import parse_slo
    from sim.plan.workload import Workload

    configs = [SMALL, SMALL.replace(kv_dtype="fp8")]
    options = SearchOptions(parse_slo("ttft_p99=2"))
    before = one_worker.stats().submitted
    key = one_worker.submit_search(TRACE, configs, options)
    assert one_worker.submit_search(TRACE, configs, options) == key and key[0].startswith("search:")
    state = wait(one_worker, key)
    assert state.phase == "done" and one_worker.stats().submitted == before + 1
    inline = search(Workload(trace=TRACE), configs, options).to_dict()
    assert [r["max_rate_per_s"] for r in state.result["rows"]] == [r["max_rate_per_s"] for r in inline["rows"]]
    other = one_worker.submit_search(TRACE, configs, SearchOptions(parse_slo("ttft_p99=1")))
    assert other != key  # the options are part of the key
    one_worker.release(other)


def test_a_run_nobody_waits_for_any_more_is_cached_and_leaves_the_job_table(one_worker):
    longer = parse_synthetic_spec("preset=sharegpt-like,n=3000,rate=20,seed=4").generate()  # runs for a while
    key = one_worker.submit(longer, Scenario(model="llama-3-8b", kv_budget_gib=1.0, seed=31))
    deadline = time.monotonic() + 120
    while (phase := one_worker.state(key).phase) == "queued" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert phase == "running"
    assert one_worker.release(key) is False  # started: it finishes
    while key in one_worker._jobs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert key not in one_worker._jobs and one_worker.results.get(key) is not None



def test_a_validate_replay_runs_once_in_a_worker_and_matches_the_inline_replay(one_worker):
    """The Validate page's replay is a simulation too: it goes to the pool (not the page's thread),
    keyed by the run files' bytes, and a bad upload comes back as the same one-line RunError."""
    from sim.fidelity.run_record import RunError
    from ui.validate_job import files_digest, replay

    before = one_worker.stats().submitted
    key = one_worker.submit_validate(None, files_digest(None))
    assert one_worker.submit_validate(None, files_digest(None)) == key and key[0].startswith("validate:")
    state = wait(one_worker, key)
    assert state.phase == "done" and one_worker.stats().submitted == before + 1
    inline = replay(None)
    assert state.result.engine == inline.engine
    pd.testing.assert_frame_equal(state.result.table, inline.table)
    partial = (("meta.json", b"{}"),)
    bad = wait(one_worker, one_worker.submit_validate(partial, files_digest(partial)))
    assert bad.phase == "failed" and isinstance(bad.error, RunError)
    assert str(bad.error) == "upload: add requests.jsonl, timeseries.csv (or one .zip holding the run's files)"

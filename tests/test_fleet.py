"""The fleet (sim/fleet): routers in the loop, exact with skip-ahead, round-robin == --replicas."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.core.routing.registry import ROUTERS
from sim.fleet.replay import simulate as fleet_simulate
from sim.run.engine import simulate
from sim.scenario import Scenario
from sim.trace import load_trace, synthetic

BASE = Scenario(model="llama-3-8b", gpu="h100-sxm", kv_budget_gib=1.0, max_model_len=4096, replicas=3)


def small_trace(n=240, rate=30.0, seed=2):
    return synthetic(n=n, rate=rate, input="lognormal:mean=300:sigma=0.8", output="lognormal:mean=150:sigma=0.8",
                     seed=seed)


def test_round_robin_fleet_reproduces_replicas_step_for_step():
    trace = small_trace()
    old, new = simulate(trace, BASE), fleet_simulate(trace, BASE)
    pd.testing.assert_frame_equal(old.requests, new.requests)
    pd.testing.assert_frame_equal(old.steps, new.steps)
    assert old.summary["num_steps"] == new.summary["num_steps"]
    assert new.summary["routing_imbalance"] == pytest.approx(240 / (240 / 3) / 3, abs=0.02)


@pytest.mark.parametrize("router", [n for n in ROUTERS if not ROUTERS[n].state_free])
def test_state_dependent_routers_give_the_same_requests_with_and_without_skip_ahead(router):
    trace = small_trace()
    sc = BASE.replace(router=router)
    fast = fleet_simulate(trace, sc)
    slow = fleet_simulate(trace, sc, skip_ahead=False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
    assert fast.summary["num_steps"] == slow.summary["num_steps"]
    assert [r["routed"] for r in fast.summary["fleet"]["replicas"]] == [r["routed"] for r in slow.summary["fleet"]["replicas"]]
    assert fast.summary["completed"] == len(trace)


@pytest.mark.parametrize("router", ["kv-precise", "least-kv"])
def test_one_replica_behind_a_state_dependent_router_is_the_single_replica_replay(router):
    """One replica behind a router that reads views runs its router process on SimPy's clock (the
    single replica's DirectClock drives one engine and nothing else: it crashed here) and serves
    every request as the single-replica replay does."""
    trace = small_trace()
    sc = BASE.replace(replicas=1)
    one, routed = simulate(trace, sc), fleet_simulate(trace, sc.replace(router=router))
    pd.testing.assert_frame_equal(one.requests, routed.requests)
    assert routed.summary["num_steps"] == one.summary["num_steps"]


def test_kv_aware_routing_with_prefix_caching_is_exact_under_skip_ahead(samples_dir):
    trace = load_trace(samples_dir / "mooncake_small.jsonl")
    sc = BASE.replace(prefix_caching=True, kv_budget_gib=2.0, max_model_len=None, router="kv-precise", replicas=2)
    fast, slow = fleet_simulate(trace, sc), fleet_simulate(trace, sc, skip_ahead=False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
    assert fast.summary["prefix_cache_hit_rate"] == slow.summary["prefix_cache_hit_rate"]


def test_least_outstanding_balances_better_than_session_affinity():
    trace = small_trace(n=300, rate=60.0)
    lor = fleet_simulate(trace, BASE.replace(router="least-outstanding"))
    assert lor.summary["routing_imbalance"] < 1.15
    assert sum(r["routed"] for r in lor.summary["fleet"]["replicas"]) == 300


def test_unknown_router_is_one_line():
    with pytest.raises(Exception, match="router='nope': must be one of round-robin"):
        BASE.replace(router="nope")


def test_compare_presets_routing_and_pd_name_every_router_and_every_split():
    from sim.plan.compare_presets import COMPARE_PRESETS

    base = BASE.replace(replicas=4, router="session")
    routing = COMPARE_PRESETS.lookup("routing").variants(base)
    assert [sc.router for sc in routing.values()] == list(ROUTERS) and all(sc.replicas == 4 for sc in routing.values())
    pd = COMPARE_PRESETS.lookup("pd").variants(base)
    assert [sc.pd for sc in pd.values()] == [None, "1:3", "2:2", "3:1"]
    assert {sc.router for sc in pd.values()} == {"session"}  # the aggregated baseline keeps the base's router


def test_sim_compare_routing_preset_runs_and_reports_imbalance(capsys):
    from sim.__main__ import main

    rc = main(["compare", "--synthetic", "n=60,rate=20", "--model", "llama-3-8b", "--kv-budget-gib", "1",
               "--replicas", "2", "--preset", "routing", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "imbalance" in out and "kv-precise" in out
    assert "P/D rows:" not in out  # the two-pool note is for P/D rows only


def test_sim_compare_says_which_pool_each_pd_column_comes_from(capsys):
    from sim.__main__ import main

    rc = main(["compare", "--synthetic", "n=20,rate=10", "--model", "llama-3-8b", "--kv-budget-gib", "1",
               "--replicas", "2", "--preset", "pd", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "P/D 1:1" in out
    assert "P/D rows: prefix_hit is the prefill pool's" in out and "the KV columns are the decode pool's" in out


def test_a_router_registered_from_outside_runs_in_the_fleet():
    from sim.core.routing.registry import RouterKind

    class Last:
        """Everything to the last replica (a test router)."""

        state_free = False

        def __init__(self, p):
            pass

        def choose(self, req, views):
            assert all(v.waiting() >= 0 and v.used_blocks() >= 0 for v in views)
            return views[-1].index

    ROUTERS.register("test-last", RouterKind("test-last", Last, False, "test"))
    try:
        res = fleet_simulate(small_trace(n=40), BASE.replace(router="test-last"))
        assert [r["routed"] for r in res.summary["fleet"]["replicas"]] == [0, 0, 40]
        assert res.summary["routing_imbalance"] == pytest.approx(3.0)
    finally:
        ROUTERS.unregister("test-last")


def test_cli_and_page_run_the_same_pd_preset(capsys):
    """One definition (sim/plan/compare_presets.py): `sim compare --preset pd` runs the Compare page's
    variants, labels and all; the aggregated baseline keeps the base's router on both."""
    import json

    from sim.__main__ import main
    from sim.core.routing.pd_split import every_split
    from ui.presets import PRESETS, preset_variants

    assert every_split(4) == ["1:3", "2:2", "3:1"] and every_split(1) == []
    rc = main(["compare", "--synthetic", "n=20,rate=10", "--model", "llama-3-8b", "--kv-budget-gib", "1",
               "--replicas", "3", "--router", "least-kv", "--preset", "pd", "--json", "--no-progress"])
    rows = json.loads(capsys.readouterr().out)
    page = preset_variants(PRESETS[5], BASE.replace(replicas=3, router="least-kv"))
    assert rc == 0 and [r["variant"] for r in rows] == list(page) == ["aggregated x3", "P/D 1:2", "P/D 2:1"]
    assert [(r["scenario"]["pd"], r["scenario"]["router"]) for r in rows] == [(sc.pd, sc.router) for sc in page.values()]


def test_what_the_router_reads_at_each_arrival_is_the_same_with_and_without_skip_ahead():
    """The router's inputs (queue, running, KV blocks in use, prefill backlog) at every arrival equal
    stepping's: a replica in a decode run has booked none of it yet, and its view computes the state
    stepping would show at the arrival (sim/fleet/live_view.py), for every replica the router reads."""
    from sim.core.routing.registry import RouterKind

    seen: list[list[tuple[int, ...]]] = []
    mid_run = [0]

    class Reader:
        """The least KV blocks in use, recording every view (a test router)."""

        state_free = False

        def __init__(self, p):
            pass

        def choose(self, req, views):
            looks = [(v.waiting(), v.running(), v.used_blocks(), v.pending_prefill_tokens()) for v in views]
            seen[-1].append(tuple(x for look in looks for x in look))
            mid_run[0] += sum(v.slot.run is not None for v in views)  # LiveView: a replica in a decode run
            return min(range(len(views)), key=lambda i: (looks[i][2], looks[i][0] + looks[i][1], i))

    ROUTERS.register("test-reader", RouterKind("test-reader", Reader, False, "test"))
    try:
        sc = BASE.replace(router="test-reader", kv_budget_gib=0.5)
        runs = []
        for skip in (True, False):
            seen.append([])
            runs.append(fleet_simulate(small_trace(n=300, rate=40.0), sc, skip_ahead=skip))
    finally:
        ROUTERS.unregister("test-reader")
    fast, slow = seen
    assert len(fast) == 300 and fast == slow
    assert mid_run[0] > 100  # many looks fell inside decode runs (their growth read from the view)
    pd.testing.assert_frame_equal(runs[0].requests, runs[1].requests)

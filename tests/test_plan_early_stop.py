"""Early-stopped search probes (sim/plan/early_stop.py): the bound never stops a probe that could
still pass (checked against np.percentile on the worst completions), and a search answers the same
rows with and without it, with fewer simulated steps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.request import FINISHED, REJECTED, RequestTable
from sim.plan import early_stop
from sim.plan.bracket import largest_passing
from sim.plan.config_search import SearchOptions
from sim.plan.early_stop import MissTally, certain_misses
from sim.plan.executors import chains, groups
from sim.plan.grid import expand, parse_grid
from sim.plan.search import search
from sim.plan.slo import parse_slo
from sim.plan.workload import Workload
from sim.scenario import Scenario


def table_with(ttfts: list[float | None], rejected: int = 0) -> RequestTable:
    """Requests arriving at 0; a float: finished with that TTFT (and TPOT 0); None: still running."""
    n = len(ttfts) + rejected
    t = RequestTable.create(np.zeros(n), np.full(n, 10), np.full(n, 2))
    for i, v in enumerate(ttfts):
        if v is not None:
            t.first_token_s[i] = t.finish_s[i] = v
            t.status[i] = FINISHED
    t.status[len(ttfts):] = REJECTED
    return t


# How the interval's own runs went (sim.plan.rate_interval: it stops early too, so it takes fewer
# runs) and what a stopped probe says it missed; the interval's bounds are compared.
RUN_KEYS = ("missed_above", "rate_interval_probes", "rate_interval_cpu_s", "rate_interval_note")


def search_keys(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in RUN_KEYS}


def test_p99_of_100_is_certain_after_two_misses_not_one():
    slo = parse_slo("ttft_p99=1")
    # N = 100: h = 99 * 0.99 = 98.01, so the p99 reads sorted values 98 and 99: two misses fix it
    assert certain_misses(slo, table_with([5.0] + [None] * 99)) is None
    assert certain_misses(slo, table_with([5.0, 5.0] + [None] * 98)) is not None
    # one miss can still make the p99 miss (5 * 0.01 + 0 > 0.04) but need not: no stop
    assert np.percentile([0.0] * 99 + [5.0], 99) <= 1.0
    # rejected requests never yield a TTFT: N = 50, h = 48.51, floor 48 >= 50 - 2
    assert certain_misses(slo, table_with([5.0, 5.0] + [None] * 48, rejected=50)) is not None


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 400), data=st.data(), stat=st.sampled_from(["p50", "p90", "p99", "mean"]))
def test_a_stop_means_every_completion_misses(n, data, stat):
    """When the bound fires, the statistic misses even on the kindest end: every running request
    finishing with TTFT 0, or never finishing."""
    values = data.draw(st.lists(st.one_of(st.none(), st.floats(0, 3)), min_size=n, max_size=n))
    slo = parse_slo(f"ttft_{stat}=1")
    if certain_misses(slo, table_with(values)) is None:
        return
    known = [v for v in values if v is not None]
    for rest in ([0.0] * (n - len(known)), []):
        final = np.array(known + rest)
        got = final.mean() if stat == "mean" else np.percentile(final, float(stat[1:]))
        assert got > 1.0


@settings(max_examples=200, deadline=None)
@given(ttfts=st.lists(st.floats(0, 3), min_size=1, max_size=300), data=st.data(),
       stat=st.sampled_from(["p50", "p90", "p99", "mean"]))
def test_running_tally_stops_where_the_full_check_does(ttfts, data, stat):
    """Requests finish in a random order, checked every few: the running totals say 'may stop'
    exactly when certain_misses stops (quantiles), or at least then (means, confirmed by it)."""
    slo = parse_slo(f"ttft_{stat}=1")
    table = table_with([None] * len(ttfts), rejected=data.draw(st.integers(0, 5)))
    tally = MissTally(slo, table)
    order = data.draw(st.permutations(range(len(ttfts))))
    every = data.draw(st.integers(1, 20))
    new: list[int] = []  # finished since the last check, as the engine's finished_ids
    for k, i in enumerate(order, 1):
        table.first_token_s[i] = table.finish_s[i] = ttfts[i]
        table.status[i] = FINISHED
        new.append(i)
        if k % every and k != len(order):
            continue
        full = certain_misses(slo, table) is not None
        may = tally.may_stop(table, np.array(new, dtype=np.intp))
        new.clear()
        assert may == full if stat != "mean" else (may or not full)


def test_the_engine_hands_the_check_every_finished_request_once():
    """Simulation.check is called each time n_done reaches check_at, with finished_ids holding the
    requests finished since the last call: together, every finished request once."""
    from sim.run.deployment import Deployment
    from sim.run.engine import Simulation, build

    trace = Workload.from_ref("synthetic:preset=sharegpt-like,n=300,rate=8,seed=2").at(1.0)
    sim = Simulation(build(trace, Deployment.resolve(Scenario(model="llama-3-8b", gpu="h100-sxm", kv_budget_gib=1.0))))
    calls: list[tuple[int, list[int]]] = []

    def check(done: int) -> int:
        calls.append((done, list(sim.finished_ids)))
        sim.finished_ids.clear()
        return done + 7

    sim.check, sim.check_at = check, 7
    sim.run()
    seen = [r for _, ids in calls for r in ids] + sim.finished_ids
    finished = np.flatnonzero(np.isfinite(sim.s.table.finish_s))
    assert len(calls) >= 300 // 7 - 1 and sorted(seen) == finished.tolist()
    assert all(done >= 7 * (k + 1) for k, (done, _) in enumerate(calls))


@pytest.mark.slow
def test_search_rows_are_the_same_with_and_without_early_stop(monkeypatch):
    stops = []

    def counted(slo, table):
        reason = certain_misses(slo, table)
        stops.extend([reason] if reason else [])
        return reason

    monkeypatch.setattr(early_stop, "certain_misses", counted)
    workload = Workload.from_ref("synthetic:preset=sharegpt-like,n=400,rate=8,seed=2")
    configs = expand(Scenario(model="llama-3-8b", gpu="h100-sxm"), parse_grid({"kv_budget_gib": "1,8"}))
    slo = parse_slo("ttft_p99=1,tpot_p99=0.05")
    full = search(workload, configs, SearchOptions(slo, early_stop=False)).rows
    fast = search(workload, configs, SearchOptions(slo, early_stop=True)).rows
    for a, b in zip(full, fast, strict=True):
        assert a["max_rate_per_s"] > 0 and a["probes"] == b["probes"]
        assert search_keys(a) == search_keys(b)
    assert stops and all("stopped early" in s for s in stops)  # the failing probes did stop early


def test_a_near_start_brackets_in_small_steps_and_finds_the_same_edge():
    edge = 3.7  # passes up to here

    def levels(start, near):
        found = largest_passing(lambda x: x, lambda x: x <= edge, start, 0.02, near=near)
        return found.lo, [level for level, _ in found.probes]

    far_lo, far = levels(1.0, near=False)
    assert far[:3] == [1.0, 2.0, 4.0]  # the default doubles, as before
    near_lo, near = levels(3.65, near=True)
    assert near == [3.65, 3.723]  # within tol of the edge: two probes
    lo, probes = levels(0.5, near=True)  # a poor estimate still converges
    for found in (far_lo, near_lo, lo):
        assert found <= edge < found * 1.02
    assert len(probes) <= len(far) + 2  # 7.4x off: one probe more than doubling from there


def test_chains_are_runs_of_neighbours_differing_in_one_field():
    grid = parse_grid({"model": "llama-3.1-70b", "tp": "4,8", "gpu": "h100-sxm,h200", "kv_dtype": "bf16,fp8"})
    configs = expand(Scenario(), grid)
    got = [[i for i, _ in c] for c in chains(configs)]
    assert got == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(a.kv_dtype != b.kv_dtype for (_, a), (_, b) in (c for c in chains(configs)))
    assert [len(c) for c in chains(expand(Scenario(), parse_grid({"max_num_seqs": "8,16,32"})))] == [3]


def test_sibling_chains_pair_up_in_a_snake_while_two_tasks_remain():
    grid = parse_grid({"model": "llama-3.1-70b", "tp": "4,8", "gpu": "h100-sxm,h200", "kv_dtype": "bf16,fp8"})
    got = groups(expand(Scenario(), grid))
    assert [[i for i, _ in g] for g in got] == [[0, 1, 3, 2], [4, 5, 7, 6]]
    for g in got:  # every configuration follows a neighbour differing in one field
        assert all(sum(getattr(a, f) != getattr(b, f) for f in ("gpu", "kv_dtype")) == 1
                   for (_, a), (_, b) in zip(g, g[1:], strict=False))
    two = expand(Scenario(), parse_grid({"gpu": "h100-sxm,h200", "kv_dtype": "bf16,fp8"}))
    assert [[i for i, _ in g] for g in groups(two)] == [[0, 1], [2, 3]]  # two chains: both cores keep one each
    # the CLI's order (gpu before tp): the same pairs, by GPU; chains differing in TP never pair
    cli = expand(Scenario(), parse_grid({"model": "llama-3.1-70b", "gpu": "h100-sxm,h200", "tp": "4,8",
                                         "kv_dtype": "bf16,fp8"}))
    assert [[i for i, _ in g] for g in groups(cli)] == [[0, 1, 5, 4], [2, 3, 7, 6]]
    by_tp = expand(Scenario(), parse_grid({"tp": "1,2,4,8", "kv_dtype": "bf16,fp8"}))
    assert [len(g) for g in groups(by_tp)] == [2, 2, 2, 2]


@pytest.mark.slow
def test_reused_starts_give_the_same_rates_within_tolerance():
    workload = Workload.from_ref("synthetic:preset=sharegpt-like,n=400,rate=8,seed=2")
    configs = expand(Scenario(model="llama-3-8b", gpu="h100-sxm"), parse_grid({"max_num_seqs": "64,256", "kv_dtype": "bf16,fp8"}))
    slo = parse_slo("ttft_p99=1,tpot_p99=0.05")
    full = search(workload, configs, SearchOptions(slo, reuse=False)).rows
    fast = search(workload, configs, SearchOptions(slo, reuse=True)).rows
    for a, b in zip(full, fast, strict=True):
        assert abs(b["max_rate_per_s"] / a["max_rate_per_s"] - 1) <= 0.02
    assert sum(r["probes"] for r in fast) < sum(r["probes"] for r in full)


@pytest.mark.slow
def test_a_fleet_behind_a_router_stops_early_with_the_same_rows(monkeypatch):
    """Two replicas behind least-outstanding: the check hook on a FleetSimulation stops their misses."""
    stops = []

    def counted(slo, table):
        reason = certain_misses(slo, table)
        stops.extend([reason] if reason else [])
        return reason

    monkeypatch.setattr(early_stop, "certain_misses", counted)
    workload = Workload.from_ref("synthetic:preset=sharegpt-like,n=300,rate=8,seed=3")
    configs = [Scenario(model="llama-3-8b", gpu="h100-sxm", replicas=2, router="least-outstanding", kv_budget_gib=1.0)]
    slo = parse_slo("ttft_p99=1")
    full = search(workload, configs, SearchOptions(slo, early_stop=False, reuse=False)).rows
    fast = search(workload, configs, SearchOptions(slo)).rows
    assert full[0]["max_rate_per_s"] > 0 and stops
    assert search_keys(full[0]) == search_keys(fast[0])

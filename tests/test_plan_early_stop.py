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
from sim.plan.config_search import SearchOptions
from sim.plan.early_stop import certain_misses
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
        assert {k: v for k, v in a.items() if k != "missed_above"} == {k: v for k, v in b.items() if k != "missed_above"}
    assert stops and all("stopped early" in s for s in stops)  # the failing probes did stop early

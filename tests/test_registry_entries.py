"""What the fleet and the forms need to know of a tier kind, a CPU-tier scope or a router is an
attribute of its registry entry, so a newly registered one works without edits elsewhere: a tier
kind's routing cost (`hit_cost`), a scope's sharing (`per_node`), a router's weight knob
(`kv_weighted`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from sim.core.routing.registry import ROUTERS, RouterKind
from sim.core.routing.routers import KVAwarePrecise, RouterParams
from sim.core.routing.view import RoutedRequest
from sim.core.tiers.kinds import TIERS
from sim.core.tiers.scope import TIER_SCOPES, TierScope
from sim.fleet.replay import simulate
from tests.test_kv_router_cost import Numbers
from tests.test_tier_fleet_scope import BASE, repeat_trace  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parent.parent
REQ = RoutedRequest(0, 0.0, 128, list(range(8)), None)


@pytest.fixture
def registered():
    """Register entries for one test and take them out after it."""
    added: list[tuple[object, str]] = []

    def add(registry, name, entry):
        registry.register(name, entry)
        added.append((registry, name))
        return entry

    yield add
    for registry, name in added:
        registry.unregister(name)  # type: ignore[attr-defined]


def test_a_new_tier_kind_brings_its_own_routing_cost(registered):
    registered(TIERS, "test-cxl", replace(TIERS.lookup("cpu"), name="test-cxl", hit_cost=0.25))
    registered(TIERS, "test-plain", replace(TIERS.lookup("cpu"), name="test-plain", hit_cost=1.0))
    router = KVAwarePrecise(RouterParams(1))
    # 128 tokens: 32 cached on the GPU, 64 in the new tier, 32 to compute
    cxl = Numbers(0, cached=32, tiers={"test-cxl": 64})
    assert router.uncached_blocks(REQ, cxl) == pytest.approx((32 + 0.25 * 64) / 16)
    assert router.uncached_blocks(REQ, Numbers(0, cached=32, tiers={"test-plain": 64})) == 6  # as recompute
    assert TIERS.lookup("gpu").hit_cost == 0.0 and TIERS.lookup("cpu").hit_cost == 0.1


def test_a_tier_kind_stating_no_cost_counts_as_recompute():
    from sim.core.tiers.kinds import TierKind

    assert TierKind("x", "medium", "replica", None, None, 0.0, False, "source").hit_cost == 1.0


def test_a_new_per_node_scope_shares_the_cpu_tier_as_node_does(registered, repeat_trace):  # noqa: F811
    registered(TIER_SCOPES, "test-rack", TierScope("test-rack", "one CPU tier per node (test)", per_node=True))
    shared = simulate(repeat_trace, BASE.replace(cpu_tier_scope="test-rack"))
    node = simulate(repeat_trace, BASE.replace(cpu_tier_scope="node"))
    assert list(shared.summary["tier_occupancy"]) == ["cpu/node0"]
    assert shared.summary["tier_hit_tokens"] == node.summary["tier_hit_tokens"] and shared.summary["tier_hit_tokens"]["cpu"] > 0


class Heavy(KVAwarePrecise):
    """A KV-aware test router (module level: the page pickles what it caches)."""


def test_a_new_kv_weighted_router_gets_the_weight_widget(registered):
    registered(ROUTERS, "test-heavy", RouterKind("test-heavy", Heavy, False, "test", kv_weighted=True))
    assert ROUTERS.lookup("kv-precise").kv_weighted and ROUTERS.lookup("kv-approx").kv_weighted
    assert not ROUTERS.lookup("least-kv").kv_weighted  # a "kv" name is not what decides
    at = AppTest.from_file(str(ROOT / "app_pages" / "simulate.py"), default_timeout=180)
    at.query_params.update({"trace_first": "20", "replicas": "2", "router": "test-heavy"})
    at.run()
    assert not at.exception and not at.error
    assert at.number_input(key="kv_w").value == 1.0

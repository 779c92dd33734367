"""The shape of a scenario's fleet: its pools, how many GPUs they take, and which node each replica
is on (Scenario.gpus_per_node GPUs per node, 8 as a DGX/HGX H100 has: replicas of one node share its
CPU memory and NVMe, the scope of a node-wide KV tier)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.routing.pd_split import parse_pd
from sim.core.tiers import scope
from sim.scenario import Scenario


@dataclass(frozen=True)
class Pool:
    role: str  # "aggregated", "prefill" or "decode"
    replicas: int
    tp: int
    gpus_per_node: int = 8

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp

    @property
    def replicas_per_node(self) -> int:
        """Replicas that share one node (a replica wider than a node spans several: 1)."""
        return scope.replicas_per_node(self.tp, self.gpus_per_node)

    def node_of(self, replica: int) -> int:
        """The node replica `replica` of this pool runs on (replicas fill nodes in order)."""
        return scope.node_of(replica, self.tp, self.gpus_per_node)


def pools_of(scenario: Scenario) -> tuple[Pool, ...]:
    """One aggregated pool, or a prefill and a decode pool for `pd`."""
    if not scenario.pd:
        return (Pool("aggregated", scenario.replicas, scenario.tp, scenario.gpus_per_node),)
    n_p, n_d = parse_pd(scenario.pd)
    per_node = scenario.gpus_per_node
    return (Pool("prefill", n_p, scenario.prefill_tp or scenario.tp, per_node),
            Pool("decode", n_d, scenario.decode_tp or scenario.tp, per_node))


def fleet_gpus(scenario: Scenario) -> int:
    """GPUs the whole fleet takes (replicas x TP over its pools)."""
    return sum(p.gpus for p in pools_of(scenario))

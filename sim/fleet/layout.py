"""The shape of a scenario's fleet: its pools, how many GPUs they take, and which node each replica
is on (GPUS_PER_NODE GPUs per node, as a DGX/HGX H100 has 8: replicas of one node share its CPU
memory and NVMe, the scope of a node-wide KV tier)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.routing.pd_split import parse_pd
from sim.scenario import Scenario

GPUS_PER_NODE = 8  # NVIDIA DGX/HGX H100 and H200: 8 GPUs per node


@dataclass(frozen=True)
class Pool:
    role: str  # "aggregated", "prefill" or "decode"
    replicas: int
    tp: int

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp

    @property
    def replicas_per_node(self) -> int:
        """Replicas that share one node (a replica wider than a node spans several: 1)."""
        return max(1, GPUS_PER_NODE // self.tp)

    def node_of(self, replica: int) -> int:
        """The node replica `replica` of this pool runs on (replicas fill nodes in order)."""
        return replica // self.replicas_per_node


def pools_of(scenario: Scenario) -> tuple[Pool, ...]:
    """One aggregated pool, or a prefill and a decode pool for `pd`."""
    if not scenario.pd:
        return (Pool("aggregated", scenario.replicas, scenario.tp),)
    n_p, n_d = parse_pd(scenario.pd)
    return (Pool("prefill", n_p, scenario.prefill_tp or scenario.tp), Pool("decode", n_d, scenario.decode_tp or scenario.tp))


def fleet_gpus(scenario: Scenario) -> int:
    """GPUs the whole fleet takes (replicas x TP over its pools)."""
    return sum(p.gpus for p in pools_of(scenario))

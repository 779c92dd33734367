"""Who shares a CPU KV tier: one per replica (its GPUs' pinned host memory) or one per node.

With `node`, the replicas of one node (Scenario.gpus_per_node GPUs) hand the same tier object to
their TierStacks (sim/run/tier_setup.py): a prompt stored by one replica hits in the CPU tier for
another, as LMCache's shared CPU backend or Dynamo's host-memory KV pool allow. Its size is
`cpu_tier_gib` x the replicas on that node, so both scopes hold the same DRAM and compare fairly.
Each replica keeps its own PCIe links (one x16 link per GPU to the host): loads by two replicas do
not queue on each other; the node's DRAM bandwidth (hundreds of GB/s) is above PCIe's and not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.registry import Registry


@dataclass(frozen=True)
class TierScope:
    name: str
    description: str
    per_node: bool = False  # one tier for the replicas of a node (tier_setup hands them the same object)


TIER_SCOPES: Registry[TierScope] = Registry("CPU tier scope", ((s.name, s) for s in (
    TierScope("replica", "one CPU tier per replica (its GPUs' pinned host memory); `cpu_tier_gib` each"),
    TierScope("node", "one CPU tier per node, shared by its replicas; `cpu_tier_gib` x the replicas on the node",
              per_node=True),
)))


def replicas_per_node(tp: int, gpus_per_node: int) -> int:
    """Replicas that share one node: whole replicas only (a replica wider than a node spans several: 1)."""
    return max(1, gpus_per_node // tp)


def node_of(replica: int, tp: int, gpus_per_node: int) -> int:
    """The node replica `replica` runs on, replicas filling nodes in order: the one placement the
    fleet's pools and the node-wide KV tiers (NVMe, a node-shared CPU tier) both use."""
    return replica // replicas_per_node(tp, gpus_per_node)

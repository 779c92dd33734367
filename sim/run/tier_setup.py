"""Build each replica's KV tier stack (sim/core/tiers/) from a scenario: sizes, links, sharing.

Sharing, as real deployments have it: the CPU tier is one per replica (its GPUs' pinned host
memory), or with Scenario.cpu_tier_scope "node" one per node handed to all its replicas
(sim/core/tiers/scope.py), the NVMe tier one per
node of Scenario.gpus_per_node GPUs (8 by default), the remote store one for the whole run. A tier of 0 GiB is absent.

Links (sim/core/link.py, FIFO per direction): each replica has its GPUs' host links, PCIe per GPU
per direction (the GPU entry's host_link_bandwidth or --host-link-gb-s) x TP, since each rank
moves its own shard; its NICs (the remote tier's rate per GPU x TP); each node its NVMe drive's
read and write. A load from NVMe or the remote store lands in host memory and crosses PCIe into
the GPU (vLLM's tiering promotes secondary tiers through the CPU tier): its path holds both links.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.core.link import SharedLink
from sim.core.tiers.grouped import GroupedTierStack
from sim.core.tiers.kinds import LOWER_TIERS, TIERS
from sim.core.tiers.lru import LRUTier, TierContents
from sim.core.tiers.policy import TIER_POLICIES
from sim.core.tiers.scope import TIER_SCOPES, node_of
from sim.core.tiers.stack import TierLevel, TierStack
from sim.core.tiers.weighted_lru import WeightedLRUTier
from sim.errors import ScenarioError
from sim.timing.knobs import host_link_bandwidth

GiB = 1 << 30


@dataclass
class TierFleet:
    """Every tier object and link of one run (for the summary: shared ones counted once)."""

    stacks: list[TierStack] = field(default_factory=list)
    tiers: dict[str, TierContents] = field(default_factory=dict)  # instance name -> contents
    links: dict[str, SharedLink] = field(default_factory=dict)
    chunk_bytes: int = 0  # bytes per unit of a tier's capacity: a chunk, or a pool page (several KV groups)

    def occupancy_bytes(self) -> dict[str, int]:
        """Bytes held now in each tier instance (shared ones once)."""
        return {name: len(lru) * self.chunk_bytes for name, lru in self.tiers.items()}


def tier_sizes(scenario: Any) -> dict[str, float]:
    """GiB per lower tier kind the scenario asks for (0: none)."""
    return {name: float(getattr(scenario, f"{name}_tier_gib", 0.0) or 0.0) for name in LOWER_TIERS}


def _check(scenario: Any, dep: Any) -> None:
    if not scenario.prefix_caching:
        raise ScenarioError("scenario: KV tiers (cpu/nvme/remote_tier_gib) reuse prefix-cached blocks: turn on prefix_caching")
    if scenario.allocator != "paged" or scenario.static_batch:
        raise ScenarioError("scenario: KV tiers need the paged allocator and continuous batching")
    if dep.grouped and scenario.tier_policy != "write-through":
        groups = ", ".join(g.label() for g in dep.spec.groups)
        why = GROUPED_POLICY_REFUSALS.get(scenario.tier_policy, "is modelled for models with one KV group only")
        raise ScenarioError(f"scenario: tier_policy {scenario.tier_policy!r} with {scenario.model} (KV groups: {groups}): "
                            f"{why}; use tier_policy 'write-through' (vLLM's OffloadingConnector, which offloads every group)")


# Why a policy other than write-through is refused for a model with several KV groups (docs/TIERS.md).
GROUPED_POLICY_REFUSALS = {
    "lmcache": "vLLM's LMCache connectors do not support its hybrid KV cache manager (LMCacheConnectorV1 is no "
               "SupportsHMA; vllm/config/vllm.py then turns the manager off, keeping sliding-window layers as full "
               "attention, and hybrid state models fail at start-up)",
    "on-eviction": "the victim-cache policy is modelled for pools with one KV group only (a GPU eviction names a "
                   "block, not its group)",
}


class _Builder:
    """Makes each link and tier instance once, by name, so sharing is by construction."""

    def __init__(self, fleet: TierFleet, weighted: bool = False) -> None:
        self.fleet = fleet
        self.weighted = weighted

    def link(self, name: str, bw: float, latency: float) -> SharedLink:
        links = self.fleet.links
        if name not in links:
            links[name] = SharedLink(name, bw, latency)
        return links[name]

    def tier(self, name: str, gib: float) -> TierContents:
        tiers, units = self.fleet.tiers, int(gib * GiB) // self.fleet.chunk_bytes
        if name not in tiers:  # a pool with several KV groups: blocks of several sizes, counted in pages
            tiers[name] = WeightedLRUTier(name, units) if self.weighted else LRUTier(name, units)
        return tiers[name]

    def levels(self, i: int, sizes: dict[str, float], tp: int, host_bw: float, gpus_per_node: int = 8,
               cpu_per_node: dict[int, int] | None = None) -> list[TierLevel]:
        """Replica i's lower tiers in lookup order, with the links of their load and store paths."""
        cpu, nvme, remote = TIERS["cpu"], TIERS["nvme"], TIERS["remote"]
        node = node_of(i, tp, gpus_per_node)
        h2d = self.link(f"pcie-h2d/replica{i}", host_bw * tp, cpu.latency_s)
        d2h = self.link(f"pcie-d2h/replica{i}", host_bw * tp, cpu.latency_s)
        out = []
        if sizes["cpu"]:
            shared = self._cpu_tier(i, node, sizes["cpu"], cpu_per_node)
            out.append(TierLevel(cpu, shared, (h2d,), (d2h,)))
        if sizes["nvme"]:
            rd = self.link(f"nvme-read/node{node}", nvme.read_bw or 0.0, nvme.latency_s)
            wr = self.link(f"nvme-write/node{node}", nvme.write_bw or 0.0, nvme.latency_s)
            out.append(TierLevel(nvme, self.tier(f"nvme/node{node}", sizes["nvme"]), (rd, h2d), (wr,)))
        if sizes["remote"]:
            nic_in = self.link(f"nic-in/replica{i}", (remote.read_bw or 0.0) * tp, remote.latency_s)
            nic_out = self.link(f"nic-out/replica{i}", (remote.write_bw or 0.0) * tp, remote.latency_s)
            out.append(TierLevel(remote, self.tier("remote/fleet", sizes["remote"]), (nic_in, h2d), (nic_out,)))
        return out

    def _cpu_tier(self, i: int, node: int, gib: float, cpu_per_node: dict[int, int] | None) -> TierContents:
        """Replica i's CPU tier: its own, or its node's (cpu_per_node: replicas on each node) of
        `gib` x the replicas there (sim/core/tiers/scope.py)."""
        if cpu_per_node is None:
            return self.tier(f"cpu/replica{i}", gib)
        return self.tier(f"cpu/node{node}", gib * cpu_per_node[node])


def replicas_by_node(num_replicas: int, tp: int, gpus_per_node: int) -> dict[int, int]:
    """How many replicas each node holds (sim.core.tiers.scope.node_of, as levels() places them)."""
    out: dict[int, int] = {}
    for i in range(num_replicas):
        node = node_of(i, tp, gpus_per_node)
        out[node] = out.get(node, 0) + 1
    return out


def build_tiers(scenario: Any, dep: Any, num_replicas: int) -> TierFleet | None:
    """One TierStack per replica, or None when the scenario has no lower tier."""
    sizes = tier_sizes(scenario)
    if not any(sizes.values()):
        return None
    _check(scenario, dep)
    policy = TIER_POLICIES.lookup(scenario.tier_policy)
    bytes_per_block = scenario.block_size * dep.bytes_per_token
    group_pages: tuple[int, ...] = ()
    group_bytes: tuple[int, ...] = ()
    if dep.grouped:  # units are the pool's pages; a block of group g is its pages (sim/core/tiers/grouped.py)
        pool = dep.make_allocator()
        bytes_per_block, group_pages = pool.page_bytes, tuple(m.pages for m in pool.managers)
        # bytes moved per block: its layers' K/V (not the padding layers of vLLM's groups,
        # group_managers.pool_shape), a state block its unpadded state (as vLLM copies them)
        group_bytes = tuple(m.state_bytes if m.kind == "state" else m.block_size * m.bytes_per_token
                            for m in pool.managers)
    try:
        chunk_bytes = policy.chunk_blocks(scenario.block_size) * bytes_per_block
    except ValueError as exc:
        raise ScenarioError(f"scenario: {exc}") from None
    host_bw = host_link_bandwidth(scenario, dep.gpu.host_link_bandwidth)
    fleet = TierFleet(chunk_bytes=chunk_bytes)
    build = _Builder(fleet, weighted=dep.grouped)
    per_node = scenario.gpus_per_node
    shared = TIER_SCOPES.lookup(scenario.cpu_tier_scope).per_node
    by_node = replicas_by_node(num_replicas, scenario.tp, per_node) if shared else None
    for i in range(num_replicas):
        levels = build.levels(i, sizes, scenario.tp, host_bw, per_node, by_node)
        try:
            if dep.grouped:
                fleet.stacks.append(GroupedTierStack(policy, levels, scenario.block_size, bytes_per_block,
                                                     group_pages=group_pages, group_bytes=group_bytes))
            else:
                fleet.stacks.append(TierStack(policy, levels, scenario.block_size, bytes_per_block))
        except ValueError as exc:
            raise ScenarioError(f"scenario: {exc}") from None
    return fleet

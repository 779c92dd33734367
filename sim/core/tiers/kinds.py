"""Tier kinds: where KV blocks may live beside the GPU pool, with default figures and sources.

A tier kind says where the bytes sit (the medium), who shares one instance (a replica, the
replicas of a node, the whole fleet) and the links a block crosses on its way to and from the GPU
pool. Bandwidths are bytes/s per direction at line rate (datasheets); a load from a tier holds each
link on its path (sim/core/tiers/stack.py) and moves at the slowest one's rate.

The GPU's own pool (HBM) is the first tier and is today's paged allocator; it is listed so the
names the metrics use ({gpu, cpu, nvme, remote}) come from one place.

`hit_cost` is what KV-aware routing charges for one prompt block found in the tier, as a share of one
recomputed block: the load time of a block over the tier's path against the prefill time it saves,
for the reference case (Llama-3-8B bf16 on an H100, 16-token blocks of 2 MiB; prefill 2 x 8e9 x 16
FLOP at ~60% of 989 TFLOP/s = 0.43 ms): CPU over PCIe Gen5 64 GB/s 33 us (0.08), remote over a 50 GB/s
NIC then PCIe 42 us (0.10), NVMe at 13 GB/s 161 us (0.38); rounded up. docs/FLEET.md says why fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.registry import Registry

GB = 10**9


@dataclass(frozen=True)
class TierKind:
    """One kind of KV tier. read_bw / write_bw: the medium's own rate (None: the GPU host link is the
    only link, as for CPU DRAM, whose memory bandwidth is far above PCIe)."""

    name: str
    medium: str
    scope: str  # "replica" (one engine), "node" (the replicas of one node), "fleet" (every replica)
    read_bw: float | None
    write_bw: float | None
    latency_s: float
    via_host: bool  # a load also crosses the GPU's host link (PCIe) into the GPU pool
    source: str
    # KV-aware routing (sim/core/routing/routers.py): one prompt block found here costs this share of
    # a recomputed block. 1.0 (the default): counted as recompute, for a kind that states no figure.
    hit_cost: float = 1.0

    @property
    def description(self) -> str:
        rates = ("the GPU's host link (PCIe) per direction" if self.read_bw is None else
                 f"read {self.read_bw / GB:g} GB/s, write {(self.write_bw or 0) / GB:g} GB/s")
        return f"{self.medium}, one per {self.scope}; {rates}; {self.source}"


TIERS: Registry[TierKind] = Registry("KV tier", ((k.name, k) for k in (
    TierKind("gpu", "GPU HBM (the paged KV pool)", "replica", None, None, 0.0, False,
             "the replica's KV budget (sim/memory); its prefix cache is sim/core/kv/prefix_cache.py", hit_cost=0.0),
    TierKind("cpu", "CPU DRAM (pinned host memory)", "replica", None, None, 5e-6, True,
             "bandwidth: the GPU entry's host link per direction (models/gpus.py: PCIe Gen5 x16 64 GB/s nominal "
             "on H100 SXM, Gen4 x16 32 GB/s on A100; --host-link-gb-s overrides); 5 us per transfer (a cudaMemcpyAsync launch and "
             "completion); capacity: 0.5-2 TB per 8-GPU node (DGX H100: 2 TB)", hit_cost=0.1),
    TierKind("nvme", "local NVMe SSD", "node", 13.0 * GB, 6.6 * GB, 100e-6, True,
             "one PCIe Gen5 enterprise NVMe drive (Samsung PM1743 datasheet: 13,000 MB/s sequential read, "
             "6,600 MB/s write); 100 us per I/O (NVMe read latency order); a Gen4 drive (PM1733: 7,000 / "
             "3,800 MB/s) is about half; data lands in CPU memory then crosses PCIe (vLLM's tiering: "
             "secondary tiers are promoted through the CPU tier)", hit_cost=0.4),
    TierKind("remote", "a shared remote KV store (Mooncake Store, LMCache server)", "fleet",
             50.0 * GB, 50.0 * GB, 10e-6, True,
             "one 400 Gb/s RDMA NIC per GPU (ConnectX-7 datasheet; DGX H100 has one per GPU) = 50 GB/s per "
             "direction; 10 us per transfer (a GPUDirect RDMA write posted and completed, the order "
             "Mooncake's transfer engine reports)", hit_cost=0.15),
)))

TIER_ORDER = TIERS.names()  # lookup order at admission: the order of registration, the GPU pool first
LOWER_TIERS = TIER_ORDER[1:]


def get_tier(name: str) -> TierKind:
    return TIERS.lookup(name)

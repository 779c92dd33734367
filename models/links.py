"""Links that move KV between GPUs, hosts and nodes: bandwidth per direction, latency, source.

One registry (LINKS) for every place a KV byte travels: the P/D handoff from a prefill replica to a
decode replica (sim/fleet/), and the lower KV tiers' loads and stores (CPU DRAM over PCIe, NVMe,
remote stores over RDMA). A transfer of B bytes over a link takes `latency_s + B / bandwidth`
when it has the link to itself; sim/core/link.py says how concurrent transfers share one.

Figures are line rates per direction from the vendors' datasheets (the achieved rate of a real
transfer engine is lower: `efficiency` is the measured fraction where one is known, else 1.0 and
the figure is an upper bound, said so in the source). Latency is the fixed cost of one transfer
(a descriptor posted, the completion seen), not the wire's propagation delay.

This module imports only models.registry, so both models/ and sim/ can build on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.gpus import PCIE4_X16, PCIE5_X16
from models.registry import Registry

GB = 10**9  # link rates are decimal
Gbit = 10**9 / 8


@dataclass(frozen=True)
class Link:
    """One direction of one link kind. bandwidth: bytes/s per direction at line rate."""

    name: str
    bandwidth: float
    latency_s: float
    scope: str  # "node" (GPU to GPU in one node), "host" (GPU to its host), "network" (node to node)
    source: str
    efficiency: float = 1.0  # measured fraction of line rate a transfer engine reaches (1.0: none measured)

    @property
    def effective_bandwidth(self) -> float:
        """Bytes/s one transfer moves at when it has the link to itself."""
        return self.bandwidth * self.efficiency

    def transfer_time(self, num_bytes: int) -> float:
        """Seconds for one transfer of `num_bytes` alone on the link: latency + bytes / bandwidth."""
        return self.latency_s + num_bytes / self.effective_bandwidth if num_bytes > 0 else 0.0

    @property
    def description(self) -> str:
        eff = f", {self.efficiency:.0%} of line rate" if self.efficiency != 1.0 else ""
        return (f"{self.bandwidth / GB:g} GB/s per direction{eff}, {self.latency_s * 1e6:g} us per transfer "
                f"({self.scope}); {self.source}")


RDMA_LATENCY_S = 10e-6  # one GPUDirect RDMA write posted and completed; see the rdma entries' source
RDMA_SOURCE = ("NVIDIA ConnectX-7 datasheet ({rate} Gb/s per port, one NIC per GPU as in DGX H100); "
               "10 us per transfer: a descriptor post and completion, the order NIXL's UCX backend and "
               "Mooncake's transfer engine report for small writes")

LINKS: Registry[Link] = Registry("link", ((link.name, link) for link in (
    Link("nvlink-h100", 450 * GB, 2e-6, "node",
         "NVIDIA H100 SXM5 datasheet: NVLink 4, 900 GB/s bidirectional per GPU = 450 GB/s per direction; "
         "2 us per transfer (a CUDA copy's launch)"),
    Link("nvlink-a100", 300 * GB, 2e-6, "node",
         "NVIDIA A100 SXM4 datasheet: NVLink 3, 600 GB/s bidirectional per GPU = 300 GB/s per direction; "
         "2 us per transfer (a CUDA copy's launch)"),
    Link("rdma-400g", 400 * Gbit, RDMA_LATENCY_S, "network", RDMA_SOURCE.format(rate=400)),
    Link("rdma-200g", 200 * Gbit, RDMA_LATENCY_S, "network", RDMA_SOURCE.format(rate=200)),
    Link("rdma-100g", 100 * Gbit, RDMA_LATENCY_S, "network", RDMA_SOURCE.format(rate=100)),
    Link("ethernet-25g", 25 * Gbit, 50e-6, "network",
         "25 GbE line rate (IEEE 802.3by), TCP without RDMA: 50 us per transfer (kernel network stack); "
         "the slow end of a P/D link"),
    Link("pcie-gen5-x16", PCIE5_X16, 5e-6, "host",
         "PCI-SIG PCIe 5.0: 32 GT/s x16 lanes, 128b/130b = 63 GB/s per direction (64 nominal); "
         "5 us per transfer (a cudaMemcpyAsync's launch and completion)"),
    Link("pcie-gen4-x16", PCIE4_X16, 5e-6, "host",
         "PCI-SIG PCIe 4.0: 16 GT/s x16 lanes, 128b/130b = 31.5 GB/s per direction (32 nominal); "
         "5 us per transfer (a cudaMemcpyAsync's launch and completion)"),
)))


def get_link(name: str) -> Link:
    """The link called `name` (UnknownOption naming the choices otherwise)."""
    return LINKS.lookup(name)

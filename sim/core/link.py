"""A shared link: concurrent transfers over one link (a NIC, a PCIe lane set) queue for its bandwidth.

Clock-free: the caller says when a transfer may start and how many bytes it moves; the link says
when it completes. Transfers are served first come first served, one at a time, each at the link's
full bandwidth: a transfer submitted at `t` begins at max(t, the link's previous transfer's data
end), moves its bytes in bytes / bandwidth, and completes `latency_s` after its data end (the fixed
cost of one transfer does not hold the wire). Alone on the link it takes latency + bytes / bandwidth.

Why FIFO and not a fair share: under a fair share every new transfer would slow the ones in flight,
so a completion time once given could move later, and everything scheduled on it (a decode replica
starting the request, a prefill replica freeing its blocks) would have to be rescheduled. With FIFO
the completion time is fixed when the transfer is submitted. The two give the same completion time
for the last of a burst and the same busy time; FIFO finishes the earlier ones sooner (RDMA NICs
serve their send queues in order, so a single queue pair behaves this way).

A transfer that crosses several links (the sender's NIC out, the receiver's NIC in) holds all of
them (`transfer_over`): it begins when every one is free and moves at the slowest one's rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from models.links import Link


@dataclass
class SharedLink:
    """One direction of one link instance, e.g. one GPU's NIC sending."""

    name: str
    bandwidth: float  # bytes/s
    latency_s: float
    free_at: float = 0.0  # when the last transfer's data end is
    bytes_moved: int = 0
    busy_s: float = 0.0  # seconds the wire carried data
    transfers: int = 0

    def __post_init__(self) -> None:
        if not self.bandwidth > 0:
            raise ValueError(f"link {self.name!r}: bandwidth must be > 0, got {self.bandwidth!r}")
        if not self.latency_s >= 0:
            raise ValueError(f"link {self.name!r}: latency must be >= 0, got {self.latency_s!r}")

    @classmethod
    def of(cls, link: Link, name: str = "") -> SharedLink:
        """An instance of a registered link kind (models/links.py), at its effective bandwidth."""
        return cls(name or link.name, link.effective_bandwidth, link.latency_s)

    def transfer(self, start: float, num_bytes: int) -> float:
        """Submit `num_bytes` at time `start`; returns when the transfer completes."""
        return transfer_over((self,), start, num_bytes)

    def utilisation(self, horizon_s: float) -> float:
        """Share of [0, horizon_s] the wire carried data."""
        return self.busy_s / horizon_s if horizon_s > 0 else 0.0


@dataclass(frozen=True)
class Transfer:
    """When one transfer began, when its data ended and when it completed."""

    begin: float
    data_end: float
    done: float


def transfer_over(links: Sequence[SharedLink], start: float, num_bytes: int) -> float:
    """One transfer holding every link in `links` (FIFO on each); returns its completion time."""
    return schedule_over(links, start, num_bytes).done


def schedule_over(links: Sequence[SharedLink], start: float, num_bytes: int) -> Transfer:
    """Book one transfer on `links`: it begins when all are free, moves at the slowest one's rate,
    and completes the largest latency after its data end. Zero bytes: complete at `start`."""
    if num_bytes <= 0 or not links:
        return Transfer(start, start, start)
    begin = max(start, max(link.free_at for link in links))
    seconds = num_bytes / min(link.bandwidth for link in links)
    data_end = begin + seconds
    for link in links:
        link.free_at = data_end
        link.bytes_moved += num_bytes
        link.busy_s += seconds
        link.transfers += 1
    return Transfer(begin, data_end, data_end + max(link.latency_s for link in links))

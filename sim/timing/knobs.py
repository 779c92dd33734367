"""The scenario knobs a step-time source reads, as a Protocol: sim/timing types against this, not
against sim.scenario.Scenario (which imports sim.timing's registry of sources: a type-only import the
other way would close a cycle). Scenario satisfies it as it is; the model and the GPU come resolved
(sim.run.deployment), so the what-ifs are applied in one place.
"""

from __future__ import annotations

from typing import Any, Protocol


class TimingKnobs(Protocol):
    """What CostModel.from_scenario, the roofline and the measured tables read of a scenario."""

    @property
    def model(self) -> str: ...  # named in a profile's mismatch warnings

    @property
    def tp(self) -> int: ...

    @property
    def weight_dtype(self) -> str: ...

    @property
    def kv_dtype(self) -> str: ...

    @property
    def expert_parallel(self) -> bool: ...

    @property
    def expert_imbalance(self) -> float: ...

    @property
    def cost_source(self) -> str: ...

    @property
    def profile(self) -> str | None: ...

    @property
    def api_overhead_s(self) -> float: ...

    @property
    def offload_layers(self) -> float: ...  # fraction of layers whose KV lives in CPU memory

    @property
    def host_link_gb_s(self) -> float | None: ...  # None: the GPU entry's host link


def host_link_bandwidth(scenario: Any, gpu_host_bw: float) -> float:
    """Bytes/s per GPU per direction over PCIe: --host-link-gb-s if given, else the GPU entry's (layer
    offload's step time, swap traffic and the CPU tier's loads all read this one rule)."""
    gbs = getattr(scenario, "host_link_gb_s", None)  # a Scenario's; other knob sets have none
    return float(gbs) * 1e9 if gbs else float(gpu_host_bw)

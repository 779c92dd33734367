"""The shape of a scenario's fleet: its pools and how many GPUs they take."""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.routing.pd_split import parse_pd
from sim.scenario import Scenario


@dataclass(frozen=True)
class Pool:
    role: str  # "aggregated", "prefill" or "decode"
    replicas: int
    tp: int

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp


def pools_of(scenario: Scenario) -> tuple[Pool, ...]:
    """One aggregated pool, or a prefill and a decode pool for `pd`."""
    if not scenario.pd:
        return (Pool("aggregated", scenario.replicas, scenario.tp),)
    n_p, n_d = parse_pd(scenario.pd)
    return (Pool("prefill", n_p, scenario.prefill_tp or scenario.tp), Pool("decode", n_d, scenario.decode_tp or scenario.tp))


def fleet_gpus(scenario: Scenario) -> int:
    """GPUs the whole fleet takes (replicas x TP over its pools)."""
    return sum(p.gpus for p in pools_of(scenario))

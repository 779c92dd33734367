"""Tests' short roads to resolved quantities, through sim.run.deployment (the one resolver): the
model as it runs (Deployment.model_of), then the cost model, the KV budget, bytes per token."""

from __future__ import annotations

from models.gpus import get_gpu
from sim.memory.capacity import GiB
from sim.run.deployment import (
    Deployment,
    derived_kv_budget_bytes,
    scenario_kv_bytes_per_token,
    scenario_memory_budget,
)
from sim.timing.cost_model import CostModel


def cost_of(scenario, **overrides) -> CostModel:
    """The scenario's step-time model without resolving its whole Deployment (a model that does
    not fit its GPU still has step times)."""
    return CostModel.from_scenario(Deployment.model_of(scenario), get_gpu(scenario.gpu), scenario, **overrides)


def kv_budget_of(scenario) -> int:
    """One replica's KV pool in bytes: kv_budget_gib when set, else derived from the GPU."""
    if scenario.kv_budget_gib is not None:
        return int(scenario.kv_budget_gib * GiB)
    spec = Deployment.model_of(scenario)
    return derived_kv_budget_bytes(scenario, scenario_memory_budget(scenario, spec, get_gpu(scenario.gpu)))


def kv_bytes_per_token_of(scenario) -> int:
    return scenario_kv_bytes_per_token(scenario, Deployment.model_of(scenario))

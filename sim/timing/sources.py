"""Step-time sources a Scenario may ask for (`cost_source`): the one list of their names.

CostModel.from_scenario (sim/timing/cost_model.py) implements each; the Scenario checks, the CLI
and docs/OPTIONS.md read this registry. A calibration profile (`profile`) overrides the choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.registry import Registry


@dataclass(frozen=True)
class CostSource:
    name: str
    description: str


COST_SOURCES: Registry[CostSource] = Registry("cost source", ((c.name, c) for c in (
    CostSource("auto", "measured kernels (aiconfigurator-core) where they cover the deployment, else the roofline"),
    CostSource("measured-db", "aiconfigurator-core's measured kernel tables; an error where they do not cover it"),
    CostSource("roofline", "the analytic roofline (FLOP/s and bytes at measured efficiencies)"),
)))

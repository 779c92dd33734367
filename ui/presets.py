"""Compare-page presets: sim/plan/compare_presets.py's, by their titles (the CLI names them by key)."""

from __future__ import annotations

from sim.plan.compare_presets import COMPARE_PRESETS
from sim.scenario import Scenario

PRESETS = tuple(COMPARE_PRESETS[name].title for name in COMPARE_PRESETS)


def preset_variants(title: str, base: Scenario) -> dict[str, Scenario]:
    """Label -> Scenario for the preset of that title; everything it does not name is the base's."""
    for name in COMPARE_PRESETS:
        if COMPARE_PRESETS[name].title == title:
            return COMPARE_PRESETS[name].variants(base)
    raise ValueError(f"unknown preset {title!r}")

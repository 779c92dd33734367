"""Preemption modes: what the scheduler does with a running request when the KV pool runs out.

The scheduler implements each mode (sim/core/scheduler.py); this registry is the one list of
their names, read by the Scenario checks, the CLI and the form.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.registry import Registry


@dataclass(frozen=True)
class PreemptionMode:
    name: str
    description: str


PREEMPTION_MODES: Registry[PreemptionMode] = Registry("preemption mode", ((m.name, m) for m in (
    PreemptionMode("recompute", "free the victim's KV and recompute its context when it is readmitted (vLLM's default)"),
    PreemptionMode("swap", "copy the victim's KV to host memory (swap_space_gib) and copy it back on resume"),
)))

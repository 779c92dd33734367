"""The simulator's Executor: a step takes the time the cost model gives its shape.

Swap traffic (preempted K/V out to host memory, resumed K/V back) is charged at the GPU's host
link bandwidth on top. The GPU backend's Executor (gpu_backend/executor.py) runs the same plans
through a real model instead; both implement `sim.core.interfaces.Executor` (structurally: a compiled
class cannot subclass a Protocol, sim/native).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.core.step_types import StepPlan
from sim.timing.cost_model import CostModel


@dataclass(frozen=True)
class ModelledExecutor:
    cost: CostModel
    host_link_bandwidth: float  # bytes/s, for swap in and out

    def execute(self, plan: StepPlan, t_start: float) -> float:
        d, kd, p, kp, pairs, seqs = plan.step_shape(self.cost.reads_prefill_pairs)  # step_time's arguments
        dt = self.cost.step_time(d, kd, p, kp, pairs, seqs) if d + p else 0.0  # (named: *shape is a call through Python)
        if plan.swap_in_bytes or plan.swap_out_bytes:
            dt += (plan.swap_in_bytes + plan.swap_out_bytes) / self.host_link_bandwidth
        return t_start + dt


if TYPE_CHECKING:  # mypy checks the protocol here, where the class is written (it cannot subclass it: sim/native)
    from sim.core.interfaces import Executor
    _implements: type[Executor] = ModelledExecutor

"""The replay entry point for every fleet: one replica (sim/run/engine.py unchanged), replicas
behind a router (engine.py here), or a disaggregated prefill/decode fleet (pd.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from sim.fleet.engine import FleetSimulation
from sim.fleet.pd import simulate_pd
from sim.run import metrics
from sim.run.deployment import Deployment
from sim.run.engine import build
from sim.run.engine import simulate as engine_simulate
from sim.scenario import Scenario
from sim.trace.model import Trace


def simulate(trace: Trace, target: Scenario | Deployment, *, progress: Callable[[float], None] | None = None,
             step_limit: int | None = None, skip_ahead: bool = True) -> metrics.SimResult:
    """Replay `trace` on the scenario's fleet (docs/FLEET.md). One replica behind round-robin is
    sim/run/engine.py's replay, unchanged; `step_limit` is not offered for P/D fleets."""
    scenario = target.scenario if isinstance(target, Deployment) else target
    if scenario.pd:
        return simulate_pd(trace, scenario, progress=progress, skip_ahead=skip_ahead)
    dep = target if isinstance(target, Deployment) else Deployment.resolve(target)
    if scenario.replicas == 1 and scenario.router == "round-robin":
        return engine_simulate(trace, dep, progress=progress, step_limit=step_limit, skip_ahead=skip_ahead)
    wall0 = time.perf_counter()
    sim = FleetSimulation(build(trace, dep), trace, skip_ahead=skip_ahead, step_limit=step_limit, progress=progress)
    sim.run()
    return sim.result(trace.digest(), time.perf_counter() - wall0)

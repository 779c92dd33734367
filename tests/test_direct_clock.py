"""A single replica runs without SimPy (engine.DirectClock) and with lazy token counts
(Scheduler.lazy_computed): the very same frames, summary and final table as the same engine process
run on a simpy.Environment with eager counts, including an idle replica and tiny pools."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from sim.run.engine import DirectClock, Simulation, build
from sim.scenario import Scenario
from sim.trace import synthetic

BASE = Scenario(model="llama-3-8b", gpu="h100-sxm", kv_budget_gib=1.0, max_model_len=4096)


def trace(rate: float):
    return synthetic(n=150, rate=rate, input="lognormal:mean=300:sigma=0.8", output="lognormal:mean=120:sigma=0.8",
                     seed=3)


def on_simpy(sim: Simulation) -> None:
    """What Simulation.run did for every replica count before DirectClock."""
    for rep in sim.s.replicas:
        sim.env.process(sim.engine(rep))
    sim.env.run()
    sim.close(max(rep.t for rep in sim.s.replicas))


@pytest.mark.parametrize(("rate", "changes"), [(0.5, {}), (20.0, {}), (20.0, {"kv_budget_gib": 0.25}),
                                               (20.0, {"static_batch": 8, "preemption": "swap"})])
def test_direct_clock_gives_simpys_results(rate, changes):
    scenario = replace(BASE, **changes)
    tr = trace(rate)
    direct, simpy_run = Simulation(build(tr, scenario)), Simulation(build(tr, scenario))
    direct.run()
    on_simpy(simpy_run)
    assert isinstance(direct.env, DirectClock) and direct.env.now == simpy_run.env.now > 0
    for col in ("computed", "generated", "status"):  # lazy token counts (one replica) settled at close
        np.testing.assert_array_equal(getattr(direct.s.table, col), getattr(simpy_run.s.table, col))
    a, b = direct.result("t", 0.0), simpy_run.result("t", 0.0)
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert {k: v for k, v in a.summary.items() if k != "sim_wall_s"} == {
        k: v for k, v in b.summary.items() if k != "sim_wall_s"}


def test_direct_clock_refuses_a_negative_delay_as_simpy_does():
    with pytest.raises(ValueError, match="Negative delay"):
        DirectClock.timeout(-1.0)

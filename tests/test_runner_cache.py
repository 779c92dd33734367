"""ui.runner: the progress label is not part of the cache key, so one scenario from two pages
(different labels) simulates once."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

import sim.run.engine as engine


def _two_pages_one_scenario() -> None:
    from sim.scenario import Scenario
    from sim.trace import parse_synthetic_spec
    from ui.runner import run_scenario

    trace = parse_synthetic_spec("n=30,rate=10,seed=4").generate()
    scenario = Scenario(kv_budget_gib=1.0)
    first = run_scenario(trace, scenario, "Simulating")
    second = run_scenario(trace, scenario, "Simulating variant 1 of 3")
    assert first.summary == second.summary


def test_same_scenario_under_two_labels_simulates_once(monkeypatch):
    from ui.runner import _run

    _run.clear()
    calls = []
    real = engine.simulate

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "simulate", counting)
    at = AppTest.from_function(_two_pages_one_scenario, default_timeout=120).run()
    assert not at.exception, at.exception
    assert len(calls) == 1
    _run.clear()

"""Every flag of the CLI's "scenario" group reaches the Scenario: the flags are read from the parser
itself, so a flag added later is covered without touching this test (`--cost-source` was once
parsed and then dropped: `sim run --cost-source roofline` still ran on the measured tables)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from sim.cli.scenario_args import FIELDS, add_scenario_args, add_trace_args, scenario_from_args
from sim.scenario import Scenario, ScenarioError

DEFAULT = Scenario()


def _scenario_actions() -> tuple[argparse.ArgumentParser, list[argparse.Action]]:
    p = argparse.ArgumentParser()
    add_trace_args(p)
    add_scenario_args(p, model_required=False)
    group = next(g for g in p._action_groups if g.title == "scenario")
    return p, list(group._group_actions)


def _candidates(action: argparse.Action) -> list[object]:
    """Non-default values to try for one flag, by its kind (the first one Scenario accepts is used)."""
    default = getattr(DEFAULT, action.dest)
    if action.choices:
        return [c for c in action.choices if c != default]
    if isinstance(action, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
        return [not default]
    if action.type is int:
        return [(default or 1) + 1]
    if action.type is float:
        return [v for v in ((default or 0.5) * 1.5, (default or 1.0) / 2) if v != default]
    # last: None, for a flag whose type reads "none" (--prefix-cache-retention-interval, default 0)
    return [v for v in ("window:64", "custom-name", "/tmp/x.json", "1:2", None) if v != default]


def _argv(action: argparse.Action, value: object) -> list[str]:
    flag = action.option_strings[0]
    if isinstance(action, argparse._StoreTrueAction):
        return [flag]
    if isinstance(action, argparse.BooleanOptionalAction):
        return [flag if value else "--no-" + flag.removeprefix("--")]
    return [flag, str(value)]


def _accepted(name: str, values: list[object]) -> object:
    for value in values:
        try:
            DEFAULT.replace(**{name: value})
            return value
        except ScenarioError:
            continue
    raise AssertionError(f"no valid non-default value for {name} among {values}")


def test_scenario_flags_are_exactly_the_listed_fields():
    _, actions = _scenario_actions()
    dests = {a.dest for a in actions}
    assert dests == set(FIELDS), f"flags without a field: {dests - set(FIELDS)}; fields without a flag: {set(FIELDS) - dests}"
    assert set(FIELDS) <= {f.name for f in dataclasses.fields(Scenario)}


@pytest.mark.parametrize("dest", [a.dest for a in _scenario_actions()[1]])
def test_each_scenario_flag_reaches_the_scenario(dest):
    parser, actions = _scenario_actions()
    action = next(a for a in actions if a.dest == dest)
    value = _accepted(dest, _candidates(action))
    args = parser.parse_args(["--synthetic", "n=5", *_argv(action, value)])
    scenario = scenario_from_args(args)
    assert getattr(scenario, dest) == value != getattr(DEFAULT, dest)
    assert scenario == DEFAULT.replace(**{dest: value})  # that flag and nothing else moved


def test_cost_source_flag_changes_the_run():
    """The reported bug: --cost-source roofline must run on the roofline, not the measured tables."""
    from sim.run.engine import simulate
    from sim.trace import resolve_trace

    parser, _ = _scenario_actions()
    args = parser.parse_args(["--synthetic", "n=20,rate=5", "--cost-source", "roofline"])
    result = simulate(resolve_trace("synthetic:n=20,rate=5"), scenario_from_args(args))
    assert result.summary["cost_model"]["source"] == "roofline"

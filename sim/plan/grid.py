"""The configurations a search tries: Scenario fields, each with a list of values, crossed.

`parse_grid({"tp": "1,2", "kv_dtype": "bf16,fp8"})` turns comma lists into typed values using the
Scenario dataclass's own field types, so every scenario knob can be swept without a list of its
own here; `expand(base, grid)` crosses them into Scenarios (each validated by Scenario itself).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from sim.scenario import Scenario, ScenarioError

MAX_CONFIGS = 4096
_TRUE, _FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def _field_types() -> dict[str, str]:
    return {f.name: str(f.type) for f in dataclasses.fields(Scenario)}


def _convert(name: str, kind: str, text: str) -> Any:
    text = text.strip()
    if "None" in kind and text.lower() in ("", "none", "auto"):
        return None
    try:
        if kind.startswith("bool"):
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError
            return text.lower() in _TRUE
        if kind.startswith("int"):
            return int(text)
        if kind.startswith("float"):
            return float(text)
    except ValueError:
        raise ScenarioError(f"--{name.replace('_', '-')}: {text!r} is not a valid {kind.split(' ')[0]}") from None
    return text


def parse_grid(lists: dict[str, str | list[Any] | tuple[Any, ...]]) -> dict[str, list[Any]]:
    """Field -> values from comma-separated text (or lists of text/values); duplicates dropped."""
    types = _field_types()
    grid: dict[str, list[Any]] = {}
    for name, raw in lists.items():
        if name not in types:
            raise ScenarioError(f"search grid: unknown scenario field {name!r}")
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        values = [_convert(name, types[name], v) if isinstance(v, str) else v for v in items]
        grid[name] = list(dict.fromkeys(values))
        if not grid[name]:
            raise ScenarioError(f"--{name.replace('_', '-')}: no values")
    return grid


def expand(base: Scenario, grid: dict[str, list[Any]]) -> list[Scenario]:
    """Every combination of the grid's values on top of `base`, in grid order."""
    names = list(grid)
    count = 1
    for name in names:
        count *= len(grid[name])
    if count > MAX_CONFIGS:
        raise ScenarioError(f"search grid: {count} configurations (at most {MAX_CONFIGS}); narrow the lists")
    return [base.replace(**dict(zip(names, combo, strict=True))) for combo in itertools.product(*(grid[n] for n in names))]

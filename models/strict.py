"""Strict checks for single untrusted values: a boolean is not a number, NaN and infinity are not
numbers, "false" is not true, and a whole number has a range. Each raises the caller's error type
with one line naming the field. A leaf module (no project imports) so models/ and sim/ share it;
sim.guard re-exports it as the validation layer's value checks."""

from __future__ import annotations

import math
from typing import Any

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def whole(value: Any, field: str, lo: int, hi: int, error: type[Exception] = ValueError) -> int:
    """An int in [lo, hi]. Bools, floats (2.0 included: a count is written without a point), NaN
    and strings are refused, so what passes can be used as a count unchanged."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{field}: expected a whole number, got {_show(value)}")
    if not lo <= value <= hi:
        raise error(f"{field}: {_show(value)} is out of range ({lo} to {hi:,})")
    return value


def number(value: Any, field: str, lo: float, hi: float, error: type[Exception] = ValueError,
           *, lo_open: bool = False) -> float:
    """A finite float in [lo, hi] ((lo, hi] with lo_open); bools and strings are not numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{field}: expected a number, got {_show(value)}")
    value = float(value)
    low_ok = value > lo if lo_open else value >= lo
    if not math.isfinite(value) or not low_ok or value > hi:
        bracket = "(" if lo_open else "["
        raise error(f"{field}: {_show(value)} is out of range {bracket}{lo:g}, {hi:g}]")
    return value


def flag(value: Any, field: str, error: type[Exception] = ValueError) -> bool:
    """A boolean: true/false, or the strings true/false/yes/no/on/off/1/0 (never truthiness of "false")."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise error(f"{field}: expected true or false, got {_show(value)}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

"""Strict checks for single untrusted values: a boolean is not a number, NaN and infinity are not
numbers, "false" is not true, and a whole number has a range. Each raises the caller's error type
with one line naming the field. A leaf module (no project imports) so models/ and sim/ share it;
sim.guard re-exports it as the validation layer's value checks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1  # prefix hash ids are unsigned 64-bit; the widest integer any field may hold


def bounded(value: Any, field: str, lo: float, hi: float, error: type[Exception] = ValueError, *,
            integer: bool = False, lo_open: bool = False) -> Any:
    """The one check for a number read from a file, a link or a flag, before any arithmetic: a number
    (a bool is not, nor a string), finite, within the field's own [lo, hi] ((lo, hi] with lo_open); with
    `integer` an int (2.0 is refused: a count is written without a point) that also fits 64 bits.
    Ints are compared exactly, never through float(), so 10**400 is refused rather than overflowing.
    Returns the value as an int (integer) or a float; raises `error("<field>: <problem>")`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{field}: expected {'a whole number' if integer else 'a number'}, got {_show(value)}")
    if integer and not isinstance(value, int):
        raise error(f"{field}: expected a whole number, got {_show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"{field}: {_show(value)} is not a finite number")
    if integer and not INT64_MIN <= value <= UINT64_MAX:
        raise error(f"{field}: {_show(value)} does not fit in 64 bits (allowed {_span(lo, hi, lo_open)})")
    low_ok = value > lo if lo_open else value >= lo
    if not low_ok or value > hi:
        raise error(f"{field}: {_show(value)} is out of range {_span(lo, hi, lo_open)}")
    return int(value) if integer else float(value)


def whole(value: Any, field: str, lo: int, hi: int, error: type[Exception] = ValueError) -> int:
    """An int in [lo, hi] (`bounded` with integer=True): what passes can be used as a count unchanged."""
    return bounded(value, field, lo, hi, error, integer=True)


def number(value: Any, field: str, lo: float, hi: float, error: type[Exception] = ValueError,
           *, lo_open: bool = False) -> float:
    """A finite float in [lo, hi] ((lo, hi] with lo_open): `bounded` for a measure."""
    return float(bounded(value, field, lo, hi, error, lo_open=lo_open))


def bounded_all(values: Sequence[Any], field: str, lo: float, hi: float, error: type[Exception] = ValueError, *,
                integer: bool = False, row: str = "row") -> None:
    """`bounded` for every value of a column (a list read from a file), in one pass when all pass;
    otherwise the first bad value is named by its row: `error("<field> row <n>: <problem>")`."""
    kinds = (int,) if integer else (int, float)
    if all(type(v) in kinds for v in values) and all(v == v for v in values):  # v != v: NaN
        low, high = (max(lo, INT64_MIN), min(hi, UINT64_MAX)) if integer else (lo, hi)
        if not values or (low <= min(values) and max(values) <= high):
            return
    for i, value in enumerate(values, start=1):
        bounded(value, f"{field} {row} {i}", lo, hi, error, integer=integer)


def numbers_within(tree: Any, source: str, error: type[Exception], *, limit: float = 1e18) -> None:
    """Every number anywhere in a parsed document is finite and |x| <= limit, named by its key path
    (`config.json: rope_scaling.factor: ...`): the catch-all for fields no reader bounds more tightly,
    so nothing overflows downstream."""
    _walk(tree, source, "", error, limit, 0)


def _walk(node: Any, source: str, path: str, error: type[Exception], limit: float, depth: int) -> None:
    if depth > 64:
        raise error(f"{source}: {path}: nested too deeply")
    if isinstance(node, dict):
        for key, value in node.items():
            _walk(value, source, f"{path}.{str(key)[:40]}" if path else str(key)[:40], error, limit, depth + 1)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _walk(value, source, f"{path}[{i}]", error, limit, depth + 1)
    elif isinstance(node, int | float) and not isinstance(node, bool):
        bounded(node, f"{source}: {path or 'value'}", -limit, limit, error)


def _span(lo: float, hi: float, lo_open: bool) -> str:
    return f"{'(' if lo_open else '['}{_g(lo)}, {_g(hi)}]"


def _g(x: float) -> str:
    if isinstance(x, int) or (x.is_integer() and abs(x) < 1e16):
        return f"{int(x):,}"
    return f"{x:g}"


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

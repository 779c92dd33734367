"""Reading untrusted JSON (configs, GPU definitions, calibration profiles, snapshots) one safe way.

Size-bounded before reading, UTF-8 only, nesting depth bounded before parsing (a deeply nested file
would otherwise end in RecursionError), NaN/Infinity refused (they are not JSON and turn into
OverflowError or silent garbage downstream) except under fields the caller names as never read, parsed by json (never pickle or eval). Every failure
is the caller's own error type with a one-line message naming the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from models.safe_read import read_regular

MAX_DEPTH = 64  # configs, profiles and snapshots are a few levels deep
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class NonFiniteError(ValueError):
    """NaN or Infinity in JSON text; the message names the field where it stands."""


class _Constant:
    """Stands where json found NaN/Infinity until the field holding it is found."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def parse(text: bytes | str, nonfinite_fields: frozenset[str] = frozenset()) -> Any:
    """json.loads that refuses NaN/Infinity naming the field (`coefficients.per_token_s: NaN is not a
    number`), not just the line: the constant is parsed as a marker, then found. Under a top-level
    field of `nonfinite_fields` (ones the reader never uses) it is kept as Python's json keeps it, a
    float. Other errors are json's own (JSONDecodeError, UnicodeDecodeError, ValueError, RecursionError)."""
    seen: list[str] = []

    def mark(name: str) -> _Constant:
        seen.append(name)
        return _Constant(name)

    obj = json.loads(text, parse_constant=mark)
    if seen:
        if isinstance(obj, dict) and nonfinite_fields:
            obj = {k: _as_floats(v) if k in nonfinite_fields else v for k, v in obj.items()}
        where = _find_constant(obj, "")
        if where is not None:
            raise NonFiniteError(f"{where or 'value'}: {seen[0]} is not a number (JSON has no NaN or Infinity)")
    return obj


def _as_floats(node: Any) -> Any:
    """`node` with its NaN/Infinity markers made floats."""
    if isinstance(node, _Constant):
        return float(node.name)
    if isinstance(node, list):
        return [_as_floats(v) for v in node]
    if isinstance(node, dict):
        return {k: _as_floats(v) for k, v in node.items()}
    return node


def _find_constant(node: Any, path: str) -> str | None:
    """The path of the first NaN/Infinity marker ("" for the whole document), None when there is none."""
    if isinstance(node, _Constant):
        return path
    if isinstance(node, dict):
        items: Any = ((f"{path}.{str(k)[:40]}" if path else str(k)[:40], v) for k, v in node.items())
    elif isinstance(node, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(node))
    else:
        return None
    for sub, value in items:
        found = _find_constant(value, sub)
        if found is not None:
            return found
    return None


def json_depth(data: bytes | str, stop_at: int = MAX_DEPTH) -> int:
    """Deepest [ / { nesting outside strings (stops counting once past `stop_at`)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    depth = deepest = 0
    for m in _TOKENS.finditer(raw):
        tok = m.group()
        if tok in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_at:
                    break
        elif tok in (b"]", b"}"):
            depth -= 1
    return deepest


def loads(data: bytes | str, *, error: type[Exception], source: str, max_depth: int = MAX_DEPTH,
          nonfinite_fields: frozenset[str] = frozenset()) -> Any:
    """Parse JSON text with bounded depth and no NaN/Infinity (but under `nonfinite_fields`: `parse`);
    `error("<source>: <problem>")` otherwise."""
    if json_depth(data, max_depth) > max_depth:
        raise error(f"{source}: JSON nested deeper than {max_depth} levels")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return parse(text, nonfinite_fields)
    except UnicodeDecodeError:
        raise error(f"{source}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise error(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except NonFiniteError as exc:
        raise error(f"{source}: {exc}") from None
    except ValueError as exc:  # NaN / Infinity, or an integer of more than 4300 digits
        raise error(f"{source}: not valid JSON ({str(exc).splitlines()[0][:80]})") from None
    except RecursionError:
        raise error(f"{source}: JSON nested too deeply") from None


def read_json_file(path: str | Path, *, max_bytes: int, error: type[Exception], what: str,
                   nonfinite_fields: frozenset[str] = frozenset()) -> Any:
    """Parse `path` as JSON; raise `error("<path>: <problem>")` for anything wrong.

    `what` names the kind of file in the size message ("a config.json", "a profile", ...). Only a
    regular file is read (a FIFO or device is refused at once), with a stall timeout: safe_read.py.
    """
    p = Path(path)
    data = read_regular(p, max_bytes, error, what.removeprefix("a ").removeprefix("an "))
    return loads(data, error=error, source=str(p), nonfinite_fields=nonfinite_fields)

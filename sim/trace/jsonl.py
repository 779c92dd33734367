"""JSONL (and JSON-array) trace text -> a raw frame, streamed line by line with bounded memory.

A 100 MB upload must not cost a gigabyte: lines are parsed one at a time from the bytes (never
decoded or split as a whole), only the columns the detected format uses are kept, repeated prefix
hash ids share one int object, and at most `max_rows` rows are read (the caller says so). Every
problem is one TraceError line naming the file and the line.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from models.safe_json import MAX_DEPTH, NonFiniteError, json_depth, parse
from sim.trace.model import TraceError, TraceFormat

DETECT_LINES = 100  # objects read to detect the format before streaming the rest
CHUNK = 65_536  # rows gathered as Python objects before they become a typed frame


def _parse(raw: bytes | str, name: str, where: str) -> Any:
    try:
        return parse(raw)
    except NonFiniteError as exc:  # names the key: "line 3: timestamp: NaN is not a number"
        raise TraceError(f"{name}: {where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{name}: {where}: malformed JSON ({exc.msg}, column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{name}: {where}: not UTF-8 text (byte at column {exc.start + 1}); save the file as UTF-8") from None
    except RecursionError:
        raise TraceError(f"{name}: {where}: JSON nested too deeply") from None
    except ValueError as exc:  # NaN/Infinity, or an integer of more than 4300 digits
        raise TraceError(f"{name}: {where}: {str(exc).splitlines()[0][:80]}") from None


def _objects(data: bytes, name: str) -> Iterator[tuple[int, dict[str, Any], str]]:
    """(row number, object, label) for each non-blank line, or each item of a JSON array."""
    start = len(data) - len(data.lstrip())
    if data[start : start + 1] == b"[":
        if json_depth(data, MAX_DEPTH) > MAX_DEPTH:
            raise TraceError(f"{name}: JSON nested deeper than {MAX_DEPTH} levels")
        items = _parse(data.decode("utf-8-sig", errors="strict") if data[:3] == b"\xef\xbb\xbf" else data, name, "line 1")
        if not isinstance(items, list):
            raise TraceError(f"{name}: line 1: expected a JSON array of objects")
        for number, item in enumerate(items, start=1):
            yield number, _need_object(item, name, f"item {number}"), "item"
        return
    if b"\n" not in data and b"\r" in data:  # old Mac line endings: CR only
        data = data.replace(b"\r", b"\n")
    for number, line in enumerate(io.BytesIO(data), start=1):
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if not line.strip():
            continue
        yield number, _need_object(_parse(line, name, f"line {number}"), name, f"line {number}"), "line"


def _need_object(item: Any, name: str, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise TraceError(f"{name}: {where}: expected a JSON object, got {type(item).__name__}")
    return item


def parse_jsonl(
    data: bytes,
    name: str,
    choose: Callable[[pd.DataFrame], TraceFormat],
    max_rows: int | None = None,
) -> tuple[pd.DataFrame, str, TraceFormat, list[str]]:
    """(raw frame indexed by row number, row label, format, warnings). `choose` picks the format from
    a frame of the first objects (detection or the caller's explicit format)."""
    stream = _objects(data, name)
    head: list[tuple[int, dict[str, Any], str]] = []
    for entry in stream:
        head.append(entry)
        if len(head) >= DETECT_LINES:
            break
    if not head:
        raise TraceError(f"{name}: empty file")
    label = head[0][2]
    sample = pd.DataFrame.from_records([obj for _, obj, _ in head])
    sample.columns = [str(c).strip() for c in sample.columns]
    spec = choose(sample)
    wanted = None if spec.prepare is not None else [
        c for c in (spec.arrival, spec.input, spec.output, spec.session, spec.prefix_hashes) if c]
    frames, warnings = _collect(head, stream, wanted, spec, max_rows, name)
    df = pd.concat(frames) if len(frames) > 1 else frames[0]
    return df, label, spec, warnings


def _collect(head: list, stream: Iterator, wanted: list[str] | None, spec: TraceFormat,
             max_rows: int | None, name: str) -> tuple[list[pd.DataFrame], list[str]]:
    """Keep only the wanted keys (matched case-insensitively, spaces ignored) of every object, turned
    into typed frames every CHUNK rows so Python objects never pile up for the whole file."""
    frames: list[pd.DataFrame] = []
    columns: dict[str, list[Any]] = {}
    numbers: list[int] = []
    interned: dict[int, int] = {}  # prefix hash ids repeat a lot: one int object per distinct id
    warnings: list[str] = []
    for rows, (number, obj, _) in enumerate(_chain(head, stream)):
        if max_rows is not None and rows >= max_rows:
            warnings.append(f"{name}: rows capped: kept the first {max_rows:,} requests, the rest of the file was not read")
            break
        keys = {str(k).strip().lower(): k for k in obj}
        for col in wanted if wanted is not None else [str(k).strip() for k in obj]:
            value = obj.get(keys.get(col.lower(), col))
            if col == spec.prefix_hashes and isinstance(value, list):
                value = [interned.setdefault(v, v) if type(v) is int else v for v in value]
            if col not in columns:  # a key first seen on this row: earlier rows of the chunk lacked it
                columns[col] = [None] * len(numbers)
            columns[col].append(value)
        numbers.append(number)
        for values in columns.values():  # keys missing from this object
            if len(values) < len(numbers):
                values.append(None)
        if len(numbers) >= CHUNK:
            frames.append(_frame(columns, numbers, spec))
            columns, numbers = {}, []
    if numbers or not frames:
        frames.append(_frame(columns, numbers, spec))
    return frames, warnings


def _frame(columns: dict[str, list[Any]], numbers: list[int], spec: TraceFormat) -> pd.DataFrame:
    df = pd.DataFrame(columns, index=np.asarray(numbers, dtype=np.int64))
    if spec.session in df.columns and df[spec.session].dtype == object:
        df[spec.session] = df[spec.session].astype("str")  # Arrow text, not Python objects
    return df


def _chain(head: list, stream: Iterator) -> Iterator:
    yield from head
    yield from stream

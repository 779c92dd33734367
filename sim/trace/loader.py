"""Read a trace file safely and turn it into a canonical Trace.

Untrusted input: the size is bounded before reading, bytes must be UTF-8 text (no NULs), CSV is
parsed by pandas as strings and JSONL by json.loads per line; nothing is ever unpickled or
evaluated. Every problem is a one-line TraceError naming the file, the row and what is wrong.
Rows are "data row N" in CSV (1-based, header not counted) and "line N" in JSONL.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.guard import limits
from sim.guard.files import read_limited
from sim.guard.limits import MAX_HASH, MIN_HASH
from sim.trace.jsonl import parse_jsonl
from sim.trace.model import Trace, TraceError, TraceFormat

DEFAULT_MAX_BYTES = 200 * 1024 * 1024  # 200 MiB: several million rows; raise max_bytes for bigger files
MAX_TOKENS = limits.MAX_TOKENS  # per request; anything larger is corrupt data, not a prompt
MAX_TIME = 1e15  # |arrival| in the file's unit: epoch milliseconds reach 1.8e12; more is corrupt
_MAGIC = {b"\x1f\x8b": "gzip-compressed", b"PK\x03\x04": "a zip archive", b"PAR1": "Parquet"}


def load_trace(path: str | Path, fmt: str | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES,
               max_rows: int | None = None, **options: Any) -> Trace:
    """Load a trace file; `fmt` is a key of FORMATS or None to detect it from the header/JSON keys."""
    p = Path(path)
    try:
        size = p.stat().st_size if p.is_file() else None
    except OSError:  # unreadable paths get their one line from read_limited
        size = None
    if size is not None:
        _check_size(p.name, size, max_bytes)
    data = read_limited(p, max_bytes, TraceError, what="trace file")
    return load_trace_bytes(data, p.name, fmt, max_bytes=max_bytes, max_rows=max_rows, **options)


def load_trace_bytes(
    data: bytes, name: str, fmt: str | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES,
    max_rows: int | None = None, **options: Any
) -> Trace:
    """Load a trace from bytes (an upload); `name` is used in messages and as the Trace source.
    `max_rows` keeps only the first rows (uploads): the Trace's warnings say when it cut."""
    from sim.trace.registry import FORMATS

    _check_size(name, len(data), max_bytes)
    _check_binary(data, name)
    if fmt is not None and fmt not in FORMATS:
        raise TraceError(f"{name}: unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    head = data[:4096]
    start = len(head) - len(head.lstrip())
    kind = "jsonl" if data[start : start + 1] in (b"{", b"[") else "csv"

    def choose(raw: pd.DataFrame) -> TraceFormat:
        spec = FORMATS[fmt] if fmt else _detect(raw, kind, name, FORMATS)
        if kind not in spec.kinds:
            raise TraceError(f"{name}: format {spec.name} is {'/'.join(spec.kinds)}, but the file looks like {kind}")
        return spec

    if kind == "jsonl":
        raw, row_label, spec, warnings = parse_jsonl(data, name, choose, max_rows)
    else:
        # Without a format, the header alone must name one before any row is read: a text file that is
        # no trace (notes, a log) is told so, not reported as a "malformed CSV" at its first odd line.
        on_header = None if fmt else (lambda header: choose(pd.DataFrame(columns=header)))
        raw, row_label, warnings = _parse_csv(data, name, max_rows, on_header)
        spec = choose(raw)
    return _normalise(raw, spec, name, row_label, {k: v for k, v in options.items() if v is not None}, warnings)


# ----- bytes -> text ------------------------------------------------------------------------------
def _check_size(name: str, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise TraceError(
            f"{name}: file is {size / 2**20:.1f} MiB, over the {max_bytes / 2**20:.1f} MiB limit (raise max_bytes to allow it)"
        )


def _check_binary(data: bytes, name: str) -> None:
    for magic, what in _MAGIC.items():
        if data.startswith(magic):
            raise TraceError(f"{name}: binary data ({what}), expected CSV or JSONL text; decompress/convert it first")
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise TraceError(f"{name}: line {line}: binary data (NUL byte at offset {nul}), expected UTF-8 CSV or JSONL text")
    if not data.strip():
        raise TraceError(f"{name}: empty file")
    if not data.removeprefix(b"\xef\xbb\xbf").strip():
        raise TraceError(f"{name}: empty file (a UTF-8 byte-order mark and nothing else)")


def _check_utf8(data: bytes, name: str) -> None:
    """UTF-8 checked in 1 MiB pieces, keeping nothing: a whole decoded copy would cost 1-4x the file."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    step = 1 << 20
    for offset in range(0, len(data), step):
        try:
            decoder.decode(data[offset : offset + step], final=offset + step >= len(data))
        except UnicodeDecodeError as exc:
            at = offset + exc.start
            line = data.count(b"\n", 0, max(at, 0)) + 1
            raise TraceError(
                f"{name}: line {line}: not UTF-8 text (byte 0x{data[at]:02x} at offset {at}); save the file as UTF-8"
            ) from None


# ----- bytes -> raw frame (index = row number for messages) -----------------------------------------
def _parse_csv(data: bytes, name: str, max_rows: int | None = None,
               on_header: Callable[[list[str]], object] | None = None) -> tuple[pd.DataFrame, str, list[str]]:
    # Token and numeric-time columns are parsed as numbers by the C parser (fast); a column holding
    # anything else comes back as text and _integers/_seconds name the bad cell. All other columns
    # stay text (session ids keep leading zeros).
    _check_utf8(data, name)
    if b"\n" not in data[: 1 << 20] and b"\r" in data:  # old Mac line endings: CR only
        data = data.replace(b"\r", b"\n")
    head = data[:4096]
    start = len(head) - len(head.lstrip())
    end = data.find(b"\n", start)
    first = data[start : end if end >= 0 else len(data)].decode("utf-8-sig").rstrip("\r")
    header = next(csv.reader([first], skipinitialspace=True), [])
    _check_header(header, name)
    if on_header is not None:
        on_header([c.strip() for c in header])
    numeric = _numeric_column_names()
    dtype = {col: str for col in header if col.strip().lower() not in numeric}
    nrows = None if max_rows is None else max_rows + 1
    try:
        with warnings.catch_warnings():  # rows longer than the header: pandas would take columns as an index
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = pd.read_csv(io.BytesIO(data), encoding="utf-8-sig", index_col=False, dtype=dtype, keep_default_na=False,
                             skipinitialspace=True, nrows=nrows, true_values=[], false_values=[])
    except pd.errors.EmptyDataError:
        raise TraceError(f"{name}: empty file") from None
    except pd.errors.ParserWarning:
        raise TraceError(f"{name}: data rows have more fields than the header ({len(header)} columns)") from None
    except (pd.errors.ParserError, csv.Error, ValueError) as exc:
        text_ = str(exc).strip()
        ragged = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", text_)
        if ragged:
            want, line, saw = ragged.groups()
            raise TraceError(f"{name}: line {line}: malformed CSV ({saw} fields, the header has {want})") from None
        first = text_.splitlines()[0] if text_ else type(exc).__name__
        raise TraceError(f"{name}: malformed CSV: {first}") from None
    if len(df) == 0:
        raise TraceError(f"{name}: no data rows (header only)")
    notes = []
    if max_rows is not None and len(df) > max_rows:
        df = df.iloc[:max_rows]
        notes.append(f"{name}: rows capped: kept the first {max_rows:,} requests, the rest of the file was not read")
    df.columns = [str(c).strip() for c in df.columns]
    df.index = np.arange(1, len(df) + 1)
    return df, "data row", notes


def _check_header(header: list[str], name: str) -> None:
    """Two columns of one name would be silently renamed ("x.1") and one of them ignored."""
    seen: set[str] = set()
    for col in header:
        key = col.strip().lower()
        if key in seen:
            raise TraceError(f"{name}: header (line 1): column {col.strip()!r} appears twice")
        seen.add(key)


def _numeric_column_names() -> set[str]:
    from sim.trace.registry import FORMATS

    names = {c.lower() for f in FORMATS.values() for c in (f.input, f.output)}
    return names | {f.arrival.lower() for f in FORMATS.values() if f.time_unit != "datetime"}


# ----- raw frame -> Trace ---------------------------------------------------------------------------
def _lookup(columns: list[str]) -> dict[str, str]:
    return {c.lower(): c for c in columns}


def _detect(raw: pd.DataFrame, kind: str, name: str, formats: Mapping[str, TraceFormat]) -> TraceFormat:
    have = _lookup(list(raw.columns))
    candidates = [f for f in formats.values() if kind in f.kinds]
    for spec in candidates:
        if all(c.lower() in have for c in spec.required):
            return spec
    best = max(candidates, key=lambda f: sum(c.lower() in have for c in f.required))
    if sum(c.lower() in have for c in best.required) >= 2:
        _missing_column(best, raw, name, kind)
    where = "header" if kind == "csv" else "JSON keys"
    known = "; ".join(f"{f.name} ({', '.join(f.required)})" for f in candidates)
    raise TraceError(f"{name}: unknown format: {where} {list(raw.columns)[:8]} match none of: {known}")


def _missing_column(spec: TraceFormat, raw: pd.DataFrame, name: str, kind: str) -> None:
    have = _lookup(list(raw.columns))
    missing = [c for c in spec.required if c.lower() not in have]
    if missing:
        where = "header (line 1)" if kind == "csv" else "JSON keys"
        raise TraceError(
            f"{name}: {where}: missing column {missing[0]!r} for format {spec.name} (found: {', '.join(raw.columns[:8])})"
        )


def _normalise(raw: pd.DataFrame, spec: TraceFormat, name: str, label: str, options: dict[str, Any],
               warnings: list[str]) -> Trace:
    kind = "csv" if label == "data row" else "jsonl"
    _missing_column(spec, raw, name, kind)
    # None/False ask for nothing, so a caller may pass the same option set for every format
    unknown = sorted(k for k, v in options.items() if k not in spec.options and v not in (None, False))
    if unknown:
        allowed = ", ".join(spec.options) or "none"
        raise TraceError(f"{name}: option {unknown[0]!r} does not apply to format {spec.name} (options: {allowed})")
    opts = {**spec.options, **{k: v for k, v in options.items() if k in spec.options}}
    have = _lookup(list(raw.columns))
    wanted = [c for c in (spec.arrival, spec.input, spec.output, spec.session, spec.prefix_hashes) if c]
    raw = raw.rename(columns={have[c.lower()]: c for c in wanted if c.lower() in have})
    for col in (spec.input, spec.output):
        raw[col] = _integers(raw[col], col, name, label)
    if spec.prepare is not None:
        raw, extra = spec.prepare(raw, opts, name)
        warnings.extend(extra)
        if len(raw) == 0:
            raise TraceError(f"{name}: no requests left after filtering")
    for col in (spec.input, spec.output):
        bad = raw[col].to_numpy() <= 0
        if bad.any():
            row = raw.index[int(np.argmax(bad))]
            raise TraceError(f"{name}: {label} {row}: non-positive token count {raw[col].iat[int(np.argmax(bad))]} in {col!r}")
    arrival = _seconds(raw[spec.arrival], spec, name, label)
    session = None
    if spec.session and spec.session in raw.columns:
        session = raw[spec.session].fillna("").astype(str).str.strip().array  # stays Arrow text: no Python strs
    hashes = None
    if spec.prefix_hashes and spec.prefix_hashes in raw.columns:
        hashes = _hash_lists(raw[spec.prefix_hashes], raw[spec.input].to_numpy(), spec, name, label, warnings)
    return Trace.build(
        arrival,
        raw[spec.input].to_numpy(),
        raw[spec.output].to_numpy(),
        format=spec.name,
        source=name,
        session_id=session,
        prefix_hashes=hashes,
        prefix_block_size=spec.prefix_block_size if hashes is not None else None,
        warnings=warnings,
    )


def _first_bad(mask: np.ndarray, series: pd.Series) -> tuple[Any, Any]:
    i = int(np.argmax(mask))
    return series.index[i], series.iat[i]


def _is_empty(series: pd.Series) -> np.ndarray:
    return (series.isna() | (series.astype(str).str.strip() == "")).to_numpy()


def _no_booleans(series: pd.Series, col: str, name: str, label: str, what: str) -> None:
    """JSON true/false are not numbers (pandas would read them as 1 and 0)."""
    if series.dtype == bool or series.dtype == object:
        mask = series.map(lambda v: isinstance(v, bool)).to_numpy(dtype=bool) if series.dtype == object \
            else np.ones(len(series), dtype=bool)
        if mask.any():
            row, value = _first_bad(mask, series)
            raise TraceError(f"{name}: {label} {row}: {what} in {col!r} is {str(value).lower()}, not a number")


def _integers(series: pd.Series, col: str, name: str, label: str) -> pd.Series:
    _no_booleans(series, col, name, label, "token count")
    values = pd.to_numeric(series, errors="coerce")
    nan = values.isna().to_numpy()
    if nan.any():
        empty = _is_empty(series)
        if empty.any() and np.argmax(empty) <= np.argmax(nan):
            row, _ = _first_bad(empty, series)
            raise TraceError(f"{name}: {label} {row}: empty or missing value in {col!r}")
        row, value = _first_bad(nan, series)
        raise TraceError(f"{name}: {label} {row}: non-numeric token count {str(value)[:40]!r} in {col!r}")
    as_float = values.to_numpy(dtype=np.float64)
    fractional = ~np.isfinite(as_float) | (as_float != np.floor(as_float))
    if fractional.any():
        row, value = _first_bad(fractional, series)
        raise TraceError(f"{name}: {label} {row}: token count {str(value)[:40]!r} in {col!r} is not a whole number")
    huge = as_float > MAX_TOKENS
    if huge.any():
        row, value = _first_bad(huge, series)
        raise TraceError(f"{name}: {label} {row}: token count {str(value)[:40]!r} in {col!r} is implausibly large")
    return pd.Series(as_float.astype(np.int64), index=series.index)


def _seconds(series: pd.Series, spec: TraceFormat, name: str, label: str) -> np.ndarray:
    """Arrival times in seconds relative to the earliest one (Trace.build re-zeroes after sorting)."""
    col = spec.arrival
    if spec.time_unit == "datetime":
        stamps = pd.to_datetime(series, format="ISO8601", utc=True, errors="coerce")
        bad = stamps.isna().to_numpy()
        if bad.any():
            row, value = _first_bad(bad, series)
            what = "empty timestamp" if _is_empty(series.loc[[row]])[0] else f"unparseable timestamp {str(value)[:40]!r}"
            raise TraceError(f"{name}: {label} {row}: {what} in {col!r}")
        return (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=np.float64)
    _no_booleans(series, col, name, label, "arrival time")
    numbers = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(numbers)
    if bad.any():
        row, value = _first_bad(bad, series)
        what = "empty or missing" if _is_empty(series.loc[[row]])[0] else f"non-numeric {str(value)[:40]!r}"
        raise TraceError(f"{name}: {label} {row}: {what} arrival time in {col!r}")
    huge = np.abs(numbers) > MAX_TIME
    if huge.any():
        row, value = _first_bad(huge, series)
        raise TraceError(f"{name}: {label} {row}: arrival time {str(value)[:40]!r} in {col!r} is implausibly large")
    scale = {"s": 1.0, "ms": 1e-3}[spec.time_unit]
    return (numbers - numbers.min()) * scale


def _hash_lists(
    series: pd.Series, inputs: np.ndarray, spec: TraceFormat, name: str, label: str, warnings: list[str]
) -> list[list[int]]:
    lists = series.tolist()
    for row, value in zip(series.index, lists, strict=True):
        if not isinstance(value, list) or not all(type(v) is int and MIN_HASH <= v <= MAX_HASH for v in value):
            raise TraceError(
                f"{name}: {label} {row}: {spec.prefix_hashes!r} must be a list of integers of at most 64 bits")
    block = spec.prefix_block_size or 1
    lengths = np.fromiter((len(v) for v in lists), dtype=np.int64, count=len(lists))
    mismatched = int((lengths != -(-inputs // block)).sum())
    if mismatched:
        warnings.append(f"{name}: {mismatched} rows have len({spec.prefix_hashes}) != ceil(input/{block})")
    return lists


def resolve_trace(ref: str | Path, fmt: str | None = None, **options: Any) -> Trace:
    """A file path, or "synthetic:<spec>" (docs/TRACES.md): what CLIs and the dashboard accept."""
    if isinstance(ref, str) and ref.startswith("synthetic:"):
        from sim.trace.synthetic import parse_synthetic_spec

        if fmt is not None or options:
            raise TraceError(f"{ref}: --format and loader options do not apply to synthetic traces")
        return parse_synthetic_spec(ref).generate()
    return load_trace(ref, fmt, **options)

"""Snapshots: one run's view (scenario, trace, headline metrics, downsampled frames) as one JSON file,
and (sim/report/snapshot_store.py) a SQLite store that gives each saved snapshot an id for a `?snapshot=ID` link.

Why a file and not a re-run: a colleague must see the *same* numbers even if the code or the cost
model changed since; the scenario and trace travel along so the run can also be repeated. The
dashboard renders every result through a Snapshot, so a live view and a reopened one are identical.

Snapshot files are untrusted input: they are parsed as JSON only, size-limited, and every field is
checked; anything wrong raises SnapshotError with one line, and the store writes nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from models.safe_json import MAX_DEPTH, NonFiniteError, json_depth, parse
from sim.guard import bounded_all, whole
from sim.guard.limits import MAX_HASH, MAX_TOKENS, MIN_HASH
from sim.scenario import Scenario, ScenarioError
from sim.trace import Trace, TraceError

SCHEMA = "kvsim-snapshot"
SCHEMA_VERSION = 1
APP_VERSION = "0.1.0"
MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024  # a snapshot with an embedded 20k-row trace is ~2 MB
MAX_EMBEDDED_TRACE_ROWS = 20_000  # larger traces travel as their summary (and digest) only
MAX_STEP_ROWS = 2_000  # downsampled frames: enough for a chart, small enough for a link
MAX_REQUEST_ROWS = 5_000
MAX_FRAME_ROWS = 200_000  # refuse absurd uploaded frames
MAX_COLUMNS = 64
MAX_VALUE = 1e18  # any number in a frame or summary; larger is corrupt (and overflows int formatting)
DRAWN_COLUMNS = {"steps": ("t_s", "batch_size", "num_running", "num_waiting", "kv_cache_usage_perc", "num_preemptions")}
NUMERIC_SUMMARY = ("requests", "completed", "rejected", "unfinished", "clamped", "throughput_tok_s", "bytes_per_token",
                   "kv_capacity_bytes", "num_blocks", "block_size", "weights_bytes", "weight_bytes", "num_preemptions",
                   "duration_s", "mean_batch_size", "req_per_s")
LATENCY_SUMMARY = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "kv_cache_usage_perc", "kv_breakdown_mean")


class SnapshotError(ValueError):
    """A snapshot file or id cannot be used; the message is one line."""


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Everything needed to redraw one result. Frames are already downsampled."""

    scenario: Scenario
    trace_digest: str
    summary: dict[str, Any]
    requests: pd.DataFrame
    steps: pd.DataFrame
    trace_summary: dict[str, Any] = field(default_factory=dict)
    trace_data: dict[str, Any] | None = None  # the trace's columns when small enough to embed
    name: str = ""
    app_version: str = APP_VERSION
    created_utc: str = ""
    plan: dict[str, Any] | None = None  # a search under an SLO this run drills into (docs/PLAN.md)

    # ----- building ---------------------------------------------------------------------------
    @classmethod
    def from_result(cls, result: Any, trace: Trace | None = None, name: str = "") -> Snapshot:
        """Downsample a SimResult (anything with requests/steps/summary/scenario/trace_digest)."""
        if trace is not None and trace.digest() != str(result.trace_digest):
            raise ValueError(f"snapshot: trace {trace.digest()} is not the one this result ran on ({result.trace_digest})")
        trace_data = _trace_columns(trace) if trace is not None and len(trace) <= MAX_EMBEDDED_TRACE_ROWS else None
        return cls(
            scenario=result.scenario,
            trace_digest=str(result.trace_digest),
            summary=_jsonable(dict(result.summary)),
            requests=downsample(result.requests, MAX_REQUEST_ROWS),
            steps=downsample(result.steps, MAX_STEP_ROWS),
            trace_summary=_jsonable(trace.summary()) if trace is not None else {},
            trace_data=trace_data,
            name=name,
            created_utc=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )

    def named(self, name: str) -> Snapshot:
        return Snapshot(self.scenario, self.trace_digest, self.summary, self.requests, self.steps,
                        self.trace_summary, self.trace_data, name, self.app_version, self.created_utc, self.plan)

    def with_plan(self, plan: dict[str, Any]) -> Snapshot:
        """This run as the drill-down of a search (the search's rows, best and Pareto travel along)."""
        _check_plan(plan, "plan")
        return Snapshot(self.scenario, self.trace_digest, self.summary, self.requests, self.steps,
                        self.trace_summary, self.trace_data, self.name, self.app_version, self.created_utc,
                        _jsonable(plan))

    # ----- serialising ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "app_version": self.app_version,
            "created_utc": self.created_utc,
            "name": self.name,
            "scenario": self.scenario.to_dict(),
            "trace_digest": self.trace_digest,
            "trace_summary": self.trace_summary,
            "trace": self.trace_data,
            "summary": self.summary,
            "requests": _frame_to_json(self.requests),
            "steps": _frame_to_json(self.steps),
        } | ({"plan": self.plan} if self.plan is not None else {})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: bytes | str, source: str = "snapshot") -> Snapshot:
        """Parse an untrusted snapshot file: JSON only, size-limited, every field checked."""
        if len(data) > MAX_SNAPSHOT_BYTES:
            raise SnapshotError(f"{source}: {len(data):,} bytes is over the {MAX_SNAPSHOT_BYTES:,}-byte snapshot limit")
        if json_depth(data) > MAX_DEPTH:
            raise SnapshotError(f"{source}: JSON nested deeper than {MAX_DEPTH} levels")
        try:
            obj = parse(data)
        except NonFiniteError as exc:
            raise SnapshotError(f"{source}: {exc}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SnapshotError(f"{source}: not a JSON snapshot file ({str(exc).splitlines()[0][:80]})") from None
        except (ValueError, RecursionError) as exc:  # NaN/Infinity, a 5000-digit integer
            raise SnapshotError(f"{source}: not a JSON snapshot file ({str(exc).splitlines()[0][:80]})") from None
        return cls.from_dict(obj, source)

    @classmethod
    def from_dict(cls, obj: Any, source: str = "snapshot") -> Snapshot:
        if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
            raise SnapshotError(f"{source}: not a kvsim snapshot (no \"schema\": \"{SCHEMA}\")")
        version = obj.get("schema_version")
        if version != SCHEMA_VERSION:
            raise SnapshotError(f"{source}: unknown schema_version {version!r} (this app reads {SCHEMA_VERSION})")
        try:
            scenario = Scenario.from_dict(obj.get("scenario"))
        except ScenarioError as exc:
            raise SnapshotError(f"{source}: {exc}") from None
        digest = _need(obj, "trace_digest", str, source)
        summary = _check_summary(_need(obj, "summary", dict, source), source)
        trace_summary = obj.get("trace_summary") or {}
        if not isinstance(trace_summary, dict):
            raise SnapshotError(f"{source}: trace_summary must be an object")
        _check_leaves(trace_summary, f"{source}: trace_summary")
        trace_data = obj.get("trace")
        if trace_data is not None:
            _check_trace_data(trace_data, source)
        snap = cls(
            scenario=scenario,
            trace_digest=digest,
            summary=summary,
            requests=_frame_from_json(obj.get("requests"), "requests", source),
            steps=_frame_from_json(obj.get("steps"), "steps", source),
            trace_summary=trace_summary,
            trace_data=trace_data,
            name=str(obj.get("name") or "")[:200],
            app_version=str(obj.get("app_version") or "")[:40],
            created_utc=str(obj.get("created_utc") or "")[:40],
            plan=_check_plan(obj["plan"], source) if obj.get("plan") is not None else None,
        )
        if trace_data is not None:
            rebuilt = snap.trace(source)
            if rebuilt is not None and rebuilt.digest() != digest:
                raise SnapshotError(f"{source}: embedded trace does not match trace_digest {digest}")
        return snap

    def trace(self, source: str = "snapshot") -> Trace | None:
        """The embedded trace, rebuilt (same digest as the original), or None when it was too big.
        `source` is the snapshot file: errors name it first, then the trace inside."""
        if self.trace_data is None:
            return None
        d = self.trace_data
        try:
            return Trace.build(
                d["arrival_s"], d["input_tokens"], d["output_tokens"],
                format=str(d.get("format", "snapshot")), source=str(d.get("source", "snapshot")),
                session_id=d.get("session_id"), prefix_hashes=d.get("prefix_hashes"),
                prefix_block_size=d.get("prefix_block_size"),
            )
        except (TraceError, ValueError, TypeError, OverflowError) as exc:
            inner = str(d.get("source", "snapshot"))
            why = str(exc).removeprefix(f"{inner}: ")
            raise SnapshotError(f"{source}: embedded trace {inner[:80]!r}: {why}") from None


def _check_plan(plan: Any, source: str) -> dict[str, Any]:
    """A search result (sim.plan.search.SearchResult.to_dict) as found in an untrusted file: the
    keys the Plan view reads, with the types it reads them as."""
    def bad(why: str) -> SnapshotError:
        return SnapshotError(f"{source}: plan: {why}")

    if not isinstance(plan, dict) or not isinstance(plan.get("rows"), list) or not isinstance(plan.get("slo"), str):
        raise bad("expected an object with rows (list) and slo (text)")
    if len(plan["rows"]) > 4096:
        raise bad(f"{len(plan['rows'])} rows (at most 4096)")
    numbers = ("max_rate_per_s", "tok_s_per_gpu")
    for i, row in enumerate(plan["rows"]):
        if not isinstance(row, dict) or not isinstance(row.get("binding"), str) or not isinstance(row.get("scenario"), dict):
            raise bad(f"row {i}: expected an object with binding and scenario")
        for key in numbers + ("tok_s_per_user", "cost_per_mtok", "gpus_for_target"):
            value = row.get(key)
            if (value is not None or key in numbers) and (isinstance(value, bool) or not isinstance(value, int | float)
                                                          or not math.isfinite(value)):
                raise bad(f"row {i}: {key} must be a finite number")
    for key in ("pareto",):
        if not isinstance(plan.get(key, []), list) or not all(
                isinstance(p, dict) and isinstance(p.get("row"), int) and 0 <= p["row"] < len(plan["rows"])
                for p in plan.get(key, [])):
            raise bad(f"{key}: expected a list of {{row: index}}")
    best = plan.get("best")
    if best is not None and not (isinstance(best, dict) and isinstance(best.get("row"), int)
                                 and 0 <= best["row"] < len(plan["rows"])):
        raise bad("best: expected null or {row: index}")
    return plan


# ----- frames ---------------------------------------------------------------------------------

def snapshot_link(page_url: str | None, snap_id: str, base_url_path: str = "") -> str:
    """The `?snapshot=ID` link to share, from the URL of the page it was saved on: the server's root
    (under its `server.baseUrlPath`, if any), whichever page that was, since the link opens the
    Snapshots page by itself. Relative ("/?snapshot=ID") when the page URL is unknown."""
    parts = urlsplit(page_url or "")
    prefix = "/" + base_url_path.strip("/") if base_url_path.strip("/") else ""
    origin = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
    return f"{origin}{prefix}/?snapshot={snap_id}"


def downsample(df: pd.DataFrame, max_rows: int) -> pd.DataFrame:
    """Every k-th row (first and last kept) so a chart keeps its shape; small frames pass unchanged."""
    n = len(df)
    if n <= max_rows:
        return df.reset_index(drop=True)
    idx = np.unique(np.linspace(0, n - 1, max_rows).round().astype(int))
    return df.iloc[idx].reset_index(drop=True)


def _frame_to_json(df: pd.DataFrame) -> dict[str, Any]:
    cols = [str(c) for c in df.columns]
    data = [[_cell(v) for v in row] for row in df.itertuples(index=False, name=None)]
    return {"columns": cols, "data": data}


def _cell(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if v is pd.NA or v is pd.NaT:
        return None
    return str(v)


def _frame_from_json(obj: Any, what: str, source: str) -> pd.DataFrame:
    if not isinstance(obj, dict) or not isinstance(obj.get("columns"), list) or not isinstance(obj.get("data"), list):
        raise SnapshotError(f"{source}: {what} must be an object with \"columns\" and \"data\" lists")
    cols, rows = obj["columns"], obj["data"]
    if len(cols) > MAX_COLUMNS or not all(isinstance(c, str) and len(c) <= 64 for c in cols):
        raise SnapshotError(f"{source}: {what}.columns must be at most {MAX_COLUMNS} short strings")
    if len(rows) > MAX_FRAME_ROWS:
        raise SnapshotError(f"{source}: {what} has {len(rows):,} rows (limit {MAX_FRAME_ROWS:,})")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(cols):
            raise SnapshotError(f"{source}: {what} row {i + 1}: expected {len(cols)} values")
        for v in row:
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise SnapshotError(f"{source}: {what} row {i + 1}: values must be numbers or null, got {v!r}"[:200])
        for v in row:
            if v is not None and not abs(v) <= MAX_VALUE:
                raise SnapshotError(f"{source}: {what} row {i + 1}: value {str(v)[:30]} is out of range")
    missing = [c for c in DRAWN_COLUMNS.get(what, ()) if c not in cols]
    if missing and rows:
        raise SnapshotError(f"{source}: {what} lacks the column {missing[0]!r} the charts draw")
    df = pd.DataFrame(rows, columns=cols)
    for c in df.columns:  # all-null columns come back as object; make them numeric
        df[c] = pd.to_numeric(df[c])
    return df


def _check_leaves(value: Any, where: str, depth: int = 0) -> None:
    """Summary-like objects: numbers finite and bounded, strings short, nesting shallow."""
    if depth > 8:
        raise SnapshotError(f"{where}: nested too deeply")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_leaves(v, f"{where}.{str(k)[:40]}", depth + 1)
    elif isinstance(value, list):
        for v in value[:100_000]:
            _check_leaves(v, where, depth + 1)
    elif isinstance(value, int | float) and not isinstance(value, bool) and not abs(value) <= MAX_VALUE:
        raise SnapshotError(f"{where}: value {str(value)[:30]} is out of range")
    elif isinstance(value, str) and len(value) > 2000:
        raise SnapshotError(f"{where}: text of {len(value):,} characters is too long")


def _check_summary(summary: dict[str, Any], source: str) -> dict[str, Any]:
    """The headline figures must be numbers (or null) and the latency blocks objects of numbers,
    so the page's formatting never meets a string, a boolean or an overflow."""
    _check_leaves(summary, f"{source}: summary")
    for key in NUMERIC_SUMMARY:
        v = summary.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise SnapshotError(f"{source}: summary.{key} must be a number, got {str(v)[:30]!r}")
    for key in LATENCY_SUMMARY:
        block = summary.get(key)
        if block is None:
            continue
        if not isinstance(block, dict) or any(v is not None and (isinstance(v, bool) or not isinstance(v, int | float))
                                              for v in block.values()):
            raise SnapshotError(f"{source}: summary.{key} must be an object of numbers")
    return summary


# ----- embedded trace -------------------------------------------------------------------------

def _trace_columns(trace: Trace) -> dict[str, Any]:
    df = trace.df
    data: dict[str, Any] = {
        "format": trace.format,
        "source": Path(str(trace.source)).name,
        "arrival_s": df["arrival_s"].astype(float).tolist(),
        "input_tokens": df["input_tokens"].astype(int).tolist(),
        "output_tokens": df["output_tokens"].astype(int).tolist(),
    }
    if trace.has_sessions:
        data["session_id"] = df["session_id"].astype(str).tolist()
    if trace.has_prefix_hashes:
        data["prefix_hashes"] = [[int(h) for h in x] for x in df["prefix_hashes"]]
        data["prefix_block_size"] = trace.prefix_block_size
    return data


MAX_ARRIVAL_S = 1e12  # an embedded trace's arrivals start at 0; 30,000 years is corrupt data
MAX_PREFIX_BLOCK = 1 << 20


def _check_trace_data(d: Any, source: str) -> None:
    """The embedded trace's columns, every value bounded (sim.guard) before numpy or the digest sees
    it: a 90-bit hash id or a 1e30 token count is named with its row, never an OverflowError."""
    if not isinstance(d, dict):
        raise SnapshotError(f"{source}: trace must be an object or null")
    lengths = set()
    for key, hi, integer in (("arrival_s", MAX_ARRIVAL_S, False), ("input_tokens", MAX_TOKENS, True),
                             ("output_tokens", MAX_TOKENS, True)):
        col = d.get(key)
        if not isinstance(col, list):
            raise SnapshotError(f"{source}: trace.{key} must be a list of numbers")
        if len(col) > MAX_FRAME_ROWS:
            break
        bounded_all(col, f"{source}: trace.{key}", 0 if key == "arrival_s" else 1, hi, SnapshotError, integer=integer)
        lengths.add(len(col))
    if len(lengths) != 1 or lengths.pop() > MAX_FRAME_ROWS:
        raise SnapshotError(f"{source}: trace columns must have one common length (at most {MAX_FRAME_ROWS:,})")
    if "session_id" in d and not (isinstance(d["session_id"], list) and all(isinstance(v, str) for v in d["session_id"])):
        raise SnapshotError(f"{source}: trace.session_id must be a list of strings")
    if "prefix_hashes" in d:
        ph = d["prefix_hashes"]
        if not isinstance(ph, list) or len(ph) != len(d["input_tokens"]) or not all(isinstance(x, list) for x in ph):
            raise SnapshotError(f"{source}: trace.prefix_hashes must be one list of ints per request")
        whole(d.get("prefix_block_size"), f"{source}: trace.prefix_block_size", 1, MAX_PREFIX_BLOCK, SnapshotError)
        for row, hashes in enumerate(ph, start=1):
            bounded_all(hashes, f"{source}: trace.prefix_hashes row {row}", MIN_HASH, MAX_HASH, SnapshotError,
                        integer=True, row="item")


def _need(obj: Mapping[str, Any], key: str, typ: type, source: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, typ):
        raise SnapshotError(f"{source}: \"{key}\" must be a {typ.__name__}")
    return value


def _jsonable(value: Any) -> Any:
    """Summary dicts may hold numpy scalars or NaN; make them strict-JSON values."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return _cell(value)

"""The Trace record every loader, generator and transform produces, and the one error type.

A Trace is a pandas frame in one canonical shape (see docs/TRACES.md), so the simulator, the GPU
backend and the dashboard never care which file format a workload came from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

CORE_COLUMNS = ("arrival_s", "input_tokens", "output_tokens")
OPTIONAL_COLUMNS = ("session_id", "prefix_hashes")


def _strings(values: Any) -> Any:
    """A pandas string array; a pandas column stays in its own (Arrow) storage, no Python-object detour."""
    if isinstance(values, pd.Series | pd.api.extensions.ExtensionArray):
        return pd.array(values, dtype="str")
    return pd.array(np.asarray(values, dtype=object).astype(str), dtype="str")


class TraceError(ValueError):
    """Bad trace input. The message is one line: file, row (or line) and the problem."""


@dataclass(frozen=True, eq=False)
class Trace:
    """A request trace in canonical form.

    `df` columns: arrival_s (float64, sorted, first = 0.0), input_tokens and output_tokens (int64 > 0),
    optionally session_id (str) and prefix_hashes (a list of ints per row, hashed over blocks of
    `prefix_block_size` tokens). Build one with `Trace.build`, which enforces all of that.
    """

    df: pd.DataFrame
    format: str
    source: str
    prefix_block_size: int | None = None
    warnings: tuple[str, ...] = ()
    history: tuple[str, ...] = field(default=())  # transforms applied, oldest first

    @classmethod
    def build(
        cls,
        arrival_s: Any,
        input_tokens: Any,
        output_tokens: Any,
        *,
        format: str,
        source: str,
        session_id: Any = None,
        prefix_hashes: Any = None,
        prefix_block_size: int | None = None,
        warnings: tuple[str, ...] | list[str] = (),
        history: tuple[str, ...] = (),
    ) -> Trace:
        """Sort by arrival (stable, with a warning if needed), re-zero, check types and positivity."""
        arrival = _column(arrival_s, np.float64, "arrival time", source)
        inp = _column(input_tokens, np.int64, "input_tokens", source)
        out = _column(output_tokens, np.int64, "output_tokens", source)
        n = len(arrival)
        if n == 0:
            raise TraceError(f"{source}: no requests")
        if len(inp) != n or len(out) != n:
            raise TraceError(f"{source}: column lengths differ ({n}, {len(inp)}, {len(out)})")
        if not np.isfinite(arrival).all():
            raise TraceError(f"{source}: row {int(np.argmin(np.isfinite(arrival))) + 1}: arrival time is not finite")
        for name, col in (("input_tokens", inp), ("output_tokens", out)):
            if (col <= 0).any():
                row = int(np.argmax(col <= 0)) + 1
                raise TraceError(f"{source}: row {row}: {name} must be > 0, got {col[row - 1]}")
        warns = list(warnings)
        columns: dict[str, Any] = {"arrival_s": arrival, "input_tokens": inp, "output_tokens": out}
        if session_id is not None:
            columns["session_id"] = _strings(session_id)
        if prefix_hashes is not None:
            columns["prefix_hashes"] = pd.Series(list(prefix_hashes), dtype=object).to_numpy()
        df = pd.DataFrame(columns)
        if n > 1 and (np.diff(arrival) < 0).any():
            unsorted = int((np.diff(arrival) < 0).sum())
            warns.append(f"{source}: timestamps were not sorted ({unsorted} out-of-order steps); sorted by arrival")
            df = df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
        first = df["arrival_s"].iat[0]
        if first != 0.0:
            df["arrival_s"] = df["arrival_s"] - first
        return cls(df, format, source, prefix_block_size, tuple(warns), tuple(history))

    # ----- cheap accessors for the engine -----------------------------------------------------
    def __len__(self) -> int:
        return len(self.df)

    @property
    def rows(self) -> int:
        return len(self.df)

    @property
    def duration_s(self) -> float:
        return float(self.df["arrival_s"].iat[-1])

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(arrival_s float64, input_tokens int64, output_tokens int64) as numpy arrays (no copies)."""
        return (
            self.df["arrival_s"].to_numpy(),
            self.df["input_tokens"].to_numpy(),
            self.df["output_tokens"].to_numpy(),
        )

    @property
    def has_sessions(self) -> bool:
        return "session_id" in self.df.columns

    @property
    def has_prefix_hashes(self) -> bool:
        return "prefix_hashes" in self.df.columns

    # ----- identity ---------------------------------------------------------------------------
    def digest(self) -> str:
        """Stable content hash (16 hex chars) over the canonical columns: a cache key for st.cache_data."""
        return self._digest

    @cached_property
    def _digest(self) -> str:
        h = hashlib.sha256()
        for name in CORE_COLUMNS:
            h.update(name.encode())
            h.update(np.ascontiguousarray(self.df[name].to_numpy()).tobytes())
        if self.has_sessions:
            h.update(b"session_id")
            ids = self.df["session_id"].astype(str)
            for start in range(0, len(ids), 65_536):  # in pieces: one joined string of 2M ids is large
                h.update(("\x1f" if start else "").encode() + "\x1f".join(ids.iloc[start : start + 65_536]).encode())
        if self.has_prefix_hashes:
            h.update(f"prefix_hashes/{self.prefix_block_size}".encode())
            lists = self.df["prefix_hashes"].tolist()
            h.update(np.asarray([len(x) for x in lists], dtype=np.int64).tobytes())
            flat = [v for x in lists for v in x]
            h.update(_hash_bytes(flat))
        return h.hexdigest()[:16]

    def __hash__(self) -> int:
        return hash(self.digest())

    def with_df(self, df: pd.DataFrame, step: str, warnings: tuple[str, ...] = ()) -> Trace:
        """A new Trace on a transformed frame, with `step` appended to the history."""
        df = df.reset_index(drop=True)
        if len(df) == 0:
            raise TraceError(f"{self.source}: {step} leaves no requests")
        first = df["arrival_s"].iat[0]
        if first != 0.0:
            df["arrival_s"] = df["arrival_s"] - first
        new = replace(self, df=df, warnings=self.warnings + tuple(warnings), history=self.history + (step,))
        new.__dict__.pop("_digest", None)
        return new

    def first(self, n: int) -> Trace:
        """The first n requests (0 or n >= len: all): the arrival process untouched, only shortened."""
        return self if not n or n >= len(self) else self.with_df(self.df.head(n).copy(), f"first:{n}")

    def to_csv(self, path: Any = None) -> str | None:
        """Write the generic CSV format (arrival_s,input_tokens,output_tokens[,session_id]); it loads
        back to the same arrays. Prefix hashes are not written (CSV has no list cells)."""
        columns = [c for c in (*CORE_COLUMNS, "session_id") if c in self.df.columns]
        return self.df[columns].to_csv(path, index=False, lineterminator="\n")

    # ----- description ------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Headline figures (the `python -m sim trace --json` output)."""
        arrival, inp, out = self.arrays()
        duration = self.duration_s
        summary: dict[str, Any] = {
            "format": self.format,
            "source": self.source,
            "rows": self.rows,
            "duration_s": round(duration, 6),
            "rate_per_s": round(self.rows / duration, 6) if duration > 0 else None,
            "input_tokens": _stats(inp),
            "output_tokens": _stats(out),
            "digest": self.digest(),
        }
        if self.has_sessions:
            summary["sessions"] = int(self.df["session_id"].nunique())
        if self.has_prefix_hashes:
            summary["prefix_block_size"] = self.prefix_block_size
        if self.history:
            summary["history"] = list(self.history)
        if self.warnings:
            summary["warnings"] = list(self.warnings)
        return summary


def _column(values: Any, dtype: type, name: str, source: str) -> np.ndarray:
    """A numeric column as numpy; a value numpy cannot hold (a 1e30 count, a string) is one TraceError
    line naming the row, never an OverflowError (readers bound their values first; this is the net)."""
    try:
        return np.asarray(values, dtype=dtype)
    except (OverflowError, ValueError, TypeError):
        for row, value in enumerate(values, start=1):
            try:
                np.asarray(value, dtype=dtype)
            except (OverflowError, ValueError, TypeError):
                raise TraceError(f"{source}: row {row}: {name} {str(value)[:40]!r} is not a "
                                 f"{'number' if dtype is np.float64 else 'whole number of at most 64 bits'}") from None
        raise TraceError(f"{source}: {name} is not a column of numbers") from None


def _hash_bytes(flat: list[int]) -> bytes:
    """Prefix hash ids as 8 bytes each: int64 two's complement, so an unsigned id >= 2**63 (Mooncake's
    ids are unsigned 64-bit) has the bytes of its int64 alias; digests of signed ids are unchanged."""
    try:
        return np.asarray(flat, dtype=np.int64).tobytes()
    except OverflowError:
        return np.asarray([v & 0xFFFF_FFFF_FFFF_FFFF for v in flat], dtype=np.uint64).tobytes()


def _stats(values: np.ndarray) -> dict[str, float]:
    p50, p99 = np.percentile(values, [50, 99])
    return {
        "mean": round(float(values.mean()), 3),
        "p50": round(float(p50), 3),
        "p99": round(float(p99), 3),
        "min": int(values.min()),
        "max": int(values.max()),
        "total": int(values.sum()),
    }


@dataclass(frozen=True)
class TraceFormat:
    """How one file format maps onto the canonical columns (one instance per file in formats/).

    Column names are matched case-insensitively, ignoring surrounding spaces. `time_unit` is "s",
    "ms" or "datetime" (ISO-8601 text, any fraction, optional UTC offset). `prepare` may filter raw
    rows after the token columns are numeric (BurstGPT uses it) and returns warnings.
    """

    name: str
    description: str
    kinds: tuple[str, ...]  # "csv" and/or "jsonl"
    arrival: str
    input: str
    output: str
    time_unit: str = "s"
    session: str | None = None
    prefix_hashes: str | None = None
    prefix_block_size: int | None = None
    options: dict[str, Any] = field(default_factory=dict)  # option name -> default
    prepare: Any = None  # callable(df, options, source) -> (df, list[str] warnings)

    @property
    def required(self) -> tuple[str, str, str]:
        return (self.arrival, self.input, self.output)

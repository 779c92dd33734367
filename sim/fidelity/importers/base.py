"""What every importer returns, and how it becomes a MeasuredRun that `sim validate` replays.

An importer reads one benchmark tool's file into `Imported`: per-request rows on one clock
(send, first token, last token in seconds; input and output tokens), or, for a file that keeps
only aggregates, the reported statistics and the mean lengths; plus what the file says about the
engine (model, request rate) and what had to be assumed. `to_run` then completes the engine
configuration — the user's overrides (--gpu, --model, --num-gpu-blocks, ...) first, then vLLM's
defaults for the GPU, the KV pool as kvsim's vLLM accounting sizes it — and names every assumption
in `meta["assumed"]`. Files are untrusted: parsed as JSON/CSV only, bounded, and a problem is one
RunError line naming the file, the request and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim.fidelity.run_record import OVERRIDABLE, RunError

MAX_IMPORT_BYTES = 64 << 20


@dataclass
class Imported:
    """One file's requests (or aggregates) and what it says about the engine."""

    tool: str  # the format's registry name
    send: list[float] = field(default_factory=list)  # seconds, one clock
    first: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    failed: int = 0
    model: str | None = None
    engine: dict[str, Any] = field(default_factory=dict)  # OVERRIDABLE names the file gives
    assumed: dict[str, str] = field(default_factory=dict)
    reported: dict[str, dict[str, float]] = field(default_factory=dict)  # aggregates-only: metric -> stat -> s
    reported_duration_s: float | None = None

    def add(self, where: str, send: Any, first: Any, last: Any, n_in: Any, n_out: Any) -> None:
        """One successful request; timestamps in seconds on the file's clock."""
        s, f, la = (number(v, k, where) for v, k in ((send, "send time"), (first, "first token time"),
                                                        (last, "last token time")))
        i, o = whole(n_in, "input tokens", where), whole(n_out, "output tokens", where)
        if not s <= f <= la:
            raise RunError(f"{where}: times must satisfy send <= first token <= last token ({s}, {f}, {la})")
        self.send.append(s)
        self.first.append(f)
        self.last.append(la)
        self.input_tokens.append(i)
        self.output_tokens.append(o)


def number(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RunError(f"{where}: {key} must be a number, got {value!r}"[:200])
    x = float(value)
    if not math.isfinite(x) or abs(x) > 1e15:
        raise RunError(f"{where}: {key} must be a finite number, got {value!r}")
    return x


def whole(value: Any, key: str, where: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000_000:
        raise RunError(f"{where}: {key} must be a whole number of tokens >= 1, got {value!r}"[:200])
    return value


def load_json(data: bytes, name: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise RunError(f"{name}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise RunError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise RunError(f"{name}: JSON nested too deeply") from None


def requests_frame(imp: Imported, name: str) -> pd.DataFrame:
    """The measured requests as sim.fidelity.run_record.parse_requests makes them."""
    if not imp.send:
        raise RunError(f"{name}: no completed requests" + (f" ({imp.failed} failed)" if imp.failed else ""))
    a = np.array([imp.send, imp.first, imp.last, imp.input_tokens, imp.output_tokens], dtype=np.float64).T
    a = a[np.argsort(a[:, 0], kind="stable")]
    send, first, last, inp, out = a.T
    origin = send[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (last - first) / np.maximum(out - 1, 1), np.nan)
    return pd.DataFrame({
        "arrival_s": send - origin, "input_tokens": inp.astype(np.int64), "output_tokens": out.astype(np.int64),
        "ttft_s": first - send, "tpot_s": tpot, "e2e_s": last - send, "finish_s": last - origin,
    })


def to_run(imp: Imported, name: str, overrides: dict[str, Any] | None = None) -> Any:
    """A MeasuredRun: the file's requests and an engine completed from the overrides, then defaults."""
    from sim.fidelity.importers.engine_defaults import complete_engine
    from sim.fidelity.run_record import MeasuredRun, parse_engine

    given = {**imp.engine, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    unknown = set(given) - set(OVERRIDABLE)
    if unknown:
        raise RunError(f"{name}: cannot override {', '.join(sorted(unknown))}")
    if imp.model and "model" not in given:
        given["model"] = imp.model
    meta, assumed = complete_engine(given, name)
    meta["assumed"] = {**imp.assumed, **assumed}
    meta["imported_from"] = {"tool": imp.tool, "file": name, "failed": imp.failed}
    if imp.reported:
        meta["reported"] = imp.reported
        meta["reported_duration_s"] = imp.reported_duration_s
    engine = parse_engine(meta, f"{name} (engine)")
    empty = pd.DataFrame({"t_s": [], "num_running": [], "num_waiting": [], "kv_cache_usage_perc": []}, dtype=float)
    frame = requests_frame(imp, name)
    if imp.reported:  # per-request latencies unknown: the comparison reads meta["reported"]
        frame[["ttft_s", "tpot_s", "e2e_s", "finish_s"]] = np.nan
    return MeasuredRun(name, engine, frame, empty, None, meta, imp.failed)

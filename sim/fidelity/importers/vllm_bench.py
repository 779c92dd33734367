"""`vllm bench serve --save-result` JSON (field names of vLLM 0.32.0's benchmarks/serve.py).

With `--save-detailed` the file holds per-request lists, index-aligned: `input_lens`,
`output_lens`, `ttfts` (s), `itls` (per request, s), `errors` ("" = success), and in recent releases
`start_times` (time.perf_counter() at send) and `latencies` (s). A request is:
send = start_times[i] (else i / request_rate: the file has no send times, stated in `assumed`),
first token = send + ttfts[i], last token = send + latencies[i] (else first + sum(itls[i])),
tokens = input_lens[i], output_lens[i]; a non-empty errors[i] or an output of 0 is a failure.
Without --save-detailed only aggregates are kept: every request gets the mean lengths
(total_input_tokens / completed, total_output_tokens / completed), arrivals i / request_rate,
and the comparison uses the file's reported mean/median/p99 of TTFT (`*_ttft_ms`), TPOT
(`*_tpot_ms`), E2E (`*_e2el_ms`) and its `duration`. `model_id` names the model.
"""

from __future__ import annotations

import math
import re
from typing import Any

from sim.fidelity.importers.base import Imported, number, whole
from sim.fidelity.run_record import RunError

NAME = "vllm-bench"
DESCRIPTION = "`vllm bench serve --save-result` JSON, with or without --save-detailed"
_STAT = re.compile(r"^(mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|e2el)_ms$")
_METRIC = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}


def detect(obj: Any) -> bool:
    return isinstance(obj, dict) and "completed" in obj and "total_input_tokens" in obj and (
        "mean_ttft_ms" in obj or "ttfts" in obj)


def _rate(obj: dict[str, Any]) -> float:
    try:
        rate = float(obj.get("request_rate"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.inf
    return rate if rate > 0 else math.inf


def parse(obj: dict[str, Any], name: str) -> Imported:
    imp = Imported(NAME, model=obj.get("model_id") if isinstance(obj.get("model_id"), str) else None)
    rate = _rate(obj)
    if "ttfts" in obj:
        _detailed(obj, name, imp, rate)
    else:
        _aggregates(obj, name, imp, rate)
    return imp


def _column(obj: dict[str, Any], key: str, n: int | None, name: str) -> list[Any] | None:
    col = obj.get(key)
    if col is None:
        return None
    if not isinstance(col, list) or (n is not None and len(col) != n):
        raise RunError(f"{name}: {key} must be a list of {n} entries (one per request)")
    return col


def _detailed(obj: dict[str, Any], name: str, imp: Imported, rate: float) -> None:
    ttfts = _column(obj, "ttfts", None, name) or []
    n = len(ttfts)
    ins, outs = _column(obj, "input_lens", n, name), _column(obj, "output_lens", n, name)
    if ins is None or outs is None:
        raise RunError(f"{name}: a detailed result needs input_lens and output_lens beside ttfts")
    itls = _column(obj, "itls", n, name) or [[] for _ in range(n)]
    starts, lats = _column(obj, "start_times", n, name), _column(obj, "latencies", n, name)
    errors = _column(obj, "errors", n, name) or [""] * n
    if starts is None:
        imp.assumed["arrivals"] = ("the file has no start_times (an older vLLM): requests sent at i / request_rate"
                                   if math.isfinite(rate) else "the file has no start_times and request_rate is inf: "
                                   "all requests sent at t = 0")
    for i in range(n):
        where = f"{name}: request {i}"
        if errors[i] or outs[i] in (0, None):
            imp.failed += 1
            continue
        send = number(starts[i], "start_times", where) if starts is not None else (i / rate if math.isfinite(rate) else 0.0)
        first = send + number(ttfts[i], "ttfts", where)
        if lats is not None:
            last = send + number(lats[i], "latencies", where)
        else:
            gaps = itls[i] if isinstance(itls[i], list) else []
            last = first + sum(number(g, "itls", where) for g in gaps)
        imp.add(where, send, first, max(first, last), ins[i], outs[i])


def _aggregates(obj: dict[str, Any], name: str, imp: Imported, rate: float) -> None:
    done = whole(obj.get("completed"), "completed", name)
    mean_in = max(1, round(number(obj.get("total_input_tokens"), "total_input_tokens", name) / done))
    mean_out = max(1, round(number(obj.get("total_output_tokens"), "total_output_tokens", name) / done))
    imp.failed = int(obj["failed"]) if isinstance(obj.get("failed"), int) else 0
    for key, value in obj.items():
        m = _STAT.match(key)
        if m and isinstance(value, int | float) and math.isfinite(value):
            stat = {"median": "p50"}.get(m.group(1), m.group(1))
            imp.reported.setdefault(_METRIC[m.group(2)], {})[stat] = float(value) / 1000.0
    if not imp.reported:
        raise RunError(f"{name}: no mean_ttft_ms / mean_tpot_ms / mean_e2el_ms to compare with")
    imp.reported_duration_s = number(obj.get("duration"), "duration", name) if "duration" in obj else None
    imp.assumed["requests"] = (f"aggregates only (no --save-detailed): {done} requests of the mean lengths "
                               f"{mean_in} in / {mean_out} out, sent " + (f"at i / {rate:g} per s" if math.isfinite(rate)
                                                                            else "all at t = 0"))
    for i in range(done):
        send = i / rate if math.isfinite(rate) else 0.0
        imp.add(f"{name}: request {i}", send, send, send, mean_in, mean_out)

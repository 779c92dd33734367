"""inference-perf's per-request lifecycle report (`per_request_lifecycle_metrics.json`).

A list of {"start_time", "end_time", "request", "response", "info", "error"} (seconds on the
client's monotonic clock; error null on success). Tokens: info.input_tokens / info.output_tokens
(older releases) or info.request_metrics.text.input_tokens / info.response_metrics.output_tokens
(newer, where the top-level input_tokens is a deprecated mirror). Times: send = start_time, last
token = end_time, first token = the first streamed content chunk: response_metrics.chunk_times[0]
when present, else the first of output_token_times (one entry per SSE event, as older releases
wrote them). A non-streamed request has no token times: its first token is taken at end_time
(TTFT = E2E, named in `assumed`). A request with an error is a failure.
"""

from __future__ import annotations

from typing import Any

from sim.fidelity.importers.base import Imported, number
from sim.fidelity.run_record import RunError

NAME = "inference-perf"
DESCRIPTION = "inference-perf per_request_lifecycle_metrics.json (start_time, end_time, info)"


def detect(obj: Any) -> bool:
    return (isinstance(obj, list) and bool(obj) and isinstance(obj[0], dict)
            and {"start_time", "end_time", "info"} <= set(obj[0]))


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def parse(obj: list[Any], name: str) -> Imported:
    imp = Imported(NAME)
    for i, r in enumerate(obj):
        where = f"{name}: request {i}"
        if not isinstance(r, dict):
            raise RunError(f"{where}: expected an object")
        if r.get("error") is not None:
            imp.failed += 1
            continue
        info = r.get("info")
        n_in = _get(info, "input_tokens") or _get(info, "request_metrics", "text", "input_tokens")
        n_out = _get(info, "output_tokens") or _get(info, "response_metrics", "output_tokens")
        times = (_get(info, "response_metrics", "chunk_times") or _get(info, "response_metrics", "output_token_times")
                 or _get(info, "output_token_times") or [])
        if not isinstance(times, list):
            raise RunError(f"{where}: token times must be a list")
        send, end = number(r.get("start_time"), "start_time", where), number(r.get("end_time"), "end_time", where)
        if times:
            first = number(times[0], "first token time", where)
        else:
            first = end
            imp.assumed["ttft"] = "some requests were not streamed: their first token is counted at end_time"
        imp.add(where, send, first, end, n_in, n_out)
    return imp

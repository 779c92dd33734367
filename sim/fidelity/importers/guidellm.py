"""guidellm's benchmarks report JSON (`guidellm benchmark --output-path report.json`, guidellm 0.2).

The report is {"benchmarks": [GenerativeBenchmark, ...]}; each benchmark (one rate of a sweep)
has requests.successful / incomplete / errored, lists of GenerativeTextResponseStats with
`prompt_tokens`, `output_tokens` and epoch-second times `start_time` (sent), `first_token_time`,
`last_token_time`, `end_time`. send = start_time, first token = first_token_time, last token =
last_token_time. Incomplete and errored requests are failures. The first benchmark is imported
(a sweep's others are named in `assumed`); the model is the worker's `backend_model`.
"""

from __future__ import annotations

from typing import Any

from sim.fidelity.importers.base import Imported
from sim.fidelity.run_record import RunError

NAME = "guidellm"
DESCRIPTION = "guidellm benchmarks report JSON (benchmarks[].requests.successful)"


def detect(obj: Any) -> bool:
    if not isinstance(obj, dict) or not isinstance(obj.get("benchmarks"), list) or not obj["benchmarks"]:
        return False
    first = obj["benchmarks"][0]
    return isinstance(first, dict) and isinstance(first.get("requests"), dict) and "successful" in first["requests"]


def parse(obj: dict[str, Any], name: str) -> Imported:
    bench = obj["benchmarks"][0]
    worker = bench.get("worker") if isinstance(bench.get("worker"), dict) else {}
    model = worker.get("backend_model")
    imp = Imported(NAME, model=model if isinstance(model, str) and model else None)
    if len(obj["benchmarks"]) > 1:
        imp.assumed["benchmark"] = f"the first of {len(obj['benchmarks'])} benchmarks in the report (a sweep)"
    reqs = bench["requests"]
    ok = reqs.get("successful")
    if not isinstance(ok, list):
        raise RunError(f"{name}: benchmarks[0].requests.successful must be a list")
    for key in ("incomplete", "errored"):
        imp.failed += len(reqs.get(key) or [])
    for i, r in enumerate(ok):
        where = f"{name}: benchmarks[0].requests.successful[{i}]"
        if not isinstance(r, dict):
            raise RunError(f"{where}: expected an object")
        imp.add(where, r.get("start_time"), r.get("first_token_time"), r.get("last_token_time"),
                r.get("prompt_tokens"), r.get("output_tokens"))
    return imp

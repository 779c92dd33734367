"""Benchmark files people already have, read as measured runs (`sim validate FILE`, `sim calibrate --run FILE`).

`load_imported(data, name, overrides)` detects the format by content (IMPORTERS, one file per
format) and returns a MeasuredRun; `docs/VALIDATE.md` maps every field.
"""

from __future__ import annotations

from typing import Any

from sim.fidelity.importers.base import MAX_IMPORT_BYTES, load_json, to_run
from sim.fidelity.run_record import RunError

KNOWN = ("vllm bench serve --save-result JSON, guidellm report JSON, genai-perf profile_export.json, "
         "inference-perf per_request_lifecycle_metrics.json, or a CSV with arrival,input,output,ttft,e2e")


def detect_format(data: bytes, name: str) -> tuple[str, Any]:
    """(format name, parsed content) — or one RunError line listing what is known."""
    from sim.fidelity.importers.registry import IMPORTERS

    if len(data) > MAX_IMPORT_BYTES:
        raise RunError(f"{name}: {len(data)} bytes is too large (limit {MAX_IMPORT_BYTES})")
    stripped = data.lstrip()[:1]
    if stripped in (b"{", b"["):
        obj = load_json(data, name)
        candidates = [f for f in IMPORTERS.values() if f.json]
    else:
        try:
            obj = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise RunError(f"{name}: not UTF-8 text, nor a run directory or .zip") from None
        candidates = [f for f in IMPORTERS.values() if not f.json]
    for fmt in candidates:
        if fmt.detect(obj):
            return fmt.name, obj
    raise RunError(f"{name}: not a benchmark file kvsim reads ({KNOWN})")


def load_imported(data: bytes, name: str, overrides: dict[str, Any] | None = None) -> Any:
    from sim.fidelity.importers.registry import IMPORTERS

    fmt, obj = detect_format(data, name)
    return to_run(IMPORTERS[fmt].parse(obj, name), name, overrides)

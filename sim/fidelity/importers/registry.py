"""Known benchmark-file formats: one file per format, one line here. Detected by content, in order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from models.registry import Registry
from sim.fidelity.importers import genai_perf, guidellm, inference_perf, plain_csv, vllm_bench
from sim.fidelity.importers.base import Imported


@dataclass(frozen=True)
class ImportFormat:
    name: str
    description: str
    detect: Callable[[Any], bool]  # on the parsed JSON, or the text for CSV
    parse: Callable[[Any, str], Imported]
    json: bool = True


IMPORTERS: Registry[ImportFormat] = Registry("benchmark file format", (
    (m.NAME, ImportFormat(m.NAME, m.DESCRIPTION, m.detect, m.parse, m is not plain_csv))
    for m in (vllm_bench, guidellm, genai_perf, inference_perf, plain_csv)
))

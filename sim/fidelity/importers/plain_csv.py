"""A plain CSV of measured requests: arrival, input, output, ttft, e2e (seconds and tokens).

Columns (header names, case-insensitive, a `_s` / `_tokens` suffix allowed): `arrival` (when the
request was sent, seconds on any clock), `input` and `output` (tokens), `ttft` and `e2e`
(seconds from the send). first token = arrival + ttft, last token = arrival + e2e. Other columns
are ignored; a row with an empty ttft or e2e is a failure.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from sim.fidelity.importers.base import Imported
from sim.fidelity.run_record import RunError

NAME = "csv"
DESCRIPTION = "CSV with columns arrival, input, output, ttft, e2e"
COLUMNS = ("arrival", "input", "output", "ttft", "e2e")


def _key(header: str) -> str:
    h = header.strip().lower()
    for suffix in ("_tokens", "_s"):
        h = h.removesuffix(suffix)
    return h


def detect(obj: Any) -> bool:
    if not isinstance(obj, str):
        return False
    head = obj.split("\n", 1)[0]
    return set(COLUMNS) <= {_key(h) for h in head.split(",")}


def parse(text: str, name: str) -> Imported:
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    index = {_key(h): i for i, h in enumerate(header)}
    missing = [c for c in COLUMNS if c not in index]
    if missing:
        raise RunError(f"{name}: missing column(s) {', '.join(missing)} (need {', '.join(COLUMNS)})")
    imp = Imported(NAME)
    for row_no, row in enumerate(reader, 1):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{name}: data row {row_no}"
        if len(row) < len(header):
            raise RunError(f"{where}: {len(row)} cells, the header has {len(header)}")
        cells = {c: row[index[c]].strip() for c in COLUMNS}
        if not cells["ttft"] or not cells["e2e"]:
            imp.failed += 1
            continue
        try:
            arrival, ttft, e2e = float(cells["arrival"]), float(cells["ttft"]), float(cells["e2e"])
            n_in, n_out = float(cells["input"]), float(cells["output"])
        except ValueError:
            bad = next(c for c in COLUMNS if not _is_number(cells[c]))
            raise RunError(f"{where}: {bad} must be a number, got {cells[bad]!r}") from None
        imp.add(where, arrival, arrival + ttft, arrival + e2e, n_in, n_out)
    return imp


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True

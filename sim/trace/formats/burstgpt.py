"""BurstGPT CSV, 6 columns (Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type)
or 8 (adds Session ID, Elapsed time). Columns are looked up by name, never by position.

Failed requests carry 0 response tokens. They are dropped by default (counted in a warning);
with keep_failed=True they stay with output_tokens = 1, because the prompt was still prefilled.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sim.trace.model import TraceError, TraceFormat


def _prepare(df: pd.DataFrame, options: dict[str, Any], source: str) -> tuple[pd.DataFrame, list[str]]:
    warnings: list[str] = []
    for option, column in (("model", "Model"), ("log_type", "Log Type")):
        wanted = options.get(option)
        if wanted is None:
            continue
        if column not in df.columns:
            raise TraceError(f"{source}: option {option}={wanted!r} needs a '{column}' column, which is missing")
        values = df[column].astype(str).str.strip().str.lower()
        keep = values.str.startswith(str(wanted).strip().lower())
        if not keep.any():
            found = ", ".join(sorted(df[column].astype(str).str.strip().unique())[:10])
            raise TraceError(f"{source}: no rows with {column} matching {wanted!r} (found: {found})")
        if not keep.all():
            warnings.append(f"{source}: {option}={wanted!r} kept {int(keep.sum())} of {len(df)} rows")
        df = df[keep]
    failed = df["Response tokens"] == 0
    n_failed = int(failed.sum())
    if n_failed:
        if options.get("keep_failed"):
            df = df.copy()
            df.loc[failed, "Response tokens"] = 1
            warnings.append(f"{source}: kept {n_failed} failed requests (0 response tokens) with output_tokens=1")
        else:
            df = df[~failed]
            warnings.append(f"{source}: dropped {n_failed} failed requests (0 response tokens)")
    return df, warnings


FORMAT = TraceFormat(
    name="burstgpt",
    description="BurstGPT CSV: Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type[,...]",
    kinds=("csv",),
    arrival="Timestamp",
    input="Request tokens",
    output="Response tokens",
    session="Session ID",
    options={"model": None, "log_type": None, "keep_failed": False},
    prepare=_prepare,
)

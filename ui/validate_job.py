"""One Validate-page replay as a job for the server's worker pool (no Streamlit here: it runs in a
worker process). Reads a measured vLLM run (the bundled sample, a .zip or its files), replays it
with its own engine config (sim.fidelity.validate) and returns what the page shows."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.fidelity.run_record import RUN_FILES, RunError, load_run_bytes, load_run_dir, load_run_zip
from ui.pages import ROOT

SAMPLE_RUN = ROOT / "samples" / "vllm_run"
Files = tuple[tuple[str, bytes], ...]


@dataclass
class Shown:
    """What the page shows of one validation (picklable: it comes back from a worker process)."""

    source: str
    engine: str
    cost_model: dict[str, Any]
    table: pd.DataFrame
    series: pd.DataFrame
    measured: pd.DataFrame
    simulated: pd.DataFrame


def files_digest(files: Files | None) -> str:
    """What keys a replay: the files' names and bytes ("" hashed for the bundled sample)."""
    h = hashlib.sha256()
    for name, data in files or ():
        h.update(name.encode())
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


def replay(files: Files | None) -> Shown:
    """Replay a run given as uploaded files (a .zip, or the three files and config.json); None = the sample."""
    from sim.fidelity.validate import validate

    if files is None:
        run = load_run_dir(SAMPLE_RUN)
    elif len(files) == 1 and files[0][0].lower().endswith(".zip"):
        run = load_run_zip(files[0][1], files[0][0])
    else:
        named = {name.rsplit("/", 1)[-1]: data for name, data in files}
        missing = [f for f in RUN_FILES if f not in named]
        if missing:
            raise RunError(f"upload: add {', '.join(missing)} (or one .zip holding the run's files)")
        run = load_run_bytes(named["meta.json"], named["requests.jsonl"], named["timeseries.csv"],
                             named.get("config.json"), source="upload")
    v = validate(run)
    e = run.engine
    engine = (f"{e.device_name}, {e.model}, TP {e.tp}, vLLM {e.vllm_version or '?'}: {e.num_gpu_blocks:,} KV blocks of "
              f"{e.block_size}, max_num_seqs {e.max_num_seqs}, max_num_batched_tokens {e.max_batched_tokens}")
    return Shown(run.source, engine, v.result.summary["cost_model"], v.table, v.series, run.requests,
                 v.result.requests)

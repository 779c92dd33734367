"""One Validate-page replay as a job for the server's worker pool (no Streamlit here: it runs in a
worker process). Reads a measured run (the bundled sample, a .zip or its files — `sim observe`'s
record included — or one benchmark file another tool wrote, sim/fidelity/importers), replays it
with its own engine config (sim.fidelity.validate), optionally fits a calibration profile on it
(sim.fidelity.calibrate), and returns what the page shows."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.fidelity.run_record import RUN_FILES, RunError, load_run_bytes, load_run_dir, load_run_zip
from ui.pages import ROOT

Overrides = tuple[tuple[str, Any], ...]  # engine fields the page's form gives (sim.fidelity.run_record.OVERRIDABLE)

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
    assumed: dict[str, str] | None = None  # what the run's files did not say (imports, observed runs)
    failed: int = 0  # requests the run recorded as failed
    observed: dict[str, Any] | None = None  # meta.json's `observed` (a `sim observe` record)
    profile: dict[str, Any] | None = None  # the calibration profile fitted on the run, when asked
    pool: dict[str, Any] | None = None  # measured vs vLLM-accounted num_gpu_blocks (sim.fidelity.validate)
    coverage: dict[str, Any] | None = None  # measured windows inside the simulated 90% intervals

def files_digest(files: Files | None, overrides: Overrides = (), fit: bool = False) -> str:
    """What keys a replay: the files' names and bytes ("" hashed for the bundled sample), the engine
    overrides and whether a profile is fitted."""
    h = hashlib.sha256(repr((sorted(overrides), fit)).encode() if overrides or fit else b"")
    for name, data in files or ():
        h.update(name.encode())
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


def load(files: Files | None, overrides: Overrides = ()) -> Any:
    """The measured run of uploaded files: a .zip, the run files, or one benchmark file; None = the sample."""
    over = dict(overrides) or None
    if files is None:
        return load_run_dir(SAMPLE_RUN, over)
    if len(files) == 1 and files[0][0].lower().endswith(".zip"):
        return load_run_zip(files[0][1], files[0][0], over)
    if len(files) == 1 and files[0][0].rsplit("/", 1)[-1] not in (*RUN_FILES, "config.json"):
        from sim.fidelity.importers import load_imported

        return load_imported(files[0][1], files[0][0].rsplit("/", 1)[-1], over)
    named = {name.rsplit("/", 1)[-1]: data for name, data in files}
    missing = [f for f in RUN_FILES if f not in named]
    if missing:
        raise RunError(f"upload: add {', '.join(missing)} (or one .zip holding the run's files)")
    return load_run_bytes(named["meta.json"], named["requests.jsonl"], named["timeseries.csv"],
                          named.get("config.json"), source="upload", overrides=over)


def replay(files: Files | None, overrides: Overrides = (), fit: bool = False) -> Shown:
    """Replay a run given as uploaded files (see `load`); with `fit`, also fit a calibration profile."""
    from sim.fidelity.validate import validate

    run = load(files, overrides)
    v = validate(run)
    e = run.engine
    engine = (f"{e.gpu or e.device_name}, {e.model}, TP {e.tp}, vLLM {e.vllm_version or '?'}: {e.num_gpu_blocks:,} KV blocks of "
              f"{e.block_size}, max_num_seqs {e.max_num_seqs}, max_num_batched_tokens {e.max_batched_tokens}")
    profile = None
    if fit:
        from sim.fidelity.calibrate import from_run

        profile = from_run(run)
    observed = run.meta.get("observed") if isinstance(run.meta.get("observed"), dict) else None
    from sim.fidelity.validate import interval_coverage, predicted_pool

    source = "the bundled sample (samples/vllm_run)" if files is None else run.source  # no server path on the page
    return Shown(source, engine, v.result.summary["cost_model"], v.table, v.series, run.requests,
                 v.result.requests, run.meta.get("assumed") or None, run.failed, observed, profile,
                 predicted_pool(run), interval_coverage(run, v.result))

"""A measured vLLM run, read from the run-record format of ../shared/fidelity (docs/CALIBRATION.md).

A run directory holds three files (and optionally the model's config.json):
- meta.json: the engine configuration vLLM resolved (engine_kwargs, kv_cache, hardware);
- requests.jsonl: one request per line with input_toks, output_toks and engine-clock timestamps
  queued_ts, scheduled_ts, first_token_ts, last_token_ts (seconds); a line whose `error` is set
  (a request `sim observe` saw fail) is skipped and counted in `MeasuredRun.failed`;
- timeseries.csv: 1-second gauges t, running, waiting, kv_cache_pct (prompt/gen throughput too).
The model's config.json is looked for beside meta.json, in model/ beside the run, or in ../model/.

Untrusted input: every file is size-bounded, UTF-8, parsed by json / csv (never evaluated); a
problem is one RunError line naming the file, the row and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from models.spec import MAX_CONFIG_BYTES
from sim.fidelity.run_retention import RetentionError, run_retention
from sim.guard.files import read_limited
from sim.trace.model import TraceError

MAX_META_BYTES = 4 << 20
MAX_REQUESTS_BYTES = 64 << 20
MAX_TIMESERIES_BYTES = 16 << 20
MAX_ZIP_BYTES = 96 << 20
RUN_FILES = ("meta.json", "requests.jsonl", "timeseries.csv")
REQUEST_FIELDS = ("input_toks", "output_toks", "queued_ts", "first_token_ts", "last_token_ts")
GAUGE_FIELDS = ("t", "running", "waiting", "kv_cache_pct")


class RunError(TraceError):
    """A measured run cannot be read; the message is one line: file, row, field, problem."""


@dataclass(frozen=True)
class EngineConfig:
    """The engine settings of a measured run that the simulator must copy."""

    model: str  # HF id as the run names it
    device_name: str
    tp: int
    max_num_seqs: int
    max_batched_tokens: int
    max_model_len: int | None
    num_gpu_blocks: int
    block_size: int
    prefix_caching: bool
    weight_dtype: str
    kv_dtype: str
    vllm_version: str
    gpu_mem_util: float = 0.9  # kv_cache.gpu_memory_utilization (vLLM's default when absent)
    gpu: str | None = None  # kvsim GPU catalog name when the run names it (hardware.gpu); else from device_name
    # engine_kwargs.async_scheduling (vLLM's EngineArgs field) when the run records it; None: vLLM's default
    async_scheduling: bool | None = None
    # prefix_cache_retention_interval: recorded, else the run's version's default (sim/fidelity/run_retention.py)
    retention_interval: int | None = 0


@dataclass
class MeasuredRun:
    """One measured run: engine config, per-request latencies (sorted by arrival) and gauges."""

    source: str
    engine: EngineConfig
    requests: pd.DataFrame  # arrival_s, input_tokens, output_tokens, queue_s, ttft_s, tpot_s, e2e_s, finish_s
    timeseries: pd.DataFrame  # t_s, num_running, num_waiting, kv_cache_usage_perc (0..1)
    config_path: Path | None = None  # the model's config.json when the run ships one
    meta: dict[str, Any] = field(default_factory=dict, repr=False)
    failed: int = 0  # requests the run recorded as failed (skipped)

    @property
    def duration_s(self) -> float:
        """Last finish minus first arrival (an aggregates-only import: the duration its file reports)."""
        reported = self.meta.get("reported_duration_s")
        return float(reported) if reported is not None else float(self.requests["finish_s"].max())

    def measured_stats(self, col: str) -> dict[str, float] | None:
        """The file's own statistics of a latency column (seconds) when it kept only aggregates."""
        reported = self.meta.get("reported")
        return reported.get(col) if isinstance(reported, dict) else None

    @property
    def throughput_tok_s(self) -> float:
        """Output tokens over the time from the first arrival to the last finish."""
        return float(self.requests["output_tokens"].sum()) / max(self.duration_s, 1e-9)


# --- entry points -------------------------------------------------------------------------------

def load_run_dir(path: str | Path, overrides: dict[str, Any] | None = None) -> MeasuredRun:
    """Read a run directory (meta.json, requests.jsonl, timeseries.csv; config.json when present).
    `overrides`: engine fields the user gives (OVERRIDABLE), replacing or completing meta.json's."""
    d = Path(path)
    if not d.is_dir():
        raise RunError(f"{d}: not a directory holding {', '.join(RUN_FILES)}")
    limits = (MAX_META_BYTES, MAX_REQUESTS_BYTES, MAX_TIMESERIES_BYTES)
    blobs = [_read(d / name, limit) for name, limit in zip(RUN_FILES, limits, strict=True)]
    config = next((p for p in (d / "config.json", d / "model" / "config.json", d.parent / "model" / "config.json")
                   if p.is_file()), None)
    if config is not None:
        _read(config, MAX_CONFIG_BYTES)  # size check only; models.spec reads it
    return parse_run(*blobs, source=str(d), config_path=config, overrides=overrides)


def load_run_zip(data: bytes, name: str = "run.zip", overrides: dict[str, Any] | None = None) -> MeasuredRun:
    """Read a zipped run (the three files, and config.json, anywhere in the archive)."""
    if len(data) > MAX_ZIP_BYTES:
        raise RunError(f"{name}: {len(data)} bytes is too large (limit {MAX_ZIP_BYTES})")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise RunError(f"{name}: not a zip archive") from None
    wanted = {*RUN_FILES, "config.json"}
    found: dict[str, bytes] = {}
    for info in archive.infolist():
        base = info.filename.rsplit("/", 1)[-1]
        if base in wanted and not info.is_dir() and base not in found:
            if info.file_size > MAX_REQUESTS_BYTES:
                raise RunError(f"{name}: {info.filename} is too large ({info.file_size} bytes)")
            found[base] = archive.read(info)
    missing = [f for f in RUN_FILES if f not in found]
    if missing:
        raise RunError(f"{name}: the archive lacks {', '.join(missing)}")
    return load_run_bytes(found["meta.json"], found["requests.jsonl"], found["timeseries.csv"],
                          found.get("config.json"), source=name, overrides=overrides)


def load_run_bytes(meta: bytes, requests: bytes, timeseries: bytes, config: bytes | None = None, *,
                   source: str = "upload", overrides: dict[str, Any] | None = None) -> MeasuredRun:
    """Read a run from the files' bytes (an upload). A config.json is kept in a temporary file."""
    for label, blob, limit in (("meta.json", meta, MAX_META_BYTES), ("requests.jsonl", requests, MAX_REQUESTS_BYTES),
                               ("timeseries.csv", timeseries, MAX_TIMESERIES_BYTES),
                               ("config.json", config or b"", MAX_CONFIG_BYTES)):
        if len(blob) > limit:
            raise RunError(f"{source}/{label}: {len(blob)} bytes is too large (limit {limit})")
    config_path = None
    if config:
        _text(config, f"{source}/config.json")
        config_path = Path(tempfile.mkdtemp(prefix="kvsim-run-")) / "config.json"
        config_path.write_bytes(config)
    return parse_run(meta, requests, timeseries, source=source, config_path=config_path, overrides=overrides)


# --- parsing ------------------------------------------------------------------------------------

def parse_run(meta: bytes, requests: bytes, timeseries: bytes, *, source: str,
              config_path: Path | None = None, overrides: dict[str, Any] | None = None) -> MeasuredRun:
    meta_obj = _json(meta, f"{source}/meta.json")
    if overrides and isinstance(meta_obj, dict):
        meta_obj = apply_overrides(meta_obj, overrides, source)
        if overrides.get("model") is not None:
            config_path = None  # another model than the one the run shipped
    engine = parse_engine(meta_obj, f"{source}/meta.json")
    reqs = parse_requests(requests, f"{source}/requests.jsonl")
    reqs.attrs.pop("origin", None)
    failed = int(reqs.attrs.pop("failed", 0))
    gauges = parse_timeseries(timeseries, f"{source}/timeseries.csv")
    return MeasuredRun(source, engine, reqs, gauges, config_path, meta_obj, failed)


def parse_engine(meta: Any, where: str) -> EngineConfig:
    """The engine settings from meta.json (engine_kwargs, kv_cache, hardware)."""
    if not isinstance(meta, dict):
        raise RunError(f"{where}: expected a JSON object")
    kw = _section(meta, "engine_kwargs", where)
    kv = _section(meta, "kv_cache", where)
    hw = _section(meta, "hardware", where)
    dtype = str(kw.get("dtype") or "bfloat16").lower()
    weight = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "auto": "bf16"}.get(dtype)
    if weight is None:
        raise RunError(f"{where}: engine_kwargs.dtype {dtype!r} unsupported (bfloat16, float16, float32)")
    kv_raw = str(kw.get("kv_cache_dtype") or "auto").lower()
    kv_dtype = weight if kv_raw == "auto" else _kv_dtype_name(kv_raw)
    if not kv_dtype:
        raise RunError(f"{where}: engine_kwargs.kv_cache_dtype {kv_raw!r} unsupported")
    max_len = kw.get("max_model_len")
    gpu = hw.get("gpu")
    if gpu is not None and not isinstance(gpu, str):
        raise RunError(f"{where}: hardware.gpu must be a GPU catalog name, got {gpu!r}")
    return EngineConfig(
        model=_str(kw.get("model") or meta.get("model"), "engine_kwargs.model", where),
        device_name=_str(hw.get("device_name"), "hardware.device_name", where),
        tp=_int(kw.get("tensor_parallel_size", 1), "engine_kwargs.tensor_parallel_size", where),
        max_num_seqs=_int(kw.get("max_num_seqs"), "engine_kwargs.max_num_seqs", where),
        max_batched_tokens=_int(kw.get("max_num_batched_tokens"), "engine_kwargs.max_num_batched_tokens", where),
        max_model_len=None if max_len is None else _int(max_len, "engine_kwargs.max_model_len", where),
        num_gpu_blocks=_int(kv.get("num_gpu_blocks"), "kv_cache.num_gpu_blocks", where),
        block_size=_int(kv.get("block_size"), "kv_cache.block_size", where),
        prefix_caching=bool(kv.get("enable_prefix_caching", False)),
        weight_dtype=weight, kv_dtype=kv_dtype, vllm_version=str(meta.get("vllm_version", "")), gpu=gpu or None,
        gpu_mem_util=_util(kv.get("gpu_memory_utilization", 0.9), where),
        async_scheduling=_async(kw.get("async_scheduling"), where),
        retention_interval=_retention(kv, kw, str(meta.get("vllm_version", "")), where),
    )


def _retention(kv: dict[str, Any], kw: dict[str, Any], version: str, where: str) -> int | None:
    try:
        return run_retention(kv, kw, version, where)
    except RetentionError as exc:
        raise RunError(str(exc)) from None


def _async(value: Any, where: str) -> bool | None:
    """engine_kwargs.async_scheduling: true, false or absent/null (vLLM's default)."""
    if value is None:
        return None
    from models.strict import flag

    return flag(value, f"{where}: engine_kwargs.async_scheduling", RunError)


def _kv_dtype_name(vllm_name: str) -> str:
    """kvsim's KV dtype for vLLM's kv_cache_dtype name (fp8_e5m2, int8_per_token_head, nvfp4...), or ''."""
    from models.kv_dtypes import get_kv_dtype

    try:
        return get_kv_dtype(vllm_name).name
    except ValueError:
        return ""


def _util(value: Any, where: str) -> float:
    util = _num(value, "kv_cache.gpu_memory_utilization", where)
    if not 0 < util <= 1:
        raise RunError(f"{where}: kv_cache.gpu_memory_utilization {util}: must be in (0, 1]")
    return util


def parse_requests(data: bytes, where: str) -> pd.DataFrame:
    """Per-request measured latencies, sorted by arrival (arrival = queued_ts - first queued_ts)."""
    rows = []
    failed = 0
    for lineno, line in enumerate(_text(data, where).splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RunError(f"{where}: line {lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise RunError(f"{where}: line {lineno}: expected a JSON object")
        if obj.get("error") is not None:
            failed += 1
            continue
        row = [_num(obj.get(k), k, f"{where}: line {lineno}") for k in REQUEST_FIELDS]
        if row[0] < 1 or row[1] < 1 or row[0] != int(row[0]) or row[1] != int(row[1]):
            raise RunError(f"{where}: line {lineno}: input_toks and output_toks must be positive integers")
        if not row[2] <= row[3] <= row[4]:
            raise RunError(f"{where}: line {lineno}: timestamps must satisfy queued_ts <= first_token_ts <= last_token_ts")
        rows.append(row)
    if not rows:
        raise RunError(f"{where}: no completed requests" + (f" ({failed} failed)" if failed else ""))
    a = np.array(rows, dtype=np.float64)
    a = a[np.argsort(a[:, 2], kind="stable")]
    origin = a[0, 2]
    inp, out, queued, first, last = a.T
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (last - first) / np.maximum(out - 1, 1), np.nan)
    df = pd.DataFrame({
        "arrival_s": queued - origin, "input_tokens": inp.astype(np.int64), "output_tokens": out.astype(np.int64),
        "ttft_s": first - queued, "tpot_s": tpot, "e2e_s": last - queued, "finish_s": last - origin,
    })
    df.attrs["origin"] = origin
    df.attrs["failed"] = failed
    return df


def parse_timeseries(data: bytes, where: str) -> pd.DataFrame:
    """The 1-second gauges: t_s, num_running, num_waiting, kv_cache_usage_perc (a fraction)."""
    reader = csv.DictReader(io.StringIO(_text(data, where)))
    missing = [f for f in GAUGE_FIELDS if f not in (reader.fieldnames or [])]
    if missing:
        raise RunError(f"{where}: missing column(s) {', '.join(missing)}")
    rows = [[_num(row.get(k), k, f"{where}: data row {i}") for k in GAUGE_FIELDS] for i, row in enumerate(reader, 1)]
    a = np.array(rows, dtype=np.float64).reshape(-1, len(GAUGE_FIELDS))
    return pd.DataFrame({"t_s": a[:, 0], "num_running": a[:, 1], "num_waiting": a[:, 2],
                         "kv_cache_usage_perc": a[:, 3] / 100.0})


# --- small safe readers ---------------------------------------------------------------------------

def _read(path: Path, limit: int) -> bytes:
    """A run directory's file: regular files only, bounded, never blocking (sim.guard.files)."""
    return read_limited(path, limit, RunError, what="run file")


def _text(data: bytes, where: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RunError(f"{where}: not UTF-8 text") from None
    if "\x00" in text:
        raise RunError(f"{where}: binary data (NUL bytes), not text")
    return text


def _json(data: bytes, where: str) -> Any:
    try:
        return json.loads(_text(data, where))
    except json.JSONDecodeError as exc:
        raise RunError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def _section(meta: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = meta.get(key)
    if not isinstance(value, dict):
        raise RunError(f"{where}: missing object {key!r}")
    return value


def _num(value: Any, key: str, where: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise RunError(f"{where}: {key} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x < 0:
        raise RunError(f"{where}: {key} must be a finite number >= 0, got {value!r}")
    return x


def _int(value: Any, key: str, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RunError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def _str(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 300:
        raise RunError(f"{where}: {key} must be a non-empty string")
    return value


# --- what the user says about a run that its files do not ----------------------------------------

OVERRIDABLE = ("model", "gpu", "tp", "max_num_seqs", "max_batched_tokens", "max_model_len", "num_gpu_blocks",
               "block_size", "prefix_caching", "async_scheduling")


# where each override goes in meta.json
OVERRIDE_KEYS = {"model": ("engine_kwargs", "model"), "gpu": ("hardware", "gpu"),
                 "tp": ("engine_kwargs", "tensor_parallel_size"), "max_num_seqs": ("engine_kwargs", "max_num_seqs"),
                 "max_batched_tokens": ("engine_kwargs", "max_num_batched_tokens"),
                 "max_model_len": ("engine_kwargs", "max_model_len"),
                 "num_gpu_blocks": ("kv_cache", "num_gpu_blocks"), "block_size": ("kv_cache", "block_size"),
                 "prefix_caching": ("kv_cache", "enable_prefix_caching"),
                 "async_scheduling": ("engine_kwargs", "async_scheduling")}


def apply_overrides(meta: dict[str, Any], overrides: dict[str, Any], source: str) -> dict[str, Any]:
    """meta.json with the user's engine fields written in (None values are ignored); a copy."""
    unknown = set(overrides) - set(OVERRIDABLE)
    if unknown:
        raise RunError(f"{source}: cannot override {', '.join(sorted(unknown))}")
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in meta.items()}
    for name, value in overrides.items():
        if value is None:
            continue
        section, key = OVERRIDE_KEYS[name]
        if not isinstance(out.get(section), dict):
            out[section] = {}
        out[section][key] = value
    return out

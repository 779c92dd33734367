"""The run record `sim observe` writes: the format `sim validate` reads, written as it is measured.

Files (docs/CALIBRATION.md, "Run record"):
- meta.json: `engine_kwargs`, `kv_cache`, `hardware` as the old format has them, from what the
  server says (/v1/models: max_model_len; /metrics `vllm:cache_config_info`: num_gpu_blocks,
  block_size, enable_prefix_caching, cache dtype, memory; /version) and what the user supplied
  (--gpu, --tp, --max-num-seqs, --max-batched-tokens, --dtype); anything neither gave is vLLM's
  default, named in `observed.assumed`. `observed` also holds the URL, the counts (sent, completed,
  failed by reason), whether the run was interrupted, and the server's counters over the run.
- requests.jsonl: one line per request when it ends: the old fields (input_toks, output_toks,
  queued_ts = when it was sent, first_token_ts, last_token_ts; seconds from the run's start on
  the client's clock) plus request_id, arrival_s (trace time after speed-up), max_tokens,
  token_ts (one time per generated token: the inter-token latencies), usage_prompt_tokens /
  usage_completion_tokens (what the server billed), and `error` (null, or one line: the request
  failed and `sim validate` skips it, counting it).
- timeseries.csv: one row per /metrics scrape: t (seconds from the start), running, waiting,
  kv_cache_pct (percent), then the counters since the start (prefix_cache_queries,
  prefix_cache_hits, preemptions, prompt_tokens, generation_tokens, requests_finished).
Lines are flushed as they are written, so whatever stops the client leaves what was measured.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.fidelity.prom import COUNTERS, GAUGES

SERIES_COLUMNS = ("t", *GAUGES, *COUNTERS)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass
class EngineGuess:
    """What the user says about the server (None: ask the server, else vLLM's default)."""

    model: str | None = None  # kvsim model (catalog name, HF id, config.json, directory)
    gpu: str | None = None  # kvsim GPU catalog name
    tp: int | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    weight_dtype: str | None = None
    async_scheduling: bool | None = None  # vLLM's --(no-)async-scheduling: the server does not report it


def vllm_defaults(gpu_hbm_bytes: int | None) -> tuple[int, int, str]:
    """vLLM 0.32's OpenAI-server defaults (max_num_seqs, max_num_batched_tokens) by device memory:
    engine/arg_utils.py `_get_default_max_num_seqs_and_batched_tokens` (CPU: 128, 2048; GPU of
    >= 160 GiB: 1024, 16384; >= 70 GiB: 1024, 8192; else 256, 2048; A100 80 GB counted as < 70)."""
    if gpu_hbm_bytes is None:
        return 128, 2048, "vLLM 0.32 default for the OpenAI server on CPU"
    gib = gpu_hbm_bytes / (1 << 30)
    if gib >= 160:
        return 1024, 16384, "vLLM 0.32 default for the OpenAI server on a >= 160 GiB GPU"
    if gib >= 70:
        return 1024, 8192, "vLLM 0.32 default for the OpenAI server on a >= 70 GiB GPU"
    return 256, 2048, "vLLM 0.32 default for the OpenAI server on a < 70 GiB GPU"


def engine_meta(guess: EngineGuess, served_model: str, max_model_len: int | None, cache: dict[str, Any],
                version: str) -> dict[str, Any]:
    """meta.json's engine sections and `assumed` (field -> why), from the server and the user."""
    from models.gpus import get_gpu

    assumed: dict[str, str] = {}
    gpu = get_gpu(guess.gpu) if guess.gpu else None
    seqs, batched, why = vllm_defaults(gpu.hbm_bytes if gpu else None)
    if guess.max_num_seqs is None:
        assumed["max_num_seqs"] = f"{seqs}: {why} (--max-num-seqs to set)"
    if guess.max_batched_tokens is None:
        assumed["max_num_batched_tokens"] = f"{batched}: {why} (--max-batched-tokens to set)"
    if guess.tp is None:
        assumed["tensor_parallel_size"] = "1 (--tp to set)"
    if guess.weight_dtype is None:
        assumed["dtype"] = "bfloat16 (--weight-dtype to set)"
    if guess.async_scheduling is None:
        assumed["async_scheduling"] = "vLLM's default, on for a GPU (--no-async-scheduling to set)"
    if gpu is None:
        assumed["gpu"] = "none: the server's device is not reported; give --gpu here or to sim validate"
    kv_cache = {k: cache[k] for k in ("num_gpu_blocks", "block_size", "enable_prefix_caching",
                                      "gpu_memory_utilization", "kv_cache_memory_bytes", "num_cpu_blocks")
                if cache.get(k) is not None}
    if "prefix_cache_retention_interval" in cache:  # None is a setting here (every block), not a gap
        kv_cache["prefix_cache_retention_interval"] = cache["prefix_cache_retention_interval"]
    if not cache:
        assumed["kv_cache"] = "the server has no vllm:cache_config_info in /metrics (not vLLM, or metrics off)"
    cache_dtype = str(cache.get("cache_dtype") or "auto")
    return {
        "schema_version": 2, "model": served_model, "vllm_version": version,
        "engine_kwargs": {
            "model": guess.model or served_model, "served_model_name": served_model,
            "tensor_parallel_size": guess.tp or 1, "max_num_seqs": guess.max_num_seqs or seqs,
            "max_num_batched_tokens": guess.max_batched_tokens or batched, "max_model_len": max_model_len,
            "dtype": DTYPES.get(guess.weight_dtype or "bf16", "bfloat16"), "kv_cache_dtype": cache_dtype,
            **({} if guess.async_scheduling is None else {"async_scheduling": guess.async_scheduling}),
        },
        "kv_cache": kv_cache,
        "hardware": {"device_name": gpu.name if gpu else "unknown", "gpu": gpu.name if gpu else None},
        "assumed": assumed,
    }


@dataclass
class RecordWriter:
    """Appends requests and gauges to a run directory as they come, and rewrites meta.json."""

    out: Path
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self._requests = (self.out / "requests.jsonl").open("w", encoding="utf-8")
        self._series_file = (self.out / "timeseries.csv").open("w", encoding="utf-8", newline="")
        self._series = csv.writer(self._series_file)
        self._series.writerow(SERIES_COLUMNS)
        self._series_file.flush()
        self._start: dict[str, float] = {}

    def request(self, row: dict[str, Any]) -> None:
        self._requests.write(json.dumps(row, separators=(",", ":")) + "\n")
        self._requests.flush()

    def gauges(self, t: float, sample: dict[str, float]) -> None:
        """One scrape; counters written as their increase since the first scrape. A page without
        the gauges (not a vLLM server) writes no row."""
        if any(math.isnan(sample[g]) for g in GAUGES):
            return
        if not self._start:
            self._start = {k: sample[k] for k in COUNTERS}
        row: list[str | float] = [round(t, 3)]
        for col in (*GAUGES, *COUNTERS):
            v = sample[col] - self._start.get(col, 0.0) if col in COUNTERS else sample[col]
            row.append("" if math.isnan(v) else round(v, 4))
        self._series.writerow(row)
        self._series_file.flush()

    def write_meta(self) -> None:
        tmp = self.out / "meta.json.tmp"
        tmp.write_text(json.dumps(self.meta, indent=1, default=str), encoding="utf-8")
        tmp.replace(self.out / "meta.json")

    def close(self) -> None:
        self._requests.close()
        self._series_file.close()
        self.write_meta()

"""Validate vLLM's KV pool (sim/memory/vllm_profile.py) against public vLLM start-up logs.

Each row of tests/data/vllm_startup_logs.jsonl is one real vLLM V1 start-up, copied from a public
thread or file (its `url` and the exact `lines` it came from), with the engine configuration it
ran and what vLLM printed: "Available KV cache memory: X GiB" always, "GPU KV cache size: N
tokens" and the memory breakdown (weights, peak activation, non-torch, CUDA graphs) where printed.

vLLM sizes the pool as available // bytes per block (v1/core/kv_cache_utils.py), so the measured
num_gpu_blocks is available // block, from the 2-decimal GiB figure (+-0.005 GiB, under 0.1% of
any pool here); where the token line is printed and the model has one KV group, tokens //
block_size is used instead and must agree. Rows where vLLM found no room for a pool (available
<= 0: it refused to start) are compared on available memory only.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.cuda_memory import GiB
from models.gpus import get_gpu
from models.spec import load_spec
from sim.memory.vllm_first_start import check_state, compile_cache_from_log
from sim.memory.vllm_pipeline import pipeline_stages
from sim.memory.vllm_pool import pool_layout
from sim.memory.vllm_profile import VllmMemoryProfile, cudagraph_bytes, vllm_memory_profile

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "vllm_startup_logs.jsonl"
REQUIRED = ("id", "url", "lines", "vllm_version", "model", "gpu", "tp", "weight_dtype", "kv_dtype", "gpu_mem_util",
            "max_num_batched_tokens", "max_num_seqs", "block_size", "enforce_eager", "measured")


# Where each release logs "EngineCore failed to start" (v1/engine/core.py run_engine_core), as public logs
# headed by the release's own banner show it: a traceback pins a release that gpu_worker.py's line cannot.
FAILED_START_LINES = {"0.10.1": "[core.py:700] EngineCore failed to start",  # vllm#23278 (API server 0.10.1)
                      "0.10.2": "[core.py:718] EngineCore failed to start",  # logs headed 'V1 LLM engine (v0.10.2)'
                      "0.11.0": "[core.py:708] EngineCore failed to start"}  # logs headed 'V1 LLM engine (v0.11.0)'


def release_from_traceback(lines: tuple[str, ...] | list[str]) -> str | None:
    """The vLLM release whose core.py logs the start-up failure at that line; None if no line tells."""
    found = {v for v, marker in FAILED_START_LINES.items() for line in lines if marker in line}
    return found.pop() if len(found) == 1 else None


# vLLM 0.32's lines that say whether async scheduling runs: the user's flag in the API server's
# "non-default args: {...}" (entrypoints/serve/utils/api_utils.py line 286, a dict repr), and the
# warnings VllmConfig.__post_init__ logs when it turns the default off (config/vllm.py lines
# 1606-1640, all "Async scheduling ... disabled"). A default start that keeps it on logs neither.
ASYNC_ARG = re.compile(r"non-default args: .*'async_scheduling': (True|False)")
ASYNC_OFF = re.compile(r"Async scheduling .*disabled")


def async_scheduling_from_log(lines: tuple[str, ...] | list[str]) -> bool | None:
    """True/False where the start-up log says (the flag, or a warning that it was turned off);
    None where it does not (vLLM's default, on for a GPU, logs nothing)."""
    said = [m.group(1) for line in lines if (m := ASYNC_ARG.search(line))]
    if "False" in said or any(ASYNC_OFF.search(line) for line in lines):
        return False
    return True if said else None


FLASHINFER_SAMPLER_LINE = "Using FlashInfer for top-p & top-k sampling"  # v1/sample/ops/topk_topp_sampler.py
# a multimodal checkpoint served text-only: --language-model-only, or every modality's limit 0 (as the
# command line or vLLM's "non-default args" line prints it)
TEXT_ONLY_FLAG = re.compile(r"--language-model-only|'language_model_only': True")
MM_LIMITS = re.compile(r"limit[-_]mm[-_]per[-_]prompt['\"]?\s*[:=]?\s*'?(\{[^}]*\})")


def language_model_only_from_log(lines: tuple[str, ...] | list[str]) -> bool:
    """True where the lines show the image encoder left unloaded (models/vision.py)."""
    for line in lines:
        if TEXT_ONLY_FLAG.search(line):
            return True
        for limits in MM_LIMITS.findall(line):
            counts = re.findall(r":\s*(\d+)", limits)
            if counts and all(int(c) == 0 for c in counts):
                return True
    return False


class StartupLogError(ValueError):
    """A row of the start-up log file is malformed (one line naming the row and field)."""


@dataclass(frozen=True)
class StartupLog:
    """One public vLLM start-up: its configuration and the figures vLLM printed (GiB, 2 decimals)."""

    id: str
    url: str
    lines: tuple[str, ...]
    vllm_version: str
    model: str
    gpu: str
    tp: int
    weight_dtype: str
    kv_dtype: str
    gpu_mem_util: float
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    enforce_eager: bool
    measured: dict[str, float]
    max_model_len: int | None = None
    notes: str = ""
    excluded: str = ""  # why the row is shown but left out of the error statistics ("" = counted)
    # found after the model was last changed: when, and kvsim's num_gpu_blocks then (recorded before any change)
    held_out: dict[str, Any] = field(default_factory=dict)
    # the compile-cache state where the source says it in prose and the lines do not show it ("" = not said)
    compile_cache_stated: str = ""
    pp: int = 1  # pipeline-parallel stages; the measured terms are then the stage that sets the pool's

    @property
    def async_scheduling(self) -> bool | None:
        """vLLM's async scheduling where the lines say it (async_scheduling_from_log), else None."""
        return async_scheduling_from_log(self.lines)

    @property
    def flashinfer_sampler(self) -> bool:
        """The start-up sampled with FlashInfer: vLLM logs it (topk_topp_sampler.py) when it does."""
        return any(FLASHINFER_SAMPLER_LINE in line for line in self.lines)

    @property
    def language_model_only(self) -> bool:
        return language_model_only_from_log(self.lines)

    @property
    def compile_cache(self) -> str:
        """cold / warm from vLLM's compile lines in `lines`, else what the source states, else unknown."""
        from_log = compile_cache_from_log(self.lines)
        return from_log if from_log != "unknown" else check_state(self.compile_cache_stated or "unknown")


@dataclass(frozen=True)
class PoolCheck:
    """One row predicted: measured and predicted pool, and each logged term beside kvsim's."""

    log: StartupLog
    profile: VllmMemoryProfile
    measured_blocks: int | None  # None: vLLM found no room for a pool
    terms: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (logged GiB, kvsim GiB)

    @property
    def predicted_blocks(self) -> int:
        return self.profile.num_gpu_blocks

    @property
    def in_range(self) -> bool | None:
        """The measured pool inside [low, num_gpu_blocks] (a point when warm or eager); None without a pool."""
        if not self.measured_blocks:
            return None
        low, high = self.profile.num_gpu_blocks_range
        return low <= self.measured_blocks <= high

    @property
    def error(self) -> float | None:
        """predicted / measured - 1 on num_gpu_blocks; None where vLLM had no pool."""
        if not self.measured_blocks:
            return None
        return self.predicted_blocks / self.measured_blocks - 1.0

    @property
    def measured_available_gib(self) -> float:
        """vLLM's logged available KV memory; from the pool where only num_gpu_blocks was printed."""
        m = self.log.measured
        if "available_kv_gib" in m:
            return m["available_kv_gib"]
        return m["num_gpu_blocks"] * self.profile.bytes_per_block / GiB

    @property
    def available_error_gib(self) -> float:
        return self.profile.available_kv_bytes / GiB - self.measured_available_gib


def load_logs(path: Path = DATA) -> list[StartupLog]:
    rows: list[StartupLog] = []
    for n, text in enumerate(path.read_text().splitlines(), 1):
        if not text.strip():
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StartupLogError(f"{path.name} line {n}: not JSON ({exc.msg})") from None
        missing = [k for k in REQUIRED if k not in raw]
        if missing:
            raise StartupLogError(f"{path.name} line {n} ({raw.get('id', '?')}): missing {', '.join(missing)}")
        if not {"available_kv_gib", "num_gpu_blocks"} & set(raw["measured"]):
            raise StartupLogError(f"{path.name} line {n} ({raw['id']}): measured needs available_kv_gib or num_gpu_blocks")
        raw["lines"] = tuple(raw["lines"])
        rows.append(StartupLog(**raw))
    return rows


def _measured_blocks(log: StartupLog, bytes_per_block: int, single_group: bool) -> int | None:
    if "num_gpu_blocks" in log.measured:
        return int(log.measured["num_gpu_blocks"])
    avail = log.measured["available_kv_gib"]
    if avail <= 0:
        return None
    tokens = log.measured.get("kv_cache_tokens")
    if tokens and single_group:
        return int(tokens) // log.block_size
    return int(avail * GiB // bytes_per_block)


def check(log: StartupLog) -> PoolCheck:
    spec, gpu = load_spec(log.model), get_gpu(log.gpu)
    spec = spec.language_model_only() if log.language_model_only else spec
    prof = vllm_memory_profile(
        spec, gpu, tp=log.tp, pp=log.pp, weight_dtype=log.weight_dtype, kv_dtype=log.kv_dtype,
        gpu_mem_util=log.gpu_mem_util, max_batched_tokens=log.max_num_batched_tokens, max_num_seqs=log.max_num_seqs,
        block_size=log.block_size, enforce_eager=log.enforce_eager, vllm_version=log.vllm_version,
        compile_cache=log.compile_cache, flashinfer_sampler=log.flashinfer_sampler)
    layout = pool_layout(spec, log.kv_dtype, log.tp, log.block_size)  # its groups are every stage's too
    if log.pp > 1:  # the terms below are the stage that sets the pool's
        spec = pipeline_stages(spec.num_layers, log.pp)[prof.pp_rank].spec(spec)
    m = log.measured
    terms = {}
    if "weights_gib" in m:
        terms["weights"] = (m["weights_gib"], prof.weights_bytes / GiB)
    if "peak_activation_gib" in m:
        terms["activation"] = (m["peak_activation_gib"], (prof.transient_peak_bytes + prof.sampler_buffer_bytes) / GiB)
    if "non_torch_gib" in m:
        terms["non_torch"] = (m["non_torch_gib"], prof.non_torch_bytes / GiB)
    if "cudagraph_estimate_gib" in m:  # vLLM's "Estimated CUDA graph memory", whether subtracted or not
        wdtype = spec.weight_dtypes(log.weight_dtype, None)[0]
        terms["cudagraph_estimate"] = (m["cudagraph_estimate_gib"],
                                       cudagraph_bytes(spec, gpu, log.tp, log.max_num_seqs, wdtype,
                                                       log.max_num_batched_tokens) / GiB)
    if "cuda_total_gib" in m:
        terms["cuda_total"] = (m["cuda_total_gib"], prof.cuda_total_bytes / GiB)
    return PoolCheck(log, prof, _measured_blocks(log, prof.bytes_per_block, len(layout.groups) == 1), terms)


def summary(checks: list[PoolCheck], held_out: bool | None = None) -> dict[str, Any]:
    """Median and worst |error| on num_gpu_blocks over the counted rows with a pool, and on available
    GiB over all counted rows (rows with `excluded` set are shown, not counted); `held_out` True/False
    restricts to the rows found after / before the model's last change."""
    if held_out is not None:
        checks = [c for c in checks if bool(c.log.held_out) == held_out]
    counted = [c for c in checks if not c.log.excluded]
    errs = [abs(c.error) for c in counted if c.error is not None]
    gib = [abs(c.available_error_gib) for c in counted]
    ranged = [c for c in counted if c.in_range is not None]
    return {"rows": len(checks), "excluded": len(checks) - len(counted), "rows_with_pool": len(errs),
            "median_abs_error": statistics.median(errs) if errs else None, "worst_abs_error": max(errs, default=None),
            "median_abs_available_gib": statistics.median(gib) if gib else None,
            "worst_abs_available_gib": max(gib, default=None),
            "in_range": sum(bool(c.in_range) for c in ranged), "ranged_rows": len(ranged),
            "compile_cache": {s: sum(c.profile.compile_cache == s for c in ranged) for s in ("cold", "warm", "unknown", "eager")}}


def _summary_line(label: str, s: dict[str, Any]) -> str:
    if not s["rows_with_pool"]:
        return f"{label}: no rows"
    return (f"{label}: {s['rows']} logs ({s['excluded']} not counted), {s['rows_with_pool']} counted with a pool: "
            f"median |error| {s['median_abs_error']:.2%}, worst {s['worst_abs_error']:.2%}; available memory median "
            f"|error| {s['median_abs_available_gib']:.2f} GiB, worst {s['worst_abs_available_gib']:.2f} GiB; "
            f"measured inside kvsim's range on {s['in_range']} of {s['ranged_rows']} (compile cache {s['compile_cache']})")


def table(checks: list[PoolCheck]) -> str:
    head = (f"{'row':36} {'vLLM':7} {'GPU':10} {'TP':>4} {'measured':>9} {'kvsim':>9} {'error':>8} "
            f"{'avail GiB':>9} {'kvsim':>7} {'cache':>7} {'range':>15}  terms logged/kvsim GiB")
    out = [head, "-" * len(head)]
    for c in checks:
        err = f"{c.error:+.1%}" if c.error is not None else "no pool"
        err += "*" if c.log.excluded else ""
        err += "h" if c.log.held_out else ""
        meas = f"{c.measured_blocks:,}" if c.measured_blocks else "-"
        terms = " ".join(f"{k} {a:.2f}/{b:.2f}" for k, (a, b) in c.terms.items())
        low, high = c.profile.num_gpu_blocks_range
        span = (f"{low:,}-{high:,}" if high else "-") + ("" if c.in_range in (None, True) else "!")
        par = f"{c.log.tp}" + (f"x{c.log.pp}" if c.log.pp > 1 else "")  # TP, x PP stages where there are
        out.append(f"{c.log.id:36} {c.log.vllm_version:7} {c.log.gpu:10} {par:>4} {meas:>9} "
                   f"{c.predicted_blocks:>9,} {err:>8} {c.measured_available_gib:>9.2f} "
                   f"{c.profile.available_kv_bytes / GiB:>7.2f} {c.profile.compile_cache:>7} {span:>15}  {terms}")
    out.extend(f"* {c.log.id}: not counted, {c.log.excluded}" for c in checks if c.log.excluded)
    out.extend(f"h {c.log.id}: held out (found {c.log.held_out.get('found')}), kvsim said "
               f"{c.log.held_out.get('kvsim_blocks_before'):,} blocks before the change" for c in checks if c.log.held_out)
    out.append("cache: the compile cache from the log's compile lines, else the source's words; range: kvsim's "
               "num_gpu_blocks_range (sim/memory/vllm_first_start.py); ! = the measured pool outside it")
    out.append(_summary_line("all", summary(checks)))
    out.append(_summary_line("held out", summary(checks, held_out=True)))
    return "\n".join(out)

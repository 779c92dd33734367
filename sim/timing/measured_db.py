"""Step times from measured kernels: aiconfigurator-core's performance database (NVIDIA, Apache-2.0).

The database holds measured GEMM, attention and all-reduce times per GPU and serving backend.
kvsim queries it ONCE per deployment (model, GPU, TP, weight/KV dtype, backend version) into a
compact table (`MeasuredTable`), caches that table on disk keyed by the package version, and
interpolates it in the hot loop (scalar and vectorised paths do the same float operations, so
they agree to the last bit).

Per step (the same decomposition as the package's own mixed-step estimate):
    GPU = non-attention ops at the step's tokens (context ops when the step has prefill, the
          generation ops of D sequences when it is pure decode; norms, GEMMs, all-reduces)
        + prefill attention: Np x A_ctx(P / Np tokens, Kp / Np prefix)
        + decode attention:  A_gen(D sequences, mean context Kd / D)
        + logits of the S sampled sequences
kvsim adds its own CPU terms (the database has none: docs/CALIBRATION.md).

Limits respected (../shared/notes/aiconfigurator.md): decode attention tables cover at most 8 KV
heads per GPU, so beyond that the decode attention term is the roofline's; TP all-reduce over
PCIe is measured only on the RTX PRO 6000, so other PCIe GPUs use the roofline's all-reduce;
no coverage (GPU, dtype, package missing) means the whole step falls back to the roofline, with
the reason in `cost_model.detail`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import tempfile
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

# kvsim GPU -> aiconfigurator system with vLLM kernel tables (notes: coverage table).
SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "a100-80gb": "a100_sxm", "l40s": "l40s",
           "rtx-pro-6000": "rtx_pro_6000_server"}
PCIE_ALLREDUCE_MEASURED = {"rtx-pro-6000"}
MAX_MEASURED_KV_HEADS = 8
BACKEND = "vllm"
KV_QUANT = {"bf16": None, "fp16": None, "fp8": "fp8"}
WEIGHT_DTYPES = ("bf16", "fp16")
# Table grids. Tokens: every step size up to 16k; sequences: vLLM's batch sizes; contexts: 16-128k.
TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
          6144, 8192, 12288, 16384)
SEQS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024)
CONTEXTS = (16, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 65536,
            131072)
PREFIXES = (0, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
CACHE_VERSION = 1


class NotCovered(Exception):
    """The database cannot time this deployment; the message says why (one line)."""


@dataclass(frozen=True)
class MeasuredTable:
    """Measured step pieces of one deployment, in seconds, on fixed grids (module docstring)."""

    ctx_other: np.ndarray  # [TOKENS] non-attention context ops at T tokens (all-reduce apart)
    gen_other: np.ndarray  # [SEQS] non-attention generation ops of D sequences (all-reduce apart)
    ctx_comm: np.ndarray  # [TOKENS] the TP all-reduces of a step of T tokens (0 at TP 1)
    gen_comm: np.ndarray  # [SEQS] the same in a pure-decode step
    logits: np.ndarray  # [SEQS] the lm_head GEMM for S sampled sequences
    ctx_attn: np.ndarray  # [TOKENS, PREFIXES] attention of one prefill chunk of q tokens after p cached
    gen_attn: np.ndarray | None  # [SEQS, CONTEXTS] decode attention; None = the roofline's (outside range)
    roofline: Any = None  # CostModel pieces used where the table stops (decode attention, PCIe all-reduce)
    roofline_allreduce: bool = False

    def decode_parts(self, d: float) -> tuple[float, np.ndarray | None]:
        """A pure-decode step of d sequences: (GPU seconds apart from decode attention, the decode
        attention row over CONTEXTS interpolated at d, or None when the roofline times it)."""
        comm = self.roofline.allreduce(d) if self.roofline_allreduce else _interp1(SEQS, self.gen_comm, d)
        base = _interp1(SEQS, self.gen_other, d) + _interp1(SEQS, self.logits, d) + comm
        if self.gen_attn is None:
            return base, None
        i, w = _bracket(SEQS, d)
        row = self.gen_attn[i] + w * (self.gen_attn[i + 1] - self.gen_attn[i])
        return base, row

    def step_seconds(self, d: Any, kd: Any, p: Any, kp: Any, pp: Any, np_: Any,
                     maximum: Callable[[Any, Any], Any]) -> Any:
        """GPU seconds of a step shape; d and the prefill arguments are scalars, kd may be an array."""
        t = d + p
        if p > 0:
            other = _interp1(TOKENS, self.ctx_other, t)
            comm = _interp1(TOKENS, self.ctx_comm, t)
            attn = np_ * _interp2(TOKENS, PREFIXES, self.ctx_attn, p / np_, kp / np_)
        else:
            other = _interp1(SEQS, self.gen_other, d)
            comm = _interp1(SEQS, self.gen_comm, d)
            attn = 0.0
        if d > 0:
            if self.gen_attn is not None:
                attn = attn + _interp2(SEQS, CONTEXTS, self.gen_attn, d, kd / d)
            else:
                attn = attn + self.roofline.decode_attention(d, kd, maximum)
        s = d + np_
        logits = _interp1(SEQS, self.logits, s) if s > 0 else 0.0
        if self.roofline_allreduce:
            comm = self.roofline.allreduce(t)
        return other + attn + logits + comm


# --- interpolation: identical float operations on scalars and arrays -------------------------------

def _bracket(grid: tuple[int, ...], x: Any) -> tuple[Any, Any]:
    """(index i, weight w) with x between grid[i] and grid[i+1]; clamped at the ends (linear extrapolation
    above the last point)."""
    if isinstance(x, np.ndarray):
        idx = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, len(grid) - 2)
        g = np.asarray(grid, dtype=np.float64)
        return idx, (x - g[idx]) / (g[idx + 1] - g[idx])
    i = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def interp_row(grid: tuple[int, ...], row: np.ndarray, x: Any) -> Any:
    """Linear interpolation of a row over grid at x (clamped below the first point)."""
    if isinstance(x, np.ndarray):
        x = np.maximum(x, grid[0])
    elif x < grid[0]:
        x = float(grid[0])
    return _interp1(grid, row, x)


def _interp1(grid: tuple[int, ...], values: np.ndarray, x: Any) -> Any:
    i, w = _bracket(grid, x)
    if isinstance(i, np.ndarray):
        return values[i] + w * (values[i + 1] - values[i])
    a, b = float(values[i]), float(values[i + 1])
    return a + w * (b - a)


def _interp2(gx: tuple[int, ...], gy: tuple[int, ...], values: np.ndarray, x: Any, y: Any) -> Any:
    i, wx = _bracket(gx, x)
    j, wy = _bracket(gy, max(y, gy[0]) if not isinstance(y, np.ndarray) else np.maximum(y, gy[0]))
    if isinstance(j, np.ndarray) or isinstance(i, np.ndarray):
        v00, v01, v10, v11 = values[i, j], values[i, j + 1], values[i + 1, j], values[i + 1, j + 1]
    else:
        v00, v01 = float(values[i, j]), float(values[i, j + 1])
        v10, v11 = float(values[i + 1, j]), float(values[i + 1, j + 1])
    lo = v00 + wy * (v01 - v00)
    hi = v10 + wy * (v11 - v10)
    return lo + wx * (hi - lo)


# --- building the table ------------------------------------------------------------------------------

def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("aiconfigurator-core")
    except Exception as exc:  # noqa: BLE001 - any failure means "not installed"
        raise NotCovered(f"aiconfigurator-core is not installed ({type(exc).__name__})") from None


def coverage(gpu_name: str, tp: int, weight_dtype: str, kv_dtype: str) -> str:
    """The aiconfigurator system for this deployment, or NotCovered with the reason."""
    system = SYSTEMS.get(gpu_name)
    if system is None:
        raise NotCovered(f"no measured vLLM kernels for GPU {gpu_name} (measured: {', '.join(SYSTEMS)})")
    if weight_dtype not in WEIGHT_DTYPES:
        raise NotCovered(f"weights {weight_dtype}: measured tables used for bf16/fp16 only")
    if kv_dtype not in KV_QUANT:
        raise NotCovered(f"KV {kv_dtype}: no measured attention kernels")
    if tp not in (1, 2, 4, 8):
        raise NotCovered(f"TP {tp}: measured all-reduce covers 1, 2, 4, 8 GPUs")
    return system


def cache_dir() -> Path:
    base = os.environ.get("KVSIM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kvsim")
    return Path(base) / "measured_db"


def table_key(config: dict[str, Any], system: str, tp: int, weight_dtype: str, kv_dtype: str) -> str:
    text = json.dumps({"v": CACHE_VERSION, "pkg": package_version(), "system": system, "backend": BACKEND,
                       "tp": tp, "w": weight_dtype, "kv": kv_dtype, "config": config}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


ARRAYS = ("ctx_other", "gen_other", "ctx_comm", "gen_comm", "logits", "ctx_attn", "gen_attn")


@lru_cache(maxsize=32)
def _cached_arrays(key: str, config_json: str, system: str, tp: int, kv_dtype: str) -> dict[str, np.ndarray]:
    path = cache_dir() / f"{key}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return {name: z[name] for name in ARRAYS}
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache file is rebuilt
    try:
        arrays = query_tables(json.loads(config_json), system, tp, kv_dtype)
    except NotCovered:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. PerfDataNotAvailableError: a shape the tables lack
        raise NotCovered(f"aiconfigurator-core lacks data for this model: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200] if str(exc) else ''}") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home still works, just without the disk cache
    return arrays


_NOT_COVERED: dict[str, str] = {}  # key -> reason: an uncovered model is not compiled again in this process


def load_arrays(config: dict[str, Any], system: str, tp: int, weight_dtype: str, kv_dtype: str) -> dict[str, np.ndarray]:
    key = table_key(config, system, tp, weight_dtype, kv_dtype)
    if key in _NOT_COVERED:
        raise NotCovered(_NOT_COVERED[key])
    try:
        return _cached_arrays(key, json.dumps(config, sort_keys=True, default=str), system, tp, kv_dtype)
    except NotCovered as exc:
        _NOT_COVERED[key] = str(exc)
        raise


def query_tables(config: dict[str, Any], system: str, tp: int, kv_dtype: str) -> dict[str, np.ndarray]:
    """Ask the database once for every grid point of this deployment (about 0.1 s after a ~2 s compile)."""
    handle = _compile(config, system, tp, kv_dtype)
    ctx_ops, gen_ops = handle.run_static_per_op(batch_size=1, isl=128, osl=2)
    ctx_names, gen_names = [op[0] for op in ctx_ops], [op[0] for op in gen_ops]
    try:
        c_att, g_att = ctx_names.index("context_attention"), gen_names.index("generation_attention")
        c_log, g_log = ctx_names.index("context_logits_gemm"), gen_names.index("generation_logits_gemm")
    except ValueError as exc:
        raise NotCovered(f"unexpected op list from aiconfigurator-core ({exc})") from None
    c_comm = [i for i, n in enumerate(ctx_names) if n.endswith(("_ar", "_ar_1", "_ar_2", "_p2p"))]
    g_comm = [i for i, n in enumerate(gen_names) if n.endswith(("_ar", "_ar_1", "_ar_2", "_p2p"))]
    c_other = [i for i in range(len(ctx_names)) if i not in (c_att, c_log, *c_comm)]
    g_other = [i for i in range(len(gen_names)) if i not in (g_att, g_log, *g_comm)]

    def total(ops: list[Any]) -> float:
        return sum(float(op[1]) for op in ops) * 1e-3  # ms -> s

    ctx_other = np.array([total(handle.evaluate_context_ops(c_other, batch_size=1, s=t)) for t in TOKENS])
    gen_other = np.array([total(handle.evaluate_generation_ops(g_other, batch_size=b, s=1024)) for b in SEQS])
    ctx_comm = np.array([total(handle.evaluate_context_ops(c_comm, batch_size=1, s=t)) if c_comm else 0.0
                         for t in TOKENS])
    gen_comm = np.array([total(handle.evaluate_generation_ops(g_comm, batch_size=b, s=1024)) if g_comm else 0.0
                         for b in SEQS])
    logits = np.array([total(handle.evaluate_generation_ops([g_log], batch_size=b, s=1024)) for b in SEQS])
    ctx_attn = np.array([[total(handle.evaluate_context_ops([c_att], batch_size=1, s=q, prefix=p)) for p in PREFIXES]
                         for q in TOKENS])
    gen_attn = np.array([[total(handle.evaluate_generation_ops([g_att], batch_size=b, s=c)) for c in CONTEXTS]
                         for b in SEQS])
    return {"ctx_other": ctx_other, "gen_other": gen_other, "ctx_comm": ctx_comm, "gen_comm": gen_comm,
            "logits": logits, "ctx_attn": ctx_attn, "gen_attn": gen_attn}


def _compile(config: dict[str, Any], system: str, tp: int, kv_dtype: str) -> Any:
    try:
        from aiconfigurator_core.sdk.engine import EngineHandle
    except ImportError as exc:
        raise NotCovered(f"aiconfigurator-core cannot be imported ({exc})") from None
    with tempfile.TemporaryDirectory(prefix="kvsim-aic-") as d:
        Path(d, "config.json").write_text(json.dumps(config), encoding="utf-8")
        kwargs: dict[str, Any] = {"tp_size": tp}
        if KV_QUANT[kv_dtype]:
            kwargs["kvcache_quant_mode"] = KV_QUANT[kv_dtype]
        quiet = logging.getLogger("aiconfigurator_core")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                return EngineHandle.compile(d, system, BACKEND, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the package raises many kinds; all mean "not covered"
            raise NotCovered(f"aiconfigurator-core cannot compile this model for {system}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}") from None
        finally:
            quiet.setLevel(level)


def measured_table(spec: Any, gpu_name: str, tp: int, weight_dtype: str, kv_dtype: str,
                   roofline: Any) -> tuple[MeasuredTable, tuple[str, ...]]:
    """The table for a deployment and the notes on where the roofline stands in; NotCovered if none."""
    system = coverage(gpu_name, tp, weight_dtype, kv_dtype)
    arrays = load_arrays(dict(spec.config), system, tp, weight_dtype, kv_dtype)
    notes = []
    gen_attn: np.ndarray | None = arrays["gen_attn"]
    kv_heads = max(spec.num_kv_heads // tp, 1)
    if kv_heads > MAX_MEASURED_KV_HEADS:
        gen_attn = None
        notes.append(f"decode attention: {kv_heads} KV heads per GPU is outside the measured 1-"
                     f"{MAX_MEASURED_KV_HEADS}; roofline for that term")
    pcie_roofline = tp > 1 and roofline.allreduce_link == "pcie" and gpu_name not in PCIE_ALLREDUCE_MEASURED
    if pcie_roofline:
        notes.append("TP all-reduce over PCIe is not measured for this GPU; roofline for that term")
    table = MeasuredTable(arrays["ctx_other"], arrays["gen_other"], arrays["ctx_comm"], arrays["gen_comm"],
                          arrays["logits"], arrays["ctx_attn"], gen_attn, roofline, pcie_roofline)
    return table, tuple(notes)

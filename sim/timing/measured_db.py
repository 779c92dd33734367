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

MoE models use the package's measured MoE kernels (experts split over the TP ranks, or placed
whole with expert_parallel; its own power-law routing), MLA models its MLA module tables, and the
expert dtype the checkpoint ships under weight_dtype "native" (mxfp4 for gpt-oss, fp8 blocks for
DeepSeek). Models with KV groups (sliding, chunked, state, eviction caps) get attention tables of
ONE full-attention layer, which each group scales by its layers at the context it reads
(sim/timing/attention_groups.py); state layers use the roofline unless the package's own op list
times their kernels (its NemotronH Mamba-2 and Qwen3.5 Gated DeltaNet ops: `STATE_OP_WORDS`).

Limits respected (../shared/notes/aiconfigurator.md): decode attention tables cover at most 8 KV
heads per GPU, so beyond that the decode attention term is the roofline's; TP all-reduce over
PCIe is measured only on the RTX PRO 6000, so other PCIe GPUs use the roofline's all-reduce;
no coverage (GPU, dtype, package missing) means the whole step falls back to the roofline, with
the reason in `cost_model.detail`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from models.gpus import GPUS
from sim.timing.measured_table import (
    CONTEXTS,
    PREFIXES,
    SEQS,
    TOKENS,
    MeasuredTable,
    RooflinePart,
)

if TYPE_CHECKING:
    from models.spec import ModelSpec
    from sim.timing.knobs import TimingKnobs

PCIE_ALLREDUCE_MEASURED = {"rtx-pro-6000"}
MAX_MEASURED_KV_HEADS = 8
BACKEND = "vllm"
KV_QUANT = {"bf16": None, "fp16": None, "fp8": "fp8"}
# kvsim weight dtype -> aiconfigurator GEMM / MoE quant mode; None = what the checkpoint's
# quantization_config says (aiconfigurator reads it: mxfp4 experts for gpt-oss, fp8 blocks for DeepSeek).
WEIGHT_QUANT = {"bf16": "bfloat16", "fp16": "bfloat16", "native": None}
WEIGHT_DTYPES = tuple(WEIGHT_QUANT)
CACHE_VERSION = 3  # 3: the tables record whether the package timed the state layers (`state_ops`)
# Op kinds by name (aiconfigurator's op lists): attention kernels (MLA: the whole attention module),
# communication (TP all-reduces; vLLM's MoE pre/post dispatch are all-reduces too), the logits GEMM.
ATTENTION_TYPES = ("ContextAttention", "GenerationAttention")
COMM_SUFFIXES = ("_ar", "_ar_1", "_ar_2", "_p2p", "_allreduce", "_dispatch")
# The package's own state-layer kernels (its NemotronH Mamba-2 conv1d and ssm, Qwen3.5's Gated DeltaNet
# conv1d and scan): where its op list has them, the measured "other" ops already time the state layers,
# so their roofline term (sim/timing/attention_groups.py) is left out rather than counted twice.
STATE_OP_WORDS = ("_mamba_", "_gdn_")


class NotCovered(Exception):
    """The database cannot time this deployment; the message says why (one line)."""


# --- building the table ------------------------------------------------------------------------------

def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("aiconfigurator-core")
    except Exception as exc:  # noqa: BLE001 - any failure means "not installed"
        raise NotCovered(f"aiconfigurator-core is not installed ({type(exc).__name__})") from None


def measured_gpus() -> list[str]:
    """GPUs whose registry entry names an aiconfigurator system (models/gpus.py, measured_db_system)."""
    return [name for name, gpu in GPUS.items() if gpu.measured_db_system]


def coverage(gpu_name: str, tp: int, weight_dtype: str, kv_dtype: str) -> str:
    """The aiconfigurator system for this deployment, or NotCovered with the reason."""
    entry = GPUS.get(gpu_name)
    system = entry.measured_db_system if entry is not None else ""
    if not system:
        raise NotCovered(f"no measured vLLM kernels for GPU {gpu_name} (measured: {', '.join(measured_gpus())})")
    if weight_dtype not in WEIGHT_DTYPES:
        raise NotCovered(f"weights {weight_dtype}: measured tables used for {'/'.join(WEIGHT_DTYPES)} only")
    if kv_dtype not in KV_QUANT and nearest_measured_kv(kv_dtype) is None:
        raise NotCovered(f"KV {kv_dtype}: no measured attention kernels")
    if tp not in (1, 2, 4, 8):
        raise NotCovered(f"TP {tp}: measured all-reduce covers 1, 2, 4, 8 GPUs")
    return system


def nearest_measured_kv(kv_dtype: str) -> str | None:
    """The measured KV dtype with the same element width (int8 -> fp8, fp32 -> none: no measured
    kernel reads 4-byte K/V) or, for narrower elements (int4), the narrowest measured one; None when
    kv_dtype is measured itself or nothing measured is at least as narrow."""
    from models.kv_dtypes import get_kv_dtype

    if kv_dtype in KV_QUANT:
        return None
    bits = get_kv_dtype(kv_dtype).element_bits
    measured = sorted((get_kv_dtype(m).element_bits, m) for m in KV_QUANT if m != "fp16")
    same = [m for b, m in measured if b == bits]
    if same:
        return same[0]
    return measured[0][1] if bits < measured[0][0] else None


def derived_decode_scale(spec: ModelSpec, kv_dtype: str, measured_kv: str) -> float:
    """Decode attention reads every cached K/V byte once (memory-bound): its time scales with the
    bytes per token, scales included (int8 stores an fp32 scale per token per kv head)."""
    return spec.kv_bytes_per_token(kv_dtype) / spec.kv_bytes_per_token(measured_kv)


def cache_dir() -> Path:
    base = os.environ.get("KVSIM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kvsim")
    return Path(base) / "measured_db"


@dataclass(frozen=True)
class Deployment:
    """What the tables are queried for (the cache key): one aiconfigurator compile."""

    system: str
    tp: int
    weight_dtype: str
    kv_dtype: str
    moe: bool = False  # an MoE model: experts split over the TP ranks (moe_tp) or placed whole (moe_ep)
    expert_parallel: bool = False
    grouped: bool = False  # attention tables per full-attention layer (models with KV groups)

    def compile_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"tp_size": self.tp}
        if self.moe:
            kwargs["moe_ep_size" if self.expert_parallel else "moe_tp_size"] = self.tp
        quant = WEIGHT_QUANT[self.weight_dtype]
        if quant:
            kwargs["gemm_quant_mode"] = quant
            if self.moe:
                kwargs["moe_quant_mode"] = quant
        if KV_QUANT[self.kv_dtype]:
            kwargs["kvcache_quant_mode"] = KV_QUANT[self.kv_dtype]
        return kwargs


def table_key(config: dict[str, Any], dep: Deployment) -> str:
    text = json.dumps({"v": CACHE_VERSION, "pkg": package_version(), "backend": BACKEND, "dep": dataclasses.asdict(dep),
                       "config": config}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


ARRAYS = ("ctx_other", "gen_other", "ctx_comm", "gen_comm", "logits", "ctx_attn", "gen_attn", "state_ops")


@lru_cache(maxsize=32)
def _cached_arrays(key: str, config_json: str, dep: Deployment) -> dict[str, np.ndarray]:
    path = cache_dir() / f"{key}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return {name: z[name] for name in ARRAYS}
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache file is rebuilt
    try:
        arrays = query_tables(json.loads(config_json), dep)
    except NotCovered:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. PerfDataNotAvailableError: a shape the tables lack
        raise NotCovered(f"aiconfigurator-core lacks data for this model: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200] if str(exc) else ''}") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, **arrays)  # type: ignore[arg-type]  # numpy's stub matches **kwds against allow_pickle: bool
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home still works, just without the disk cache
    return arrays


_NOT_COVERED: dict[str, str] = {}  # key -> reason: an uncovered model is not compiled again in this process


def load_arrays(config: dict[str, Any], dep: Deployment) -> dict[str, np.ndarray]:
    key = table_key(config, dep)
    if key in _NOT_COVERED:
        raise NotCovered(_NOT_COVERED[key])
    try:
        return _cached_arrays(key, json.dumps(config, sort_keys=True, default=str), dep)
    except NotCovered as exc:
        _NOT_COVERED[key] = str(exc)
        raise


def classify_ops(ops: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Indices of one phase's ops (aiconfigurator's op JSON, in spec order) by kind: attention (all
    attention ops, MLA's module included), full_attention (unwindowed attention kernels: one layer of
    them is what a KV group scales), comm, logits and other."""
    kinds: dict[str, list[int]] = {"attention": [], "full_attention": [], "comm": [], "logits": [], "other": []}
    for i, op in enumerate(ops):
        kind, body = next(iter(op.items()))
        name = str(body.get("name", ""))
        if kind in ATTENTION_TYPES or "mla" in name or name.endswith("_attention"):
            kinds["attention"].append(i)
            if kind in ATTENTION_TYPES and not body.get("window_size"):
                kinds["full_attention"].append(i)
        elif name.endswith(COMM_SUFFIXES):
            kinds["comm"].append(i)
        elif name.endswith("logits_gemm"):
            kinds["logits"].append(i)
        else:
            kinds["other"].append(i)
    return kinds


def _layers(ops: list[dict[str, Any]], indices: list[int]) -> float:
    return sum(float(next(iter(ops[i].values())).get("scale_factor", 0.0)) for i in indices)


def query_tables(config: dict[str, Any], dep: Deployment) -> dict[str, np.ndarray]:
    """Ask the database once for every grid point of this deployment (about 0.1 s after a ~2 s compile)."""
    handle, ctx_ops, gen_ops = _compile(config, dep)
    c, g = classify_ops(ctx_ops), classify_ops(gen_ops)
    if not c["attention"] or not g["attention"] or not g["logits"]:
        raise NotCovered("unexpected op list from aiconfigurator-core (no attention or logits op)")
    c_att, g_att = c["attention"], g["attention"]
    if dep.grouped:  # one full-attention layer; the KV groups scale it (MeasuredTable.attn_groups)
        if not c["full_attention"] or not g["full_attention"]:
            raise NotCovered("aiconfigurator-core has no full-attention kernel for this model's layers")
        c_att, g_att = c["full_attention"], g["full_attention"]
        c_per, g_per = 1.0 / _layers(ctx_ops, c_att), 1.0 / _layers(gen_ops, g_att)
    else:
        c_per = g_per = 1.0
    c_other, g_other = c["other"], g["other"]  # the context logits are not used: logits of sampled sequences only

    def total(ops: list[Any]) -> float:
        return sum(float(op[1]) for op in ops) * 1e-3  # ms -> s

    ctx_other = np.array([total(handle.evaluate_context_ops(c_other, batch_size=1, s=t)) for t in TOKENS])
    gen_other = np.array([total(handle.evaluate_generation_ops(g_other, batch_size=b, s=1024)) for b in SEQS])
    ctx_comm = np.array([total(handle.evaluate_context_ops(c["comm"], batch_size=1, s=t)) if c["comm"] else 0.0
                         for t in TOKENS])
    gen_comm = np.array([total(handle.evaluate_generation_ops(g["comm"], batch_size=b, s=1024)) if g["comm"] else 0.0
                         for b in SEQS])
    logits = np.array([total(handle.evaluate_generation_ops(g["logits"], batch_size=b, s=1024)) for b in SEQS])
    ctx_attn = np.array([[c_per * total(handle.evaluate_context_ops(c_att, batch_size=1, s=q, prefix=p))
                          for p in PREFIXES] for q in TOKENS])
    gen_attn = np.array([[g_per * total(handle.evaluate_generation_ops(g_att, batch_size=b, s=x)) for x in CONTEXTS]
                         for b in SEQS])
    names = [str(next(iter(op.values())).get("name", "")) for op in (ctx_ops[i] for i in c_other)]
    state_ops = any(word in name for name in names for word in STATE_OP_WORDS)
    return {"ctx_other": ctx_other, "gen_other": gen_other, "ctx_comm": ctx_comm, "gen_comm": gen_comm,
            "logits": logits, "ctx_attn": ctx_attn, "gen_attn": gen_attn, "state_ops": np.array([float(state_ops)])}


def _compile(config: dict[str, Any], dep: Deployment) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """(engine handle, context op JSON, generation op JSON): the op lists in the compiled spec's
    order, which evaluate_*_ops index (run_static_per_op folds ops of the same name)."""
    try:
        from aiconfigurator_core.sdk import engine as aic_engine
    except ImportError as exc:
        raise NotCovered(f"aiconfigurator-core cannot be imported ({exc})") from None
    kwargs = dep.compile_kwargs()
    with tempfile.TemporaryDirectory(prefix="kvsim-aic-") as d:
        Path(d, "config.json").write_text(json.dumps(config), encoding="utf-8")
        quiet = logging.getLogger("aiconfigurator_core")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                handle = aic_engine.EngineHandle.compile(d, dep.system, BACKEND, **kwargs)
                model_config = aic_engine.build_model_config(
                    tp_size=dep.tp, pp_size=1, attention_dp_size=1, moe_tp_size=kwargs.get("moe_tp_size", 1),
                    moe_ep_size=kwargs.get("moe_ep_size", 1), gemm_quant_mode=kwargs.get("gemm_quant_mode"),
                    kvcache_quant_mode=kwargs.get("kvcache_quant_mode"), fmha_quant_mode=None,
                    moe_quant_mode=kwargs.get("moe_quant_mode"), comm_quant_mode=None, forward_model=None,
                    attention_backend=None)
                aic_engine.apply_nextn(model_config, 0)
                model = aic_engine.get_model(d, model_config, BACKEND)
                ctx_ops = json.loads(aic_engine.build_ops_json(model.context_ops))
                gen_ops = json.loads(aic_engine.build_ops_json(model.generation_ops))
        except Exception as exc:  # noqa: BLE001 - the package raises many kinds; all mean "not covered"
            raise NotCovered(f"aiconfigurator-core cannot compile this model for {dep.system}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}") from None
        finally:
            quiet.setLevel(level)
    return handle, ctx_ops, gen_ops


def measured_table(spec: ModelSpec, gpu_name: str, scenario: TimingKnobs, roofline: RooflinePart) -> tuple[MeasuredTable, tuple[str, ...]]:
    """The table for a deployment and the notes on where the roofline stands in; NotCovered if none."""
    tp, weight_dtype, kv_dtype = scenario.tp, scenario.weight_dtype, scenario.kv_dtype
    system = coverage(gpu_name, tp, weight_dtype, kv_dtype)
    measured_kv = nearest_measured_kv(kv_dtype) or kv_dtype
    groups = roofline.attn_groups
    dep = Deployment(system, tp, weight_dtype, measured_kv, moe=spec.moe is not None,
                     expert_parallel=scenario.expert_parallel and spec.moe is not None,
                     grouped=bool(groups))
    arrays = load_arrays(dict(spec.config), dep)
    notes = []
    gen_attn: np.ndarray | None = arrays["gen_attn"]
    derived = ""
    if measured_kv != kv_dtype:
        scale = derived_decode_scale(spec, kv_dtype, measured_kv)
        gen_attn = None if gen_attn is None else gen_attn * scale
        derived = (f"derived: KV {kv_dtype} has no measured kernels; the {measured_kv} tables with decode "
                   f"attention x{scale:.3f} (bytes read per token, scales included); prefill attention and "
                   f"the other ops as measured for {measured_kv}; dequantisation cost not modelled")
        notes.append(derived)
    kv_heads = max(spec.num_kv_heads // tp, 1)
    if kv_heads > MAX_MEASURED_KV_HEADS and spec.mla is None:
        gen_attn = None
        notes.append(f"decode attention: {kv_heads} KV heads per GPU is outside the measured 1-"
                     f"{MAX_MEASURED_KV_HEADS}; roofline for that term")
    if groups and arrays["state_ops"][0] and any(g.kind == "state" for g in groups):
        groups = tuple(g for g in groups if g.kind != "state")  # timed by the package's own kernels
        notes.append("attention per KV group: one measured full-attention layer at the context each group reads; "
                     "state layers measured (the package's state kernels)")
    elif groups:
        notes.append("attention per KV group: one measured full-attention layer at the context each group reads"
                     + ("; state layers from the roofline" if any(g.kind == "state" for g in groups) else ""))
    if dep.moe and scenario.expert_imbalance != 1.0:
        notes.append("expert load: the measured MoE kernels' own power-law routing (alpha 1.2); "
                     "expert_imbalance applies to the roofline only")
    pcie_roofline = tp > 1 and roofline.allreduce_link == "pcie" and gpu_name not in PCIE_ALLREDUCE_MEASURED
    if pcie_roofline:
        notes.append("TP all-reduce over PCIe is not measured for this GPU; roofline for that term")
    table = MeasuredTable(arrays["ctx_other"], arrays["gen_other"], arrays["ctx_comm"], arrays["gen_comm"],
                          arrays["logits"], arrays["ctx_attn"], gen_attn, roofline, pcie_roofline, groups, derived)
    return table, tuple(notes)

"""Step time of one engine step: a roofline by default, or a calibration profile measured on a GPU.

Roofline (per TP rank; ranks run in parallel):

    compute = (2 x matmul_params/tp x new_tokens + 4 x layers x heads/tp x head_dim x attn_pairs) / (peak x compute_eff)
    memory  = (weights/tp + (kv_read_tokens + new_tokens) x kv_bytes_per_token_per_gpu) / (hbm_bw x memory_eff)
    step    = max(compute, memory) + allreduce + fixed_overhead
    allreduce (tp > 1) = 2 per layer x (latency + 2 (tp-1)/tp x new_tokens x hidden x 2 B / link_bw)

Arguments of a step, summed over the sequences in it:
- new_tokens: tokens computed (prefill chunk tokens + one per decoding sequence);
- kv_read_tokens: context tokens whose KV is read;
- attn_pairs: sum of new_tokens_i x context_len_i (query-key pairs per head and layer).

A calibration profile (docs/CALIBRATION.md) replaces the roofline with a fitted linear model
    step = intercept + a x new_tokens + b x kv_read_tokens + c x attn_pairs
measured by gpu_backend.profile through fit_profile().
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from models.gpus import GPUSpec, get_gpu
from models.safe_json import read_json_file
from models.spec import ModelSpec
from sim.scenario import ScenarioError

PROFILE_SCHEMA = "kvsim.cost_profile"
PROFILE_VERSION = 1
MAX_PROFILE_BYTES = 1 << 20
COEFFICIENTS = ("intercept_s", "per_new_token_s", "per_kv_read_token_s", "per_attn_pair_s")

# Roofline defaults (docs/CALIBRATION.md says why).
COMPUTE_EFFICIENCY = 0.6  # large bf16 GEMMs in serving reach ~50-70% of dense peak
MEMORY_EFFICIENCY = 0.85  # decode GEMV and paged-attention kernels stream at ~80-90% of HBM peak
FIXED_OVERHEAD_S = 0.4e-3  # scheduling, input prep and launches per step with CUDA graphs
ALLREDUCE_LATENCY_S = 8e-6  # one NCCL all-reduce of a small message over NVLink


class ProfileError(ScenarioError):
    """A calibration profile cannot be used (one line: file and problem)."""


@dataclass(frozen=True)
class CostModel:
    """Step-time model of one TP group. Build with from_scenario(); call step_time / decode_step_times."""

    matmul_flops_per_token: float  # 2 x matmul params per rank
    attn_flops_per_pair: float  # 4 x layers x heads per rank x head_dim
    weight_bytes: float  # per rank
    kv_bytes_per_token: float  # per rank
    peak_flops: float
    hbm_bandwidth: float
    allreduce_s_per_token: float
    allreduce_fixed_s: float
    compute_efficiency: float = COMPUTE_EFFICIENCY
    memory_efficiency: float = MEMORY_EFFICIENCY
    fixed_overhead_s: float = FIXED_OVERHEAD_S
    profile: dict[str, float] | None = None  # fitted coefficients; replaces the roofline when set
    source: str = "roofline"
    warnings: tuple[str, ...] = field(default=())

    @classmethod
    def from_scenario(cls, spec: ModelSpec | None, gpu: GPUSpec | None, scenario: Any, **overrides: Any) -> CostModel:
        """Roofline for the scenario's model, GPU, TP and dtypes; a profile when scenario.profile is set."""
        from sim.plan.capacity import kv_bytes_per_token_per_gpu, scenario_spec

        spec = spec or scenario_spec(scenario)
        if scenario.kv_heads and spec.num_kv_heads != scenario.kv_heads:
            spec = spec.with_kv_heads(scenario.kv_heads)
        gpu = gpu or get_gpu(scenario.gpu)
        tp = scenario.tp
        parts = spec.param_breakdown()
        tied_head = spec.vocab_size * (spec.layout.embed_proj_dim or spec.hidden_size) if spec.tie_word_embeddings else 0
        matmul_params = spec.num_params - parts["embedding"] + tied_head  # lookups are free, the head is a GEMM
        compute_dtype = "fp8" if scenario.weight_dtype == "fp8" else ("fp32" if scenario.weight_dtype == "fp32" else "bf16")
        link = gpu.nvlink_bandwidth or gpu.host_link_bandwidth
        act_bytes = 4 if scenario.weight_dtype == "fp32" else 2
        if tp > 1:
            per_token = 2 * spec.num_layers * 2 * (tp - 1) / tp * spec.hidden_size * act_bytes / link
            fixed = 2 * spec.num_layers * ALLREDUCE_LATENCY_S
        else:
            per_token = fixed = 0.0
        kwargs: dict[str, Any] = dict(
            matmul_flops_per_token=2.0 * matmul_params / tp,
            attn_flops_per_pair=4.0 * spec.num_layers * (spec.num_attention_heads // tp) * spec.head_dim,
            weight_bytes=spec.weight_bytes(scenario.weight_dtype) / tp,
            kv_bytes_per_token=float(kv_bytes_per_token_per_gpu(spec, scenario.kv_dtype, tp)),
            peak_flops=gpu.peak_flops(compute_dtype), hbm_bandwidth=gpu.hbm_bandwidth,
            allreduce_s_per_token=per_token, allreduce_fixed_s=fixed,
        )
        kwargs.update(overrides)
        if scenario.profile:
            prof = load_profile(scenario.profile)
            warnings = tuple(_profile_mismatches(prof, scenario, spec))
            kwargs.update(profile=prof["coefficients"], source=f"profile {scenario.profile}", warnings=warnings)
        return cls(**kwargs)

    # --- step times --------------------------------------------------------------------------
    def step_time(self, new_tokens: int, kv_read_tokens: int, attn_pairs: int) -> float:
        """Seconds for one step (see the module docstring for the arguments).

        Evaluated on Python floats (the engine calls this once per event; numpy costs ~15 us per
        scalar call). The very same formula as decode_step_times' arrays, operation for
        operation, so the floats are bit-identical (tests/test_cost_model.py checks)."""
        return float(self._times(float(new_tokens), float(kv_read_tokens), float(attn_pairs), max))

    def decode_step_times(self, k: int, batch: int, context_tokens_start: int) -> np.ndarray:
        """Times of k consecutive pure-decode steps of `batch` sequences.

        Step j reads context_tokens_start + j x batch KV tokens (the summed context of the batch
        grows by one token per sequence per step) and has as many attention pairs; so
        decode_step_times(1, b, c)[0] == step_time(b, c, c).
        """
        if k <= 0:
            return np.zeros(0)
        kv = context_tokens_start + batch * np.arange(k, dtype=np.float64)
        return self._times(np.float64(batch), kv, kv, np.maximum)

    def _times(self, new: Any, kv: Any, pairs: Any, maximum: Callable[[Any, Any], Any]) -> Any:
        """The step-time formula over floats or float64 arrays (`maximum`: max or np.maximum)."""
        if self.profile is not None:
            p = self.profile
            return (p["intercept_s"] + p["per_new_token_s"] * new + p["per_kv_read_token_s"] * kv
                    + p["per_attn_pair_s"] * pairs)
        flops = self.matmul_flops_per_token * new + self.attn_flops_per_pair * pairs
        compute = flops / (self.peak_flops * self.compute_efficiency)
        moved = self.weight_bytes + (kv + new) * self.kv_bytes_per_token
        memory = moved / (self.hbm_bandwidth * self.memory_efficiency)
        comm = self.allreduce_fixed_s + self.allreduce_s_per_token * new
        return maximum(compute, memory) + comm + self.fixed_overhead_s


def _profile_mismatches(prof: dict[str, Any], scenario: Any, spec: ModelSpec) -> list[str]:
    """Warnings when a profile was measured for another model, TP or dtype than the scenario's."""
    out = []
    for key, want in (("model", scenario.model), ("tp", scenario.tp), ("kv_dtype", scenario.kv_dtype),
                      ("weight_dtype", scenario.weight_dtype)):
        have = prof.get(key)
        if have not in (None, "") and str(have).lower() not in (str(want).lower(), spec.name.lower(), spec.hf_id.lower()):
            out.append(f"profile measured with {key}={have}, scenario has {want}")
    return out


# --- calibration profiles -------------------------------------------------------------------

def fit_profile(samples: Iterable[Sequence[float]] | np.ndarray, **meta: Any) -> dict[str, Any]:
    """Least-squares fit of the linear step model to measured rows.

    samples: rows of (new_tokens, kv_read_tokens, attn_pairs, seconds). Coefficients are kept
    non-negative (a column whose free fit goes negative is dropped and the rest refitted), and a
    column that never varies (all zero) gets 0. meta (device, model, tp, kv_dtype, weight_dtype,
    ...) is stored alongside. Returns the profile dict that save_profile writes.
    """
    data = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != 4:
        raise ProfileError("fit_profile: samples must be rows of (new_tokens, kv_read_tokens, attn_pairs, seconds)")
    if len(data) < 4 or not np.isfinite(data).all() or (data < 0).any():
        raise ProfileError("fit_profile: need at least 4 finite, non-negative rows")
    X = np.column_stack([np.ones(len(data)), data[:, :3]])
    y = data[:, 3]
    scale = np.maximum(np.abs(X).max(axis=0), 1e-30)  # condition: columns span 1 .. 1e9
    active = [j for j in range(4) if j == 0 or np.ptp(X[:, j]) > 0]
    coef = np.zeros(4)
    while True:
        sol, *_ = np.linalg.lstsq(X[:, active] / scale[active], y, rcond=None)
        sol = sol / scale[active]
        negative = [j for j, c in zip(active, sol, strict=True) if c < 0]
        if not negative:
            coef[active] = sol
            break
        active.remove(min(negative, key=lambda j: sol[active.index(j)] * scale[j]))
        if not active:
            break
    pred = X @ coef
    resid = y - pred
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    rel = np.abs(resid) / np.maximum(y, 1e-12)
    return {
        "schema": PROFILE_SCHEMA, "schema_version": PROFILE_VERSION, **meta,
        "coefficients": dict(zip(COEFFICIENTS, (float(c) for c in coef), strict=True)),
        "fit": {"samples": len(data), "r2": r2, "rmse_s": float(np.sqrt((resid**2).mean())),
                "max_rel_error": float(rel.max()), "median_rel_error": float(np.median(rel))},
    }


def validate_profile(data: Any, source: str = "profile") -> dict[str, Any]:
    """Check a parsed profile: schema, version and four finite, non-negative coefficients."""
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a JSON object")
    if data.get("schema") != PROFILE_SCHEMA:
        raise ProfileError(f"{source}: not a kvsim cost profile (schema must be {PROFILE_SCHEMA!r})")
    if data.get("schema_version") != PROFILE_VERSION:
        raise ProfileError(f"{source}: schema_version {data.get('schema_version')!r} unsupported (expected {PROFILE_VERSION})")
    coef = data.get("coefficients")
    if not isinstance(coef, dict):
        raise ProfileError(f"{source}: missing 'coefficients' object")
    for name in COEFFICIENTS:
        value = coef.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise ProfileError(f"{source}: coefficients.{name} must be a finite number >= 0, got {value!r}")
    if coef["intercept_s"] + coef["per_new_token_s"] <= 0:
        raise ProfileError(f"{source}: coefficients give zero step time")
    return {**data, "coefficients": {name: float(coef[name]) for name in COEFFICIENTS}}


def save_profile(profile: dict[str, Any], path: str | Path) -> Path:
    """Write a profile (validated first) as indented JSON."""
    p = Path(path)
    p.write_text(json.dumps(validate_profile(profile, str(p)), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return p


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read and validate a profile file: size-bounded, UTF-8 JSON, never executed."""
    p = Path(path)
    data = read_json_file(p, max_bytes=MAX_PROFILE_BYTES, error=ProfileError, what="a profile")
    return validate_profile(data, str(p))

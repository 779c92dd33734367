"""Reference experiments run on this device: KV bytes against the formula, capacity, GQA, step times.

One registry (`EXPERIMENTS`) read by the GPU page and by `python -m gpu_backend experiment`. Each
experiment returns a DataFrame, one row per variant, with the measured value and the formula's value
side by side where a formula exists, and says which columns its chart plots.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from gpu_backend.executor import RunConfig, run
from gpu_backend.model_loader import LoadedModel, load_model
from gpu_backend.profile import GRIDS, measure
from sim.run.deployment import Deployment
from sim.trace.synthetic import synthetic

GiB = 1 << 30


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    run: Callable[..., pd.DataFrame]  # (scenario, cfg, loaded) -> one row per variant
    x: str  # chart: x column
    y: tuple[str, ...]  # chart: y columns (one line each), or one column coloured by `color`
    y_label: str  # chart: y axis title, plain words
    color: str | None = None
    log_x: bool = False


def _measure_kv(trace, scenario, cfg: RunConfig, loaded: LoadedModel | None):
    """Summary of one run and the KV bytes in use at its peak."""
    s = run(trace, scenario, cfg, loaded=loaded).summary
    return s, s["kv_cache_usage_perc"]["peak"] * s["kv_capacity_bytes"]


def _padded_kv_bytes(tokens: int, s: dict) -> int:
    """The formula: a request's tokens rounded up to whole blocks, times bytes per token."""
    return -(-tokens // s["block_size"]) * s["block_size"] * s["bytes_per_token"]


def kv_vs_length(scenario, cfg: RunConfig, loaded: LoadedModel | None = None) -> pd.DataFrame:
    rows = []
    for n in (32, 64, 128, 256):
        s, used = _measure_kv(synthetic(1, 1.0, input=f"fixed:value={n}", output="fixed:value=2"), scenario, cfg,
                              loaded)
        rows.append({"prompt_tokens": n, "kv_bytes_measured": used, "kv_bytes_formula": _padded_kv_bytes(n + 1, s)})
    return pd.DataFrame(rows)


def kv_vs_batch(scenario, cfg: RunConfig, loaded: LoadedModel | None = None) -> pd.DataFrame:
    rows = []
    for b in (1, 2, 4, 8):
        s, used = _measure_kv(synthetic(b, 1e6, input="fixed:value=128", output="fixed:value=2"), scenario, cfg,
                              loaded)
        rows.append({"batch": b, "kv_bytes_measured": used, "kv_bytes_formula": b * _padded_kv_bytes(129, s),
                     "step_s_mean": s["duration_s"] / max(s["num_steps"], 1)})
    return pd.DataFrame(rows)


CAPACITY_REQUESTS, CAPACITY_FITS = 24, 8  # requests sent at once; requests the pool is sized to hold


def capacity_budget_gib(scenario, prompt: int, output: int, holds: int) -> float:
    """A KV budget that holds `holds` requests of prompt + output tokens, by ModelSpec's formula."""
    spec = Deployment.model_of(scenario)
    blocks = holds * -(-(prompt + output) // scenario.block_size)
    bytes_ = blocks * scenario.block_size * spec.kv_bytes_per_token(scenario.kv_dtype)
    return (bytes_ + spec.kv_fixed_bytes(scenario.kv_dtype)) / GiB


def capacity(scenario, cfg: RunConfig, loaded: LoadedModel | None = None) -> pd.DataFrame:
    """More requests than the pool holds (the pool is sized for CAPACITY_FITS of them): the batch it
    sustains and the preemptions it forces."""
    sc = scenario.with_kv_budget(capacity_budget_gib(scenario, 128, 8, CAPACITY_FITS))
    trace = synthetic(CAPACITY_REQUESTS, 1e6, input="fixed:value=128", output="fixed:value=8")
    s, _used = _measure_kv(trace, sc, cfg, loaded)
    return pd.DataFrame([{"requests": CAPACITY_REQUESTS, "num_blocks": s["num_blocks"],
                          "mean_batch": s["mean_batch_size"], "preemptions": s["num_preemptions"],
                          "peak_usage": s["kv_cache_usage_perc"]["peak"], "kv_pool_bytes": s["kv_pool_bytes"]}])


def gqa(scenario, cfg: RunConfig, loaded: LoadedModel | None = None) -> pd.DataFrame:
    heads = Deployment.model_of(scenario).num_attention_heads
    rows = []
    for kv in sorted({heads, max(heads // 2, 1), 1}, reverse=True):
        sc = scenario.replace(kv_heads=kv)
        ld = load_model(sc.model, dtype=cfg.dtype, device=cfg.device, kv_heads=kv, seed=cfg.seed)
        s, used = _measure_kv(synthetic(4, 1e6, input="fixed:value=128", output="fixed:value=8"), sc, cfg, ld)
        rows.append({"kv_heads": kv, "bytes_per_token": s["bytes_per_token"], "kv_bytes_measured": used,
                     "kv_pool_bytes": s["kv_pool_bytes"], "duration_s": s["duration_s"]})
    return pd.DataFrame(rows)


def prefill_vs_decode(scenario, cfg: RunConfig, loaded: LoadedModel | None = None) -> pd.DataFrame:
    ld = loaded or load_model(scenario.model, dtype=cfg.dtype, device=cfg.device, seed=cfg.seed)
    grid = GRIDS["default" if ld.device.type == "cuda" else "small"]
    kinds = ["prefill"] * len(grid.prefill) + ["decode"] * len(grid.decode)
    rows = [{"kind": kind, "new_tokens": new, "kv_read_tokens": kv, "step_s": sec, "s_per_new_token": sec / new}
            for (new, kv, _pairs, sec), kind in zip(measure(ld, grid, kv_dtype=scenario.kv_dtype, repeats=3), kinds,
                                                   strict=True)]
    return pd.DataFrame(rows)


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    Experiment("KV vs sequence length", "one request per prompt length: KV bytes in use vs the formula",
               kv_vs_length, "prompt_tokens", ("kv_bytes_measured", "kv_bytes_formula"), "KV bytes"),
    Experiment("KV vs batch size", "B identical requests at once: KV bytes in use grow linearly with B",
               kv_vs_batch, "batch", ("kv_bytes_measured", "kv_bytes_formula"), "KV bytes"),
    Experiment("Capacity", f"{CAPACITY_REQUESTS} requests at once into a pool sized for {CAPACITY_FITS}: "
               "the batch the pool sustains, preemptions", capacity, "requests", ("mean_batch",), "requests in the batch"),
    Experiment("GQA comparison", "the same model with all, half and one kv head: bytes per token and pool use",
               gqa, "kv_heads", ("kv_bytes_measured",), "KV bytes in use"),
    Experiment("Prefill vs decode timing", "step time of prefill shapes vs decode shapes (compute- vs memory-bound)",
               prefill_vs_decode, "new_tokens", ("step_s",), "step time (s)", color="kind", log_x=True),
)}


def run_experiment(name: str, scenario, cfg: RunConfig, loaded: LoadedModel | None = None) -> pd.DataFrame:
    """Run one experiment by name (ValueError naming the choices for an unknown one)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}: choose one of {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name].run(scenario, cfg, loaded)

"""Replay a measured vLLM run through kvsim with the run's own engine config; compare side by side.

The simulated engine copies the run exactly where the run says it: model (its config.json), GPU
(from the device name), TP, dtypes, the KV pool in blocks as vLLM sized it, block size,
max_num_seqs, max_num_batched_tokens, max_model_len, prefix caching and async scheduling (where
engine_kwargs records it; else vLLM's GPU default). Arrivals are the run's
queued times; input and output lengths are the run's. What differs is then the step-time model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from models.gpus import get_gpu, gpu_for_device
from models.spec import load_spec
from sim.fidelity.run_record import MeasuredRun, RunError
from sim.run.deployment import forced_block_size, page_bytes
from sim.run.distribution import distribution
from sim.scenario import Scenario
from sim.trace.model import Trace

GiB = 1 << 30
STATS = ("mean", "p50", "p90", "p99")
LATENCY_METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
SERIES = (("num_running", "running"), ("num_waiting", "waiting"), ("kv_cache_usage_perc", "KV usage"))


@dataclass
class Validation:
    """Measured vs simulated for one run: the table, both series and the simulated result."""

    run: MeasuredRun
    scenario: Scenario
    result: Any  # sim.run.metrics.SimResult
    table: pd.DataFrame  # metric, stat, measured, simulated, error (relative, simulated/measured - 1)
    series: pd.DataFrame  # t_s, measured_<g>, simulated_<g> for the gauges in SERIES

    def error(self, metric: str, stat: str = "mean") -> float:
        row = self.table[(self.table["metric"] == metric) & (self.table["stat"] == stat)]
        return float(row["error"].iloc[0])

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the table, the series and the simulated run's cost-model source."""
        cm = self.result.summary.get("cost_model")
        return {
            "run": self.run.source, "scenario": self.scenario.to_dict(), "cost_model": cm,
            "num_gpu_blocks": predicted_pool(self.run),
            "interval_coverage": interval_coverage(self.run, self.result),
            "comparison": self.table.replace({np.nan: None}).to_dict(orient="records"),
            "series": self.series.replace({np.nan: None}).to_dict(orient="list"),
        }


def run_gpu(run: MeasuredRun) -> Any:
    """The run's GPU: the catalog name it gives (hardware.gpu, --gpu), else its device name."""
    e = run.engine
    if e.gpu:
        return get_gpu(e.gpu)
    if e.device_name.strip().lower() in ("", "unknown", "cpu"):
        raise RunError(f"{run.source}: the run does not name its GPU ({e.device_name!r}): give --gpu "
                       "(a GPU catalog name) to simulate it")
    return gpu_for_device(e.device_name)


def interval_coverage(run: MeasuredRun, result: Any) -> dict[str, Any]:
    """How many of the run's windows (10 requests in arrival order) fall inside the simulated run's
    90% intervals, per metric and in all: {"level", "method", "inside", "windows", "by_metric"}."""
    from sim.timing.intervals import window_log_residuals

    method = result.summary.get("interval_method") or {}
    bounds = method.get("log_bounds") or {}
    res = window_log_residuals(run.requests, result.requests, int(method.get("window_requests", 10)))
    by_metric, inside, total = {}, 0, 0
    for metric, (lo, hi) in bounds.items():
        r = res[metric].to_numpy()
        r = r[np.isfinite(r)]
        n_in = int(((r >= lo) & (r <= hi)).sum())
        by_metric[metric] = [n_in, len(r)]
        inside, total = inside + n_in, total + len(r)
    return {"level": method.get("level"), "method": method.get("method"), "inside": inside, "windows": total,
            "by_metric": by_metric}


def predicted_pool(run: MeasuredRun) -> dict[str, Any]:
    """The run's measured num_gpu_blocks beside vLLM's accounting of it (sim/memory/vllm_profile.py)
    at the run's vLLM version: {"measured", "predicted", "error", "vllm_version"} (predicted None
    where the layout or version is not modelled, with the reason), and `range`: the blocks a start
    may get when its torch.compile cache is not known to be warm (sim/memory/vllm_first_start.py)."""
    from sim.memory.vllm_profile import DEFAULT_VLLM_VERSION, PoolLayoutError, vllm_memory_profile

    e = run.engine
    version = e.vllm_version or DEFAULT_VLLM_VERSION
    out: dict[str, Any] = {"measured": e.num_gpu_blocks, "predicted": None, "error": None, "vllm_version": version}
    try:
        spec = load_spec(str(run.config_path) if run.config_path is not None else e.model)
        prof = vllm_memory_profile(spec, run_gpu(run), tp=e.tp, weight_dtype=e.weight_dtype,
                                   kv_dtype=e.kv_dtype, gpu_mem_util=e.gpu_mem_util, max_batched_tokens=e.max_batched_tokens,
                                   max_num_seqs=e.max_num_seqs, block_size=e.block_size, vllm_version=version)
    except (PoolLayoutError, ValueError) as exc:
        out["reason"] = str(exc)
        return out
    out["predicted"] = prof.num_gpu_blocks
    out["range"] = list(prof.num_gpu_blocks_range)
    out["error"] = prof.num_gpu_blocks / e.num_gpu_blocks - 1.0 if e.num_gpu_blocks else None
    return out


def run_trace(run: MeasuredRun) -> Trace:
    r = run.requests
    return Trace.build(r["arrival_s"], r["input_tokens"], r["output_tokens"], format="vllm-run", source=run.source)


def run_scenario(run: MeasuredRun, profile: str | None = None, **overrides: Any) -> Scenario:
    """The Scenario that copies the run's engine (see the module docstring)."""
    e = run.engine
    model = str(run.config_path) if run.config_path is not None else e.model
    spec = load_spec(model)
    gpu = run_gpu(run)
    values: dict[str, Any] = dict(
        model=model, gpu=gpu.name, tp=e.tp, weight_dtype=e.weight_dtype, kv_dtype=e.kv_dtype,
        block_size=e.block_size, prefix_caching=e.prefix_caching,
        max_num_seqs=e.max_num_seqs, max_batched_tokens=e.max_batched_tokens, max_model_len=e.max_model_len,
        chunked_prefill=True, async_scheduling=e.async_scheduling, profile=profile,
        prefix_cache_retention_interval=_retention(e.retention_interval, spec))
    values.update(overrides)
    if values.get("kv_budget_gib") is None:
        values["kv_budget_gib"] = _pool_gib(Scenario(**values), spec, e.num_gpu_blocks)
    return Scenario(**values)


def _retention(interval: int | None, spec: Any) -> int | None:
    """The run's retention interval; 0 for a model with no sliding-window or state group, where it
    changes nothing (vLLM refuses N > 0 there, and so does kvsim: sim/run/deployment.py)."""
    return interval if any(g.kind in ("sliding", "state") for g in spec.groups) else 0


def _pool_gib(scenario: Scenario, spec: Any, num_gpu_blocks: int) -> float:
    """The budget (GiB) of exactly the run's num_gpu_blocks blocks, laid out as vLLM lays them out (a
    block is every layer's page on every TP rank, padding layers and replicated KV heads included:
    sim/run/deployment.py page_bytes), half a block of slack against float rounding, the fixed
    per-tensor scales added back (Deployment.resolve takes them out)."""
    sc = forced_block_size(scenario, spec)
    return ((num_gpu_blocks + 0.5) * page_bytes(sc, spec) + spec.kv_fixed_bytes(sc.kv_dtype)) / GiB


def validate(run: MeasuredRun, profile: str | None = None, progress: Any = None, **overrides: Any) -> Validation:
    """Simulate the run under its own engine config and compare."""
    from sim.fleet.replay import simulate

    scenario = run_scenario(run, profile, **overrides)
    result = simulate(run_trace(run), scenario, progress=progress)
    return Validation(run, scenario, result, comparison_table(run, result), series_frame(run, result))


def comparison_table(run: MeasuredRun, result: Any) -> pd.DataFrame:
    """Rows of (metric, stat, measured, simulated, error) for latencies and throughput."""
    meas, sim = run.requests, result.requests
    done = sim["finish_s"].notna().to_numpy()
    rows = []
    for col, label in LATENCY_METRICS:
        m, s = _stats(meas[col].to_numpy()), _stats(sim[col].to_numpy()[done])
        m = {**m, **(run.measured_stats(col) or {})}
        rows += [(label, stat, m[stat], s[stat]) for stat in STATS]
    rows.append(("throughput (tok/s)", "mean", run.throughput_tok_s, float(result.summary["throughput_tok_s"])))
    rows.append(("duration (s)", "max", run.duration_s, float(result.summary["duration_s"])))
    df = pd.DataFrame(rows, columns=["metric", "stat", "measured", "simulated"])
    with np.errstate(invalid="ignore", divide="ignore"):
        df["error"] = df["simulated"] / df["measured"] - 1.0
    return df


def series_frame(run: MeasuredRun, result: Any) -> pd.DataFrame:
    """The run's gauges and the simulated ones on the run's own time grid (nearest earlier sample)."""
    ts = run.timeseries
    steps = result.steps
    out = {"t_s": ts["t_s"].to_numpy()}
    grid = steps["t_s"].to_numpy() + steps["duration_s"].to_numpy()
    idx = np.clip(np.searchsorted(grid, out["t_s"], side="left"), 0, max(len(grid) - 1, 0))
    for col, _ in SERIES:
        out[f"measured_{col}"] = ts[col].to_numpy()
        out[f"simulated_{col}"] = steps[col].to_numpy()[idx] if len(grid) else np.full(len(ts), np.nan)
    return pd.DataFrame(out)


def _stats(values: np.ndarray) -> dict[str, float]:
    """The run summary's distribution (sim/run/distribution.py), NaN where it has no value."""
    return {k: float("nan") if v is None else v for k, v in distribution(values).items()}

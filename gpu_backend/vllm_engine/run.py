"""vLLM as the measuring engine: a trace through a real vLLM V1 engine on the wall clock, same frames out.

`run_vllm(trace, scenario, ...)` replays the trace with arrivals at their trace times (or all at
once), and turns the worker's step records and request timestamps into the simulator's SimResult
(requests frame, bucketed steps frame, summary: docs/METRICS.md) plus `extra["step_log"]`, one
row per engine step taken from vLLM's own scheduler (running, waiting, KV blocks in use,
prefix-cache hits, preemptions, tokens scheduled).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from gpu_backend.vllm_engine.client import run_worker
from gpu_backend.vllm_engine.conform import engine_config
from gpu_backend.vllm_engine.cpu_rules import KV_DTYPE
from gpu_backend.vllm_engine.model_dir import model_dir
from gpu_backend.vllm_engine.protocol import StepRecord
from gpu_backend.vllm_engine.trace_requests import engine_requests
from models.kv_groups import max_in_flight_tokens
from sim.core.step_types import BREAKDOWN_FIELDS
from sim.run import metrics, verdict

STEP_LOG_COLUMNS = ("step", "t_start_s", "t_end_s", "batch_size", "prefill_tokens", "decode_tokens",
                    "num_preemptions", "blocks_in_use", "num_running", "num_waiting", "prefix_hit_tokens")


def live_row(r: StepRecord) -> dict:
    """A step as the GPU page's live chart reads it (the executor's step-log names)."""
    return {"step": r.step, "t_end_s": r.t_end_s, "batch_size": len(r.scheduled), "blocks_in_use": r.blocks_in_use}


def step_log(steps: list[StepRecord]) -> pd.DataFrame:
    rows = []
    for r in steps:
        tokens = sum(n for _, n in r.scheduled)
        rows.append((r.step, r.t_start_s, r.t_end_s, len(r.scheduled), tokens - r.decode_tokens, r.decode_tokens,
                     len(r.preempted), r.blocks_in_use, len(r.running_ids), len(r.waiting_ids),
                     sum(n for _, n in r.admitted)))
    return pd.DataFrame(rows, columns=list(STEP_LOG_COLUMNS))


def _requests_frame(reqs, times: dict[str, dict], steps: list[StepRecord]) -> pd.DataFrame:
    preempted: dict[str, int] = {}
    hits: dict[str, int] = {}
    for r in steps:
        for rid in r.preempted:
            preempted[rid] = preempted.get(rid, 0) + 1
        for rid, n in r.admitted:
            hits[rid] = hits.get(rid, 0) + n
    nan = float("nan")
    get = lambda rid, key: float(times.get(rid, {}).get(key, nan))  # noqa: E731
    arrival = np.array([get(q.id, "arrival_s") for q in reqs])
    admitted = np.array([get(q.id, "first_scheduled_s") for q in reqs])
    first = np.array([get(q.id, "first_token_s") for q in reqs])
    finish = np.array([get(q.id, "finish_s") for q in reqs])
    out = np.array([q.max_tokens for q in reqs], dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    return pd.DataFrame({
        "req_id": np.array([q.rid for q in reqs], dtype=np.int64), "arrival_s": arrival, "admitted_s": admitted,
        "first_token_s": first, "finish_s": finish, "input_tokens": np.array([len(q.prompt) for q in reqs]),
        "output_tokens": out, "queue_s": admitted - arrival, "ttft_s": first - arrival, "tpot_s": tpot,
        "e2e_s": finish - arrival, "num_preemptions": np.array([preempted.get(q.id, 0) for q in reqs], dtype=np.int64),
        "prefix_cache_hit_tokens": np.array([hits.get(q.id, 0) for q in reqs], dtype=np.int64),
    })


def _gauges(r: StepRecord, cfg, bpt: int) -> np.ndarray:
    bs, used = cfg.block_size, r.blocks_in_use
    tokens = min(r.kv_tokens, used * bs)  # shared prefix blocks count once in `used`, per request in kv_tokens
    parts = {"token_states": tokens * bpt, "reserved": 0, "internal_frag": (used * bs - tokens) * bpt,
             "external_frag": 0, "free": (cfg.num_blocks - used) * bs * bpt}
    assert set(parts) == set(BREAKDOWN_FIELDS)
    return metrics.gauge_vector(len(r.scheduled), len(r.running_ids), len(r.waiting_ids), parts,
                                cfg.num_blocks * bs * bpt, used, cfg.num_blocks)


def run_vllm(trace, scenario, *, num_blocks: int, offline: bool = False, max_steps: int | None = None,
             scale: float = 1.0, max_requests: int | None = None,
             on_step: Callable[[StepRecord], None] | None = None) -> metrics.SimResult:
    """Replay `trace` on a real vLLM engine (wall clock); a SimResult like the simulator's."""
    from sim.trace import all_at_once

    path, spec = model_dir(scenario.model, scenario.kv_heads)
    cfg = engine_config(scenario, num_blocks, scenario.max_model_len or spec.max_position_embeddings)
    if offline:
        trace = all_at_once(trace)
    reqs = engine_requests(trace, step_s=1.0, vocab=spec.vocab_size, max_model_len=cfg.max_model_len, scale=scale,
                           max_requests=max_requests, seed=scenario.seed)
    t0 = time.perf_counter()
    got = run_worker(path, cfg, reqs, clock="wall", max_steps=max_steps, on_step=on_step)
    start_s = time.perf_counter() - t0 - got.wall_s  # engine start-up (model build), outside the run
    bpt = spec.kv_bytes_per_token(KV_DTYPE)
    horizon = max(float(trace.df["arrival_s"].max()) if len(trace.df) else 0.0, got.steps[-1].t_end_s if got.steps else 0.0)
    rec = metrics.StepRecorder(horizon)
    for r in got.steps:
        log_tokens = sum(n for _, n in r.scheduled)
        rec.add_counts(r.t_end_s, 1, log_tokens - r.decode_tokens, r.decode_tokens, len(r.preempted))
        rec.sample_until(r.t_end_s, _gauges(r, cfg, bpt))
    end = got.steps[-1].t_end_s if got.steps else 0.0
    if got.steps:
        rec.finish(end, _gauges(got.steps[-1], cfg, bpt))
    requests = _requests_frame(reqs, got.requests, got.steps)
    log = step_log(got.steps)
    steps = rec.frame()
    queries = sum(len(q.prompt) for q in reqs) if cfg.prefix_caching else 0
    # the verdicts the simulator's summary carries, read from the measured frames the same way
    verdicts = verdict.load_summary(requests["arrival_s"].to_numpy(), requests["admitted_s"].to_numpy(),
                                    finish_s=requests["finish_s"].to_numpy())
    verdicts["binding"] = verdict.binding_of(steps, max_num_seqs=cfg.max_num_seqs,
                                             max_batched_tokens=cfg.max_num_batched_tokens).binding
    summary = metrics.summarize(
        requests, rec, peak_usage=(int(log["blocks_in_use"].max()) if len(log) else 0) / cfg.num_blocks,
        num_preemptions=int(log["num_preemptions"].sum()), prefix_queries=queries,
        prefix_hits=int(log["prefix_hit_tokens"].sum()) if cfg.prefix_caching else 0, sim_wall_s=got.wall_s,
        rejected=0, rejected_reasons={}, clamped=0, unfinished=int(requests["finish_s"].isna().sum()),
        longest_prompt_tokens=max((len(q.prompt) for q in reqs), default=0),
        model_context_tokens=spec.max_position_embeddings, **verdicts,
        kv_group_breakdown_mean={},  # one full-attention group: the worker refuses other layouts, as the simulator reports it
        kv_capacity_bytes=cfg.num_blocks * cfg.block_size * bpt, num_blocks=cfg.num_blocks,
        block_size=cfg.block_size, bytes_per_token=bpt, replicas=1, routing="single",
        max_model_len=cfg.max_model_len, kv_budget_terms=None, num_steps=len(got.steps), sim_events=len(got.steps),
        cost_model="measured", engine="vllm", vllm_version=got.vllm_version, device="cpu", model_dtype="fp32",
        kv_dtype=KV_DTYPE, offline=offline, measured_by="vLLM", engine_start_s=start_s,
        # what the engine resolved (its hello; vLLM on CPU turns it off), and the tokens a window counts
        async_scheduling=bool(got.async_scheduling),
        max_in_flight_tokens=max_in_flight_tokens(cfg.max_num_batched_tokens, bool(got.async_scheduling)),
        # what vLLM's pool really had (the worker's override; vLLM adds its null block), not a prediction
        num_gpu_blocks=cfg.num_blocks + 1, vllm_memory={"skipped": "measured: the pool was set by num_gpu_blocks_override"},
        intervals=None, interval_method=None)  # a measurement carries no prediction interval
    # The scenario the run served, with the pool it had (so the simulator beside it gets N blocks too).
    pool = (cfg.num_blocks + 0.5) * cfg.block_size * bpt / 2**30
    served = scenario.with_kv_budget(pool, kv_dtype=KV_DTYPE, block_size=cfg.block_size)
    result = metrics.SimResult(requests, steps, summary, served, trace.digest())
    result.extra["step_log"] = log
    return result

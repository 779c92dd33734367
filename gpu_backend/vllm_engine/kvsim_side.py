"""The same requests through kvsim's own policy core (sim.core Scheduler + PagedAllocator), step by step.

No fork and no model: the very objects the simulator and the GPU backend use, configured as the
vLLM worker's engine is, fed the same arrivals per step, and read out into the same StepRecord.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpu_backend.vllm_engine.protocol import EngineConfig, EngineRequest, StepRecord
from gpu_backend.vllm_engine.trace_requests import block_content_ids
from models.kv_groups import async_scheduling_on, max_in_flight_tokens
from sim.core.kv.base import KVAllocator
from sim.core.kv.paged import PagedAllocator
from sim.core.kv.registry import KVLayout
from sim.core.request import RequestTable
from sim.core.scheduler import Scheduler, SchedulerConfig


def in_flight_tokens(cfg: EngineConfig) -> int:
    """vLLM's max_in_flight_tokens for the worker's engine: cfg.async_scheduling as vLLM's CPU
    platform resolves it (off whatever is asked, models/kv_groups.py `async_scheduling_on`), so
    one batch is in flight."""
    return max_in_flight_tokens(cfg.max_num_batched_tokens, async_scheduling_on(cfg.async_scheduling, platform="cpu"))


def group_layout(cfg: EngineConfig, kv_dtype: str = "fp32") -> KVLayout:
    """The per-group pool's layout (sim.core.kv.registry.make_group_allocator) of the worker's
    engine `cfg`: its block size, prefix caching, retention interval, and the admission caps vLLM
    sets from its max_in_flight_tokens and max_model_len."""
    return KVLayout(block_size=cfg.block_size, prefix_caching=cfg.prefix_caching, kv_dtype=kv_dtype,
                    retention_interval=cfg.prefix_cache_retention_interval, in_flight_tokens=in_flight_tokens(cfg),
                    max_model_len=cfg.max_model_len)


def build_kvsim(reqs: list[EngineRequest], cfg: EngineConfig, sched_cfg: SchedulerConfig | None = None,
                alloc: KVAllocator | None = None) -> tuple[Scheduler, RequestTable]:
    """kvsim's scheduler and paged allocator configured like the vLLM engine of `cfg` (`alloc`: a
    pool built by the caller instead, e.g. the per-group pool of a model with several KV groups,
    keyed per KV block of cfg.block_size)."""
    table = RequestTable.create(np.array([r.arrival_step for r in reqs], dtype=np.float64),
                                np.array([len(r.prompt) for r in reqs]), np.array([r.max_tokens for r in reqs]))
    if alloc is None:
        alloc = PagedAllocator(cfg.num_blocks, cfg.block_size, 1, prefix_caching=cfg.prefix_caching,
                               prefix_block_size=cfg.block_size)
    hashes: Callable[[int], list[int]] | None = None
    if cfg.prefix_caching:
        keys = [block_content_ids(r, cfg.block_size) for r in reqs]
        hashes = keys.__getitem__
    sched_cfg = sched_cfg or SchedulerConfig(max_num_seqs=cfg.max_num_seqs,
                                             max_batched_tokens=cfg.max_num_batched_tokens,
                                             chunked_prefill=cfg.chunked_prefill, preemption="recompute")
    return Scheduler(table, alloc, sched_cfg, hashes), table


def replay_kvsim(reqs: list[EngineRequest], cfg: EngineConfig, *, sched_cfg: SchedulerConfig | None = None,
                 max_steps: int | None = None, alloc: KVAllocator | None = None) -> list[StepRecord]:
    """Step records of kvsim on `reqs`, with arrivals replayed as steps exactly as the worker does."""
    sched, table = build_kvsim(reqs, cfg, sched_cfg, alloc)
    name = [r.id for r in reqs]
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].arrival_step)
    records: list[StepRecord] = []
    step, i = 0, 0
    while i < len(order) or sched.has_work:
        if max_steps is not None and step >= max_steps:
            break
        while i < len(order) and reqs[order[i]].arrival_step <= step:
            sched.add_request(order[i])
            i += 1
        if not sched.has_work:
            step = reqs[order[i]].arrival_step
            continue
        waiting_before = set(sched.waiting)
        plan = sched.schedule(float(step))
        if plan is None and not sched.running and i == len(order):
            raise ValueError(f"kvsim cannot schedule request {name[sched.waiting[0]]} at step {step}: it can never fit")
        scheduled: list[tuple[str, int]] = []
        admitted: list[tuple[str, int]] = []
        preempted: list[str] = []
        if plan is not None:
            scheduled = [(name[r], 1) for r in plan.decode_ids.tolist()]
            for r, hit, n in zip(plan.prefill_ids, plan.prefill_context, plan.prefill_tokens, strict=True):
                scheduled.append((name[r], n))
                if r in waiting_before:
                    admitted.append((name[r], hit))
            preempted = [name[r] for r in plan.preempted]
        rec = StepRecord(step=step, scheduled=sorted(scheduled), admitted=sorted(admitted), preempted=sorted(preempted),
                         finished=[], running_ids=[name[r] for r in sched.running],
                         waiting_ids=[name[r] for r in sched.waiting], blocks_in_use=sched.alloc.num_used_blocks,
                         kv_tokens=int(sum(int(table.computed[r]) for r in sched.running)) + sum(
                             n for _, n in scheduled))
        if plan is not None:
            rec.finished = sorted(name[r] for r in sched.complete_step(plan, float(step + 1)))
        records.append(rec)
        step += 1
    return records

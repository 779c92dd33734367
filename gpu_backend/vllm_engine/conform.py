"""Step-exact conformance: the same requests through vLLM V1 and kvsim's policy core, compared.

`conform(trace, scenario, ...)` builds one EngineConfig from the scenario (block size, KV blocks,
max_num_seqs, max_num_batched_tokens, chunked prefill, prefix caching; recompute preemption), turns
the trace into token-id requests with step arrivals (trace_requests.py), runs vLLM (client.py) and kvsim
(kvsim_side.py), and compares the step records field by field (protocol.COMPARED_FIELDS).
docs/CONFORMANCE.md says what matches and what kvsim deliberately does differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_backend.vllm_engine.client import run_worker
from gpu_backend.vllm_engine.cpu_rules import BLOCK_MULTIPLE
from gpu_backend.vllm_engine.kvsim_side import replay_kvsim
from gpu_backend.vllm_engine.protocol import COMPARED_FIELDS, EngineConfig, EngineRequest, StepRecord
from gpu_backend.vllm_engine.trace_requests import engine_requests
from sim.core.scheduler import SchedulerConfig


class ConformError(ValueError):
    """The scenario asks for something vLLM V1 cannot be configured to do (one line)."""


@dataclass
class ConformReport:
    steps: int
    steps_equal: int
    requests: int
    first_divergence: dict[str, Any] | None
    vllm_version: str
    engine: dict[str, Any]
    activity: dict[str, dict[str, int]]  # per engine: preemptions, prefix-cache hit tokens, admissions

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "steps_equal": self.steps_equal, "requests": self.requests,
                "first_divergence": self.first_divergence, "vllm_version": self.vllm_version, "engine": self.engine,
                "activity": self.activity}


def activity(records: list[StepRecord]) -> dict[str, int]:
    """What a run exercised: so a test can tell a preemption-heavy or prefix-sharing trace from a calm one."""
    return {"preemptions": sum(len(r.preempted) for r in records),
            "prefix_hit_tokens": sum(n for r in records for _, n in r.admitted),
            "admissions": sum(len(r.admitted) for r in records),
            "peak_blocks_in_use": max((r.blocks_in_use for r in records), default=0)}


def engine_config(scenario, num_blocks: int, max_model_len: int) -> EngineConfig:
    """The EngineConfig both engines get from a Scenario (ConformError for what vLLM cannot do)."""
    if scenario.allocator != "paged":
        raise ConformError("vLLM pages its KV cache: use --allocator paged")
    if scenario.preemption != "recompute":
        raise ConformError("vLLM V1 preempts by recompute only: use --preemption recompute")
    if scenario.static_batch:
        raise ConformError("vLLM batches continuously: drop --static-batch")
    if scenario.block_size % BLOCK_MULTIPLE:
        raise ConformError(f"vLLM on CPU needs a block size that is a multiple of {BLOCK_MULTIPLE} (--block-size {BLOCK_MULTIPLE}), "
                           f"got {scenario.block_size}")
    if num_blocks < 2:
        raise ConformError(f"vLLM needs at least 2 KV blocks, got {num_blocks}")
    max_len = min(max_model_len, num_blocks * scenario.block_size)  # vLLM refuses a longer one
    if not scenario.chunked_prefill:  # a whole prompt must fit one step's budget (vLLM requires it)
        max_len = min(max_len, scenario.max_batched_tokens)
    return EngineConfig(block_size=scenario.block_size, num_blocks=num_blocks, max_num_seqs=scenario.max_num_seqs,
                        max_num_batched_tokens=scenario.max_batched_tokens, chunked_prefill=scenario.chunked_prefill,
                        prefix_caching=scenario.prefix_caching, max_model_len=max_len, seed=scenario.seed,
                        prefix_cache_retention_interval=scenario.prefix_cache_retention_interval,
                        async_scheduling=scenario.async_scheduling)


def compare(vllm: list[StepRecord], kvsim: list[StepRecord]) -> tuple[int, dict[str, Any] | None]:
    """(steps equal before the first divergence, the first divergence or None)."""
    for k, (a, b) in enumerate(zip(vllm, kvsim, strict=False)):
        if a.step != b.step:
            return k, {"step": min(a.step, b.step), "field": "step", "vllm": a.step, "kvsim": b.step}
        for name in COMPARED_FIELDS:
            if a.value(name) != b.value(name):
                return k, {"step": a.step, "field": name, "vllm": a.value(name), "kvsim": b.value(name)}
    n = min(len(vllm), len(kvsim))
    if len(vllm) != len(kvsim):
        longer = vllm if len(vllm) > n else kvsim
        return n, {"step": longer[n].step, "field": "steps", "vllm": len(vllm), "kvsim": len(kvsim)}
    return n, None


def conform(trace, scenario, model_dir: str | Path, *, num_blocks: int, vocab: int, step_s: float = 0.05,
            scale: float = 1.0, max_requests: int | None = None, max_model_len: int = 4096,
            sched_cfg: SchedulerConfig | None = None, reqs: list[EngineRequest] | None = None) -> ConformReport:
    """Run both engines on the trace and compare them step by step."""
    cfg = engine_config(scenario, num_blocks, max_model_len)
    if reqs is None:
        reqs = engine_requests(trace, step_s=step_s, vocab=vocab, max_model_len=cfg.max_model_len, scale=scale,
                               max_requests=max_requests, seed=scenario.seed)
    if not reqs:
        raise ConformError("conform: the trace has no requests")
    ours = replay_kvsim(reqs, cfg, sched_cfg=sched_cfg)
    theirs = run_worker(model_dir, cfg, reqs, clock="steps")
    equal, div = compare(theirs.steps, ours)
    return ConformReport(steps=max(len(theirs.steps), len(ours)), steps_equal=equal, requests=len(reqs),
                         first_divergence=div, vllm_version=theirs.vllm_version, engine=cfg.to_dict(),
                         activity={"vllm": activity(theirs.steps), "kvsim": activity(ours)})

"""Run the shared Scheduler's steps through a real model over the paged KV pool, on a wall clock.

ModelRunner: one forward of a packed ragged batch (prefill chunks + decode tokens) with greedy
sampling of each request's next token. Executor: the serving loop (arrivals at trace times or all
at once offline -> Scheduler.schedule -> ModelRunner -> Scheduler.complete_step), recording the
simulator's frames. Output lengths are forced from the trace: the scheduler finishes a request
after its trace output count, whatever tokens the model samples (EOS is ignored).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch

from gpu_backend import telemetry
from gpu_backend.attention import default_impl, flex_failure, step_context
from gpu_backend.batch import SeqChunk, build_batch
from gpu_backend.memory import CudaMemory, DeviceMemory, measure_kv_budget
from gpu_backend.model_loader import LoadedModel, load_model
from gpu_backend.paged_cache import PagedKVCache
from sim.core import interfaces
from sim.core.step_types import StepPlan
from sim.trace import all_at_once


class ModelRunner:
    """Packs a step's chunks into one sequence, runs the model, samples greedily."""

    def __init__(self, loaded: LoadedModel, cache: PagedKVCache, impl: str | None = None) -> None:
        self.model, self.cache, self.impl = loaded.model, cache, impl or default_impl(loaded.device)
        self.device, self.heads = loaded.device, loaded.spec.num_attention_heads
        self.paths_used: Counter[str] = Counter()  # steps per attention path that really ran

    @torch.inference_mode()
    def logits(self, chunks: list[SeqChunk], tokens: list[list[int]]) -> torch.Tensor:
        """Last-position logits [len(chunks), vocab] (fp32); tokens[i] are chunk i's new token ids."""
        batch = build_batch(self.cache, chunks, self.impl, self.heads)
        ids: list[int] = []
        for c, tk in zip(chunks, tokens, strict=True):
            if len(tk) != c.num_new:
                raise ValueError(f"chunk of {c.num_new} tokens given {len(tk)} token ids")
            ids += tk
        dev = self.device
        last = torch.tensor(batch.query_start_loc[1:], device=dev) - 1
        with step_context(batch):
            out = self.model(input_ids=torch.tensor([ids], device=dev), position_ids=batch.token_pos.unsqueeze(0),
                             use_cache=False, logits_to_keep=last)
        self.paths_used.update(batch.used)
        return out.logits[0].float()

    @property
    def attention_label(self) -> str:
        """The path that ran most steps (what the numbers measure), not the one asked for."""
        return self.paths_used.most_common(1)[0][0] if self.paths_used else self.impl

    def greedy(self, chunks: list[SeqChunk], tokens: list[list[int]]) -> list[int]:
        return self.logits(chunks, tokens).argmax(-1).tolist()


# --- the serving loop -------------------------------------------------------------------------------

GiB = 1 << 30
CPU_DEFAULT_KV_BUDGET_GIB = 1 / 16  # 64 MiB: a tiny model's pool on CPU when no budget is given
MEMORY_COLUMNS = ("mem_allocated_bytes", "mem_reserved_bytes", "nvml_used_bytes")
STEP_LOG_COLUMNS = ("step", "t_start_s", "t_end_s", "batch_size", "prefill_tokens", "decode_tokens",
                    "num_preemptions", "blocks_in_use", *MEMORY_COLUMNS)


class ExecutorError(ValueError):
    """The run cannot start as asked (one-line message)."""


@dataclass
class RunConfig:
    """How the backend runs a scenario (the scenario says what is served and how it is scheduled)."""

    device: str = "cpu"
    dtype: str = "fp32"  # model compute dtype
    weights: str | None = None
    offline: bool = False  # all requests arrive at t=0 instead of at their trace times
    impl: str | None = None  # attention path: "sdpa" | "flex" | None (auto: sdpa)
    seed: int = 0
    max_steps: int | None = None
    warmup: bool = True  # one prefill and one decode step before the clock starts (kernels, allocator pools)


def prompt_tokens(r: int, n: int, vocab: int, seed: int) -> list[int]:
    """Random prompt ids of request r (deterministic; ids 0-2 left out: pad/bos/eos in most configs)."""
    rng = np.random.default_rng([seed, r])
    return rng.integers(3, max(vocab, 4), size=n).tolist()


def warmup_chunks(tokens: int, max_len: int, max_seqs: int, block_size: int) -> list[SeqChunk]:
    """The largest step the scheduler may form as prefill chunks no longer than the model's positions
    (OPT's learned positions stop at 2,048), on consecutive blocks."""
    n = max(1, min(max_seqs, -(-tokens // max_len)))
    per = [tokens // n + (i < tokens % n) for i in range(n)]
    blocks = [-(-p // block_size) for p in per]
    firsts = np.concatenate([[0], np.cumsum(blocks)[:-1]]).tolist()
    return [SeqChunk(list(range(f, f + b)), 0, p) for f, b, p in zip(firsts, blocks, per, strict=True) if p > 0]


def _largest_step(scenario, loaded: LoadedModel) -> list[SeqChunk]:
    max_len = min(loaded.spec.max_position_embeddings or scenario.max_batched_tokens,
                  scenario.max_model_len or scenario.max_batched_tokens)
    return warmup_chunks(scenario.max_batched_tokens, max_len, scenario.max_num_seqs, scenario.block_size)


def _kv_budget_scenario(scenario, cfg: RunConfig, loaded: LoadedModel, memory: DeviceMemory | None = None):
    """The scenario with an explicit KV budget: given; measured after a warm-up at the largest batch
    (on CUDA, or wherever a memory reader is passed); 64 MiB on CPU otherwise."""
    if scenario.kv_budget_gib is not None:
        return scenario, None
    if memory is None and loaded.device.type == "cuda":
        memory = CudaMemory(loaded.device)
    if memory is None:
        return scenario.with_kv_budget(CPU_DEFAULT_KV_BUDGET_GIB), None
    spec, chunks = loaded.spec, _largest_step(scenario, loaded)
    feed = [[3] * c.num_new for c in chunks]

    def warmup_forward() -> int:
        """The largest step through a scratch pool (freed on return); returns the scratch pool's bytes."""
        blocks = sum(len(c.block_table) for c in chunks)
        tmp = PagedKVCache(spec.num_layers, blocks + 1, scenario.block_size, spec.num_kv_heads, spec.head_dim,
                           scenario.kv_dtype, loaded.dtype, loaded.device)
        ModelRunner(loaded, tmp, cfg.impl).logits(chunks, feed)
        return tmp.pool_bytes

    reading = measure_kv_budget(warmup_forward, scenario.gpu_mem_util, memory)
    if reading.kv_budget <= 0:
        raise ExecutorError(f"no device memory left for KV after the profiling pass ({reading.kv_budget / GiB:.2f} "
                            f"GiB: {reading.non_kv / GiB:.2f} GiB not KV of {reading.total / GiB:.2f} GiB)")
    return scenario.with_kv_budget(reading.kv_budget / GiB), reading


def unsupported_knobs(scenario) -> list[str]:
    """Scenario knobs the real engine does not carry out (a router, P/D, KV tiers, layer offload): set
    they would make the measured run differ silently from what the scenario says."""
    out = [f"pd={scenario.pd}"] if scenario.pd else []
    out += [f"{name}={getattr(scenario, name):g}" for name in ("cpu_tier_gib", "nvme_tier_gib", "remote_tier_gib",
                                                               "offload_layers") if getattr(scenario, name)]
    return out


class Executor(interfaces.Executor):
    """Drives sim.run.engine's own Setup (allocator + Scheduler built exactly as the simulator builds
    them) with a wall clock and a real model. `run()` returns a SimResult; `execute` runs one step
    (the simulator's counterpart: sim/run/modelled_step.py)."""

    def __init__(self, trace, scenario, cfg: RunConfig | None = None, loaded: LoadedModel | None = None,
                 progress=None, on_step=None, memory: DeviceMemory | None = None) -> None:
        from sim.run import engine

        self.cfg = cfg = cfg or RunConfig()
        if scenario.tp != 1 or scenario.replicas != 1:
            raise ExecutorError("the GPU backend runs one GPU: set tp=1 and replicas=1")
        simulated_only = unsupported_knobs(scenario)
        if simulated_only:
            raise ExecutorError(f"the GPU backend runs one engine with its KV on the GPU: {', '.join(simulated_only)} "
                                "are simulated only (sim run)")
        self.loaded = loaded or load_model(scenario.model, dtype=cfg.dtype, device=cfg.device, weights=cfg.weights,
                                           kv_heads=scenario.kv_heads, seed=cfg.seed)
        self.scenario, self.budget = _kv_budget_scenario(scenario, cfg, self.loaded, memory)
        if cfg.offline:
            trace = all_at_once(trace)
        self.trace, self.progress, self.on_step = trace, progress, on_step
        self.setup = engine.build(trace, self.scenario)
        self.sim = engine.Simulation(self.setup, progress=progress)  # its recorder, gauges, progress
        self.rep = self.setup.replicas[0]
        spec = self.loaded.spec
        # The allocator's blocks plus the padding block (pool block 0), which is outside the budget.
        self.cache = PagedKVCache(spec.num_layers, self.setup.num_blocks + 1, self.scenario.block_size,
                                  spec.num_kv_heads, spec.head_dim, self.scenario.kv_dtype, self.loaded.dtype,
                                  self.loaded.device)
        self.runner = ModelRunner(self.loaded, self.cache, cfg.impl)
        self.tokens: dict[int, list[int]] = {}
        self.swap_store: dict[int, list[torch.Tensor]] = {}
        self.last_tables: dict[int, list[int]] = {}
        self.step_log: list[tuple] = []
        self.warmup_s = 0.0
        self._t0 = time.perf_counter()  # the run's clock starts at zero here (run() resets it)

    def warm_up(self) -> None:
        """A prefill and a decode step through the real pool before the clock starts, so the first
        measured steps pay no one-off costs (kernel selection, allocator growth, compilation). The
        blocks written are unallocated and are overwritten before anyone reads them; the fp8 scales
        calibrate again on the first real write."""
        t0 = time.perf_counter()
        positions = self.loaded.spec.max_position_embeddings or 256
        n = min(16 * self.scenario.block_size, self.scenario.max_batched_tokens, positions - 1,
                self.cache.usable_blocks * self.scenario.block_size - 1)  # then one decode token at position n
        table = list(range(-(-(n + 1) // self.scenario.block_size)))
        self.runner.greedy([SeqChunk(table, 0, n)], [[3] * n])
        self.runner.greedy([SeqChunk(table, n, 1)], [[3]])
        if self.loaded.device.type == "cuda":
            torch.cuda.synchronize(self.loaded.device)
        self.cache.fp8_calibrated = [False] * len(self.cache.fp8_calibrated)
        self.runner.paths_used.clear()
        self.warmup_s = time.perf_counter() - t0

    # --- per-step pieces -----------------------------------------------------------------------
    def _ids(self, r: int, start: int, n: int) -> list[int]:
        tk = self.tokens.get(r)
        if tk is None:
            tk = self.tokens[r] = prompt_tokens(r, int(self.setup.table.prompt[r]), self.loaded.spec.vocab_size,
                                                self.cfg.seed)
        if len(tk) < start + n:  # static batching pads prompts: pad ids past the request's own tokens
            tk += [0] * (start + n - len(tk))
        return tk[start:start + n]

    def _memory(self) -> tuple[float, float, float]:
        s = telemetry.read_now(self.loaded.device.index or 0) if self.loaded.device.type == "cuda" else None
        if s is None:
            return (math.nan, math.nan, math.nan)
        return (s.torch_allocated_bytes, s.torch_reserved_bytes, s.nvml_used_bytes)

    def execute(self, plan: StepPlan, t_start: float) -> float:
        """Move the plan's K/V, run its forward on the model and wait for the device; the wall-clock
        second (since the run began) at which the step ended. The clock runs by itself, so t_start
        (the time the loop read before scheduling) only tells where the step began."""
        self._move_kv(plan)
        self._forward(plan)
        if self.loaded.device.type == "cuda":
            torch.cuda.synchronize(self.loaded.device)
        return time.perf_counter() - self._t0

    def _move_kv(self, plan: StepPlan) -> None:
        """Swap out preempted requests' blocks before anyone overwrites them; swap in resumed requests."""
        alloc, t = self.rep.alloc, self.setup.table
        from sim.core.request import SWAPPED

        for r in plan.preempted:
            if t.status[r] == SWAPPED and r in self.last_tables:
                self.swap_store[r] = self.cache.read_blocks(self.last_tables[r])
        for r in plan.decode_ids.tolist():
            saved = self.swap_store.pop(r, None)
            if saved is not None:
                table = alloc.block_table(r)[: saved[0].shape[1]]
                self.cache.write_blocks(table, saved)

    def _forward(self, plan: StepPlan) -> None:
        alloc = self.rep.alloc
        chunks, feed, rows = [], [], []
        for r, c in zip(plan.decode_ids.tolist(), plan.decode_context.tolist(), strict=True):
            chunks.append(SeqChunk(alloc.block_table(r), c, 1))
            feed.append(self._ids(r, c, 1))
            rows.append(r)
        for r, c, n in zip(plan.prefill_ids, plan.prefill_context, plan.prefill_tokens, strict=True):
            chunks.append(SeqChunk(alloc.block_table(r), c, n))
            feed.append(self._ids(r, c, n))
            rows.append(r)
        if not chunks:
            return
        samples = self.runner.greedy(chunks, feed)
        for r, ch, tok in zip(rows, chunks, samples, strict=True):
            if ch.context_len == len(self.tokens[r]):  # the whole known sequence is in K/V: keep the sample
                self.tokens[r].append(tok)
        if self.scenario.preemption == "swap":
            self.last_tables = {r: alloc.block_table(r) for r in rows}

    # --- the loop: the simulator's step API on a wall clock ------------------------------------
    def run(self):
        sim, rep, sched = self.sim, self.rep, self.rep.sched
        if self.cfg.warmup:
            self.warm_up()
        t0 = self._t0 = time.perf_counter()
        steps = 0
        while self.cfg.max_steps is None or steps < self.cfg.max_steps:
            now = time.perf_counter() - t0
            sim.admit_arrivals(rep, now)
            plan = sched.schedule(now) if sched.has_work else None
            if plan is None:
                t_next = sim.next_arrival(rep)
                if t_next is None:
                    break
                time.sleep(max(t_next - (time.perf_counter() - t0), 0.0))
                sim.record_idle(rep, time.perf_counter() - t0)
                continue
            used = rep.alloc.num_used_blocks
            t_end = self.execute(plan, now)
            finished = sched.complete_step(plan, t_end)
            for r in finished:
                self.tokens.pop(r, None)
            sim.record_step(rep, plan, t_end, finished)
            steps += 1
            self.step_log.append((steps, now, t_end, plan.batch_size, plan.num_prefill_tokens,
                                  plan.num_decode_tokens, len(plan.preempted), used, *self._memory()))
            if self.on_step is not None:  # a named row: readers never depend on column order
                self.on_step(dict(zip(STEP_LOG_COLUMNS, self.step_log[-1], strict=True)))
        end = time.perf_counter() - t0
        sim.close(end)
        return self._result(end)

    def _result(self, wall: float):
        log = pd.DataFrame(self.step_log, columns=list(STEP_LOG_COLUMNS))
        s = self.scenario
        result = self.sim.result(
            self.trace.digest(), wall, routing="single", kv_budget_terms=None, sim_events=len(log),
            cost_model={"source": "measured", "detail": "this GPU's own steps (gpu_backend)"}, kv_pool_bytes=self.cache.pool_bytes, pool_num_blocks=self.cache.num_blocks,
            device=str(self.loaded.device), model_dtype=self.cfg.dtype, kv_dtype=s.kv_dtype,
            attention=self.runner.attention_label, attention_requested=self.runner.impl,
            attention_steps=dict(self.runner.paths_used), attention_fallback=flex_failure(),
            warmup_s=self.warmup_s, offline=self.cfg.offline, kv_budget_gib=s.kv_budget_gib,
            kv_budget_measured=None if self.budget is None else asdict(self.budget),
            peak_mem_allocated_bytes=_nanmax(log, "mem_allocated_bytes"),
            peak_mem_reserved_bytes=_nanmax(log, "mem_reserved_bytes"),
            peak_nvml_used_bytes=_nanmax(log, "nvml_used_bytes"),
        )
        # Measured memory per bucket: mean over the steps that ended in it (NaN where none did or no GPU).
        steps = result.steps
        if len(log):
            bucket = np.minimum((log["t_end_s"] // self.sim.rec.width).astype(int), len(steps) - 1)
            means = log.groupby(bucket)[list(MEMORY_COLUMNS)].mean()
            for col in MEMORY_COLUMNS:
                steps[col] = means[col].reindex(range(len(steps))).to_numpy()
        else:
            for col in MEMORY_COLUMNS:
                steps[col] = np.nan
        result.extra["step_log"] = log
        return result


def _nanmax(log: pd.DataFrame, col: str) -> float | None:
    v = log[col].to_numpy(dtype=float) if len(log) else np.zeros(0)
    v = v[np.isfinite(v)]
    return float(v.max()) if v.size else None


def run(trace, scenario, cfg: RunConfig | None = None, **kwargs):
    """Replay `trace` under `scenario` on a real model; returns a SimResult (docs/GPU_BACKEND.md)."""
    return Executor(trace, scenario, cfg, **kwargs).run()

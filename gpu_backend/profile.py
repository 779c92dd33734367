"""Calibration: time a grid of prefill and decode steps on this device and fit the cost model.

Each grid point is one real forward over the paged pool, described by the same three step
arguments the simulator's cost model uses (sim.timing.cost_model: new_tokens, kv_read_tokens,
attn_pairs, exactly as StepPlan.cost_args counts them). sim.timing.cost_model.fit_profile fits the linear
step model to the timings and the profile JSON it returns is what `python -m sim run --profile`
reads (docs/CALIBRATION.md). Decode contexts are not prefilled first: step time does not depend on
the K/V values, only on how many are read.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpu_backend.attention import SeqChunk, default_impl
from gpu_backend.executor import ModelRunner
from gpu_backend.model_loader import LoadedModel, load_model
from gpu_backend.paged_cache import PagedKVCache


@dataclass(frozen=True)
class Grid:
    """Step shapes to time: prefill (batch, prompt length) and decode (batch, context per sequence)."""

    prefill: tuple[tuple[int, int], ...]
    decode: tuple[tuple[int, int], ...]


GRIDS = {
    # GPU-sized: up to 8k-token prefills and batch-128 decode over 4k contexts.
    "default": Grid(prefill=tuple((b, n) for b in (1, 4) for n in (128, 512, 2048)) + ((1, 8192),),
                    decode=tuple((b, c) for b in (1, 8, 32, 64, 128) for c in (256, 1024, 4096))),
    # CPU / smoke: tiny shapes, seconds in total.
    "small": Grid(prefill=((1, 16), (1, 64), (2, 32), (4, 16)),
                  decode=((1, 32), (4, 32), (8, 64), (2, 128), (16, 16))),
}


def step_args_prefill(batch: int, length: int) -> tuple[int, int, int]:
    return batch * length, 0, batch * length * (length + 1) // 2


def step_args_decode(batch: int, context: int) -> tuple[int, int, int]:
    return batch, batch * context, batch * context


def _time(fn, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(loaded: LoadedModel, grid: Grid, *, kv_dtype: str = "bf16", block_size: int = 16,
            repeats: int = 5, impl: str | None = None) -> list[tuple[int, int, int, float]]:
    """Rows (new_tokens, kv_read_tokens, attn_pairs, seconds), one per grid point."""
    spec, dev = loaded.spec, loaded.device
    most = max([b * n for b, n in grid.prefill] + [b * (c + 1) for b, c in grid.decode])
    per_seq = max([n for _, n in grid.prefill] + [c + 1 for _, c in grid.decode])
    blocks_per_seq = -(-per_seq // block_size)
    max_batch = max(b for b, _ in grid.prefill + grid.decode)
    num_blocks = max(-(-most // block_size) + max_batch, blocks_per_seq * max_batch) + 1
    cache = PagedKVCache(spec.num_layers, num_blocks, block_size, spec.num_kv_heads, spec.head_dim, kv_dtype,
                         loaded.dtype, dev)
    runner = ModelRunner(loaded, cache, impl)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)

    def tables(b: int) -> list[list[int]]:
        return [list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq)) for i in range(b)]

    points = []  # (step args, chunks, token ids)
    for b, n in grid.prefill:
        points.append((step_args_prefill(b, n), [SeqChunk(t, 0, n) for t in tables(b)],
                       [[3 + (i % 200) for i in range(n)]] * b))
    for b, c in grid.decode:
        points.append((step_args_decode(b, c), [SeqChunk(t, c, 1) for t in tables(b)], [[5]] * b))
    for _ in range(2):  # warm-up over every shape first (allocator pools, kernel selection, caches)
        for _args, chunks, feed in points:
            runner.logits(chunks, feed)
    sync()
    return [(*args, _time(lambda c=chunks, f=feed: runner.logits(c, f), repeats, sync))
            for args, chunks, feed in points]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def profile(model: str, *, device: str = "cpu", dtype: str = "bf16", kv_dtype: str = "bf16", block_size: int = 16,
            grid: str = "default", repeats: int = 5, weights: str | None = None, impl: str | None = None,
            out: str | Path | None = None, loaded: LoadedModel | None = None) -> dict[str, Any]:
    """Measure, fit (sim.timing.cost_model.fit_profile) and optionally save a calibration profile."""
    from sim.timing.cost_model import fit_profile, save_profile

    if grid not in GRIDS:
        raise ValueError(f"grid {grid!r}: choose one of {', '.join(GRIDS)}")
    loaded = loaded or load_model(model, dtype=dtype, device=device, weights=weights)
    rows = measure(loaded, GRIDS[grid], kv_dtype=kv_dtype, block_size=block_size, repeats=repeats, impl=impl)
    prof = fit_profile(rows, model=model, device=device_name(loaded.device), tp=1, kv_dtype=kv_dtype,
                       weight_dtype=dtype, block_size=block_size, grid=grid,
                       attention=impl or default_impl(loaded.device), torch_version=torch.__version__,
                       samples_raw=[list(r) for r in rows])
    if out is not None:
        save_profile(prof, out)
    return prof

"""Trace transforms. Each returns a NEW Trace (arrivals re-zeroed) and appends what it did to
`trace.history`, so a result can always say which workload produced it."""

from __future__ import annotations

import math

import numpy as np

from sim.trace.model import Trace, TraceError


def speedup(trace: Trace, k: float) -> Trace:
    """Replay k times faster (k > 1) or slower (k < 1): every arrival time is divided by k."""
    if not (k > 0 and math.isfinite(k)):
        raise TraceError(f"{trace.source}: speedup factor must be > 0, got {k}")
    df = trace.df.copy()
    df["arrival_s"] = df["arrival_s"] / k
    return trace.with_df(df, f"speedup x{k:g}")


def all_at_once(trace: Trace) -> Trace:
    """Offline replay: every request arrives at t=0 (throughput runs, like a batch benchmark)."""
    df = trace.df.copy()
    df["arrival_s"] = 0.0
    return trace.with_df(df, "all at once (offline)")


def subsample(trace: Trace, fraction: float | None = None, *, n: int | None = None, seed: int = 0) -> Trace:
    """Keep a seeded random subset (a fraction of rows, or exactly n), in arrival order."""
    rows = len(trace)
    if (fraction is None) == (n is None):
        raise TraceError(f"{trace.source}: subsample takes either a fraction or n, not both/neither")
    if fraction is not None:
        if not 0 < fraction <= 1:
            raise TraceError(f"{trace.source}: subsample fraction must be in (0, 1], got {fraction}")
        n = max(1, round(rows * fraction))
    assert n is not None
    if not 1 <= n <= rows:
        raise TraceError(f"{trace.source}: subsample n must be between 1 and {rows}, got {n}")
    keep = np.sort(np.random.default_rng(seed).choice(rows, size=n, replace=False))
    step = f"subsample {n} of {rows} rows (seed {seed})"
    return trace.with_df(trace.df.iloc[keep].copy(), step)


def clamp_context(trace: Trace, max_tokens: int, *, mode: str = "truncate") -> Trace:
    """Make every request fit input + output <= max_tokens.

    mode "truncate": cut the INPUT first (down to 1 token) because the output length is what the
    decode phase and its KV growth depend on; only if output alone is too long is it cut to
    max_tokens - 1. Prefix hashes are cut to the blocks the shorter prompt still covers.
    mode "drop": remove the requests that do not fit.
    """
    if max_tokens < 2:
        raise TraceError(f"{trace.source}: clamp_context needs max_tokens >= 2, got {max_tokens}")
    df = trace.df.copy()
    inp, out = df["input_tokens"].to_numpy(), df["output_tokens"].to_numpy()
    over = inp + out > max_tokens
    count = int(over.sum())
    if mode == "drop":
        return trace.with_df(df[~over], f"clamp_context {max_tokens} (dropped {count} requests)")
    if mode != "truncate":
        raise TraceError(f"{trace.source}: clamp_context mode must be 'truncate' or 'drop', got {mode!r}")
    new_out = np.minimum(out, max_tokens - 1)
    new_in = np.where(over, np.maximum(max_tokens - new_out, 1), inp)
    df["input_tokens"], df["output_tokens"] = new_in.astype(np.int64), new_out.astype(np.int64)
    if trace.has_prefix_hashes and count:
        block = trace.prefix_block_size or 1
        keep = -(-new_in // block)
        df["prefix_hashes"] = [h[:k] for h, k in zip(df["prefix_hashes"].tolist(), keep.tolist(), strict=True)]
    cut_out = int((new_out < out).sum())
    return trace.with_df(df, f"clamp_context {max_tokens} (truncated {count} requests, {cut_out} of them in output)")


def window(trace: Trace, start_s: float, end_s: float | None = None) -> Trace:
    """Keep requests arriving in [start_s, end_s) (seconds on the current clock), re-zeroed."""
    end = math.inf if end_s is None else end_s
    if not (start_s >= 0 and end > start_s):
        raise TraceError(f"{trace.source}: window needs 0 <= start < end, got [{start_s}, {end_s})")
    arrival = trace.df["arrival_s"].to_numpy()
    keep = (arrival >= start_s) & (arrival < end)
    if not keep.any():
        raise TraceError(f"{trace.source}: window [{start_s}, {end_s}) s holds no requests (trace is {trace.duration_s:.1f} s)")
    return trace.with_df(trace.df[keep].copy(), f"window [{start_s:g}, {end:g}) s")

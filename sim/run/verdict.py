"""Verdicts on one run, read from its metrics frames: what binds it (`binding`) and whether it kept
up with its arrivals (`overloaded`, below the binding code).

"What binds" answers "why not more load?": while requests wait, which limit kept the scheduler
from admitting them. Read per time bucket of the steps frame (docs/METRICS.md), over the buckets in
which requests were waiting:
- "kv": the KV pool was full (used = capacity - free >= POOL_FULL of it) or requests were preempted;
- "max_num_seqs": the running batch was at max_num_seqs (summed over replicas);
- "token_budget": the steps used >= BUDGET_FULL of max_batched_tokens on average;
- "compute": requests waited with none of those at their limit (they waited for the step in
  progress to end), or nobody ever waited: latency is step time.
The limit at its cap for the largest share of the waiting time wins, if that share is at least
MIN_SHARE; otherwise "compute". Preemptions anywhere in the run count as "kv" when nobody waited.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from sim.run.metrics import SimResult

BINDINGS = ("kv", "compute", "token_budget", "max_num_seqs")
WAITING = 0.5  # time-weighted mean waiting requests in a bucket that counts as "a queue"
POOL_FULL = 0.9
SEQS_FULL = 0.95
BUDGET_FULL = 0.9
MIN_SHARE = 0.25


@dataclass(frozen=True)
class Binding:
    """What binds a run, with the evidence: each limit's share of the time requests waited."""

    binding: str
    waiting_s: float  # simulated seconds in buckets with a queue
    shares: dict[str, float]  # limit -> fraction of waiting_s it was at its cap


def binding_of(steps: pd.DataFrame, *, max_num_seqs: int, max_batched_tokens: int, replicas: int = 1) -> Binding:
    """The binding limit from a steps frame and the scheduler limits of the run (see module doc)."""
    if steps.empty:
        return Binding("compute", 0.0, {})
    queued = steps["num_waiting"].to_numpy() >= WAITING
    width = steps["duration_s"].to_numpy()
    waiting_s = float(width[queued].sum())
    preempted = steps["num_preemptions"].to_numpy() > 0
    if waiting_s <= 0:
        return Binding("kv" if preempted.any() else "compute", 0.0, {})
    cap = steps["capacity_bytes"].to_numpy()
    used = np.where(cap > 0, (cap - steps["free_bytes"].to_numpy()) / np.maximum(cap, 1), 0.0)
    steps_n = np.maximum(steps["num_steps"].to_numpy(), 1)
    per_step = (steps["prefill_tokens"].to_numpy() + steps["decode_tokens"].to_numpy()) / steps_n
    at_cap = {
        "kv": (used >= POOL_FULL) | preempted,
        "max_num_seqs": steps["num_running"].to_numpy() >= SEQS_FULL * max_num_seqs * replicas,
        "token_budget": per_step >= BUDGET_FULL * max_batched_tokens,
    }
    shares = {name: float(width[queued & mask].sum()) / waiting_s for name, mask in at_cap.items()}
    top = max(shares, key=lambda k: shares[k])
    return Binding(top if shares[top] >= MIN_SHARE else "compute", waiting_s, shares)


def binding(result: SimResult) -> str:
    """What binds a SimResult: "kv" | "compute" | "token_budget" | "max_num_seqs"."""
    return binding_detail(result).binding


def binding_detail(result: SimResult) -> Binding:
    sc = result.scenario
    return binding_of(result.steps, max_num_seqs=sc.max_num_seqs, max_batched_tokens=sc.max_batched_tokens,
                      replicas=sc.replicas)


# ----- overloaded: is the queue still growing when arrivals stop? ------------------------------
# `overloaded(...)`: could this configuration keep up with the trace's arrivals? Over the second
# half of the arrival window (first half skipped: the pipeline is still filling), count requests
# that arrived and requests the engine started (first admission). The waiting queue grows by
# exactly their difference. The run is overloaded when that growth is more than OVERLOAD_MARGIN of
# the arrivals (arrival rate above 1 / (1 - margin) = 1.25x the rate requests are taken in) and at
# least MIN_QUEUE_GROWTH requests: the queue is still growing when arrivals stop, and every later
# request waits longer than the one before. Admissions, not finishes: on a trace shorter than a
# request's decode time few requests finish inside the window even when none waits.
#
# Rejected requests never enter the queue, so they count neither as arrivals nor as served.

OVERLOAD_MARGIN = 0.20  # backlog growth as a share of the window's arrivals
MIN_QUEUE_GROWTH = 10  # requests: below this, edge effects of a short trace, not overload


@dataclass(frozen=True)
class Load:
    """Arrivals against service over the second half of the arrival window (summary key `load`)."""

    window_start_s: float
    window_end_s: float
    arrivals: int  # requests arriving in the window (rejected ones excluded)
    started: int  # requests the engine first admitted in the window
    arrival_rate_rps: float | None  # None for an offline replay (every request at one instant)
    started_rate_rps: float | None
    waiting_at_end: int  # arrived by the last arrival and not yet started then

    @property
    def growth(self) -> int:
        return self.arrivals - self.started

    @property
    def overloaded(self) -> bool:
        return self.growth >= MIN_QUEUE_GROWTH and self.growth > OVERLOAD_MARGIN * self.arrivals


def load(arrival_s: np.ndarray, admitted_s: np.ndarray, rejected: np.ndarray | None = None) -> Load:
    """The Load of one run: arrival and first-admission times in seconds (NaN = never started)."""
    arrival = np.asarray(arrival_s, dtype=float)
    admitted = np.asarray(admitted_s, dtype=float)
    if rejected is not None:
        keep = ~np.asarray(rejected, dtype=bool)
        arrival, admitted = arrival[keep], admitted[keep]
    if not arrival.size:
        return Load(0.0, 0.0, 0, 0, None, None, 0)
    first, last = float(arrival.min()), float(arrival.max())
    start = (first + last) / 2
    started_by_end = np.isfinite(admitted) & (admitted <= last)
    waiting = int(arrival.size - started_by_end.sum())
    if last <= first:  # offline replay: no arrival process to keep up with
        return Load(first, last, 0, 0, None, None, waiting)
    arrivals = int(((arrival > start) & (arrival <= last)).sum())
    started = int((started_by_end & (admitted > start)).sum())
    span = last - start
    return Load(start, last, arrivals, started, arrivals / span, started / span, waiting)


def overloaded(arrival_s: np.ndarray, admitted_s: np.ndarray, rejected: np.ndarray | None = None) -> bool:
    """True when the queue is still growing as arrivals stop (see the module docstring)."""
    return load(arrival_s, admitted_s, rejected).overloaded


def load_summary(arrival_s: np.ndarray, admitted_s: np.ndarray, rejected: np.ndarray | None = None) -> dict[str, Any]:
    """Summary keys `overloaded` and `load` (docs/METRICS.md)."""
    result = load(arrival_s, admitted_s, rejected)
    return {"overloaded": result.overloaded, "load": asdict(result)}

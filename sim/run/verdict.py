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


# ----- overloaded: what users feel --------------------------------------------------------------
# `overloaded(...)`: could this configuration keep up with the trace's arrivals? A run is overloaded
# when any of three things holds (`Load.reasons`), each a thing its users feel:
# - "queue": the median request waited in the queue (arrival to first admission) more than
#   QUEUE_SERVICE_RATIO x the mean service time (admission to last token) and more than MIN_QUEUE_S:
#   most users wait longer for a seat than for their answer;
# - "backlog": the requests still waiting at the last arrival take more than DRAIN_LIMIT_S to start
#   at the rate requests were being started (and are at least MIN_QUEUE_GROWTH);
# - "growing": over the second half of the arrival window (the first half fills the pipeline) more
#   requests arrived than started, by more than OVERLOAD_MARGIN of the arrivals and at least
#   MIN_QUEUE_GROWTH: the queue is still growing when arrivals stop.
# The trend alone once read a queue hours long as healthy on a trace whose rate falls in its second
# half (the Azure conversation trace: contiguous llama-3.1-70b TP4 at x0.7711, TTFT p50 1,228 s).
# Admissions, not finishes, count as served: on a trace shorter than a request's decode time few
# requests finish inside the window even when none waits. Rejected requests never enter the queue,
# so they count nowhere. An offline replay (every request at one instant) has no arrival process to
# keep up with and is never overloaded.

OVERLOAD_MARGIN = 0.20  # backlog growth as a share of the window's arrivals
MIN_QUEUE_GROWTH = 10  # requests: below this, edge effects of a short trace, not overload
QUEUE_SERVICE_RATIO = 2.0  # median queueing delay against the mean service time
MIN_QUEUE_S = 1.0  # a median wait below a second is not an overload, whatever the service time
DRAIN_LIMIT_S = 60.0  # a backlog that takes longer than this to start is one users feel


@dataclass(frozen=True)
class Load:
    """Arrivals against service (summary key `load`): the second half of the arrival window, and the
    queueing delay and backlog over the whole run."""

    window_start_s: float
    window_end_s: float
    arrivals: int  # requests arriving in the window (rejected ones excluded)
    started: int  # requests the engine first admitted in the window
    arrival_rate_rps: float | None  # None for an offline replay (every request at one instant)
    started_rate_rps: float | None
    waiting_at_end: int  # arrived by the last arrival and not yet started then
    queue_p50_s: float | None = None  # median arrival -> first admission (never admitted: infinite)
    service_mean_s: float | None = None  # mean first admission -> last token, finished requests
    drain_s: float | None = None  # waiting_at_end / started_rate_rps (inf when nothing started)

    @property
    def growth(self) -> int:
        return self.arrivals - self.started

    @property
    def reasons(self) -> tuple[str, ...]:
        """Which of "queue", "backlog", "growing" hold (module comment above); () = keeps up."""
        if self.arrival_rate_rps is None:
            return ()
        out = []
        q, svc = self.queue_p50_s, self.service_mean_s
        if q is not None and q > MIN_QUEUE_S and q > QUEUE_SERVICE_RATIO * (svc or 0.0):
            out.append("queue")
        if self.drain_s is not None and self.waiting_at_end >= MIN_QUEUE_GROWTH and self.drain_s > DRAIN_LIMIT_S:
            out.append("backlog")
        if self.growth >= MIN_QUEUE_GROWTH and self.growth > OVERLOAD_MARGIN * self.arrivals:
            out.append("growing")
        return tuple(out)

    @property
    def overloaded(self) -> bool:
        return bool(self.reasons)


def load(arrival_s: np.ndarray, admitted_s: np.ndarray, rejected: np.ndarray | None = None,
         finish_s: np.ndarray | None = None) -> Load:
    """The Load of one run: arrival, first-admission and finish times in seconds (NaN = never)."""
    arrival = np.asarray(arrival_s, dtype=float)
    admitted = np.asarray(admitted_s, dtype=float)
    finish = np.full(arrival.shape, np.nan) if finish_s is None else np.asarray(finish_s, dtype=float)
    if rejected is not None:
        keep = ~np.asarray(rejected, dtype=bool)
        arrival, admitted, finish = arrival[keep], admitted[keep], finish[keep]
    if not arrival.size:
        return Load(0.0, 0.0, 0, 0, None, None, 0)
    first, last = float(arrival.min()), float(arrival.max())
    start = (first + last) / 2
    started_by_end = np.isfinite(admitted) & (admitted <= last)
    waiting = int(arrival.size - started_by_end.sum())
    queue = np.where(np.isfinite(admitted), admitted - arrival, np.inf)
    served = np.isfinite(admitted) & np.isfinite(finish)
    service = float((finish[served] - admitted[served]).mean()) if served.any() else None
    if last <= first:  # offline replay: no arrival process to keep up with
        return Load(first, last, 0, 0, None, None, waiting, float(np.median(queue)), service)
    arrivals = int(((arrival > start) & (arrival <= last)).sum())
    started = int((started_by_end & (admitted > start)).sum())
    span = last - start
    started_rate = started / span
    drain = waiting / started_rate if started_rate > 0 else (np.inf if waiting else 0.0)
    return Load(start, last, arrivals, started, arrivals / span, started_rate, waiting,
                float(np.median(queue)), service, float(drain))


def overloaded(arrival_s: np.ndarray, admitted_s: np.ndarray, rejected: np.ndarray | None = None,
               finish_s: np.ndarray | None = None) -> bool:
    """True when users would feel the run falling behind (see the comment above `Load`)."""
    return load(arrival_s, admitted_s, rejected, finish_s).overloaded


def load_summary(arrival_s: np.ndarray, admitted_s: np.ndarray, rejected: np.ndarray | None = None,
                 finish_s: np.ndarray | None = None) -> dict[str, Any]:
    """Summary keys `overloaded` and `load` (docs/METRICS.md); `load.reasons` says which rule held."""
    result = load(arrival_s, admitted_s, rejected, finish_s)
    fields = {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in asdict(result).items()}
    return {"overloaded": result.overloaded, "load": {**fields, "reasons": list(result.reasons)}}  # JSON: no inf

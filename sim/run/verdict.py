"""Verdicts on one run, read from its metrics frames: what binds it (`binding`).

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

from dataclasses import dataclass

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

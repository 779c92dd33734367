"""Fleet summary keys (docs/METRICS.md "Fleet"): per replica what was routed there and how it ran,
and how evenly the router spread the work.

- `routing_imbalance`: max / mean requests routed per replica (1.0: perfectly even).
- per replica (`fleet.replicas[i]`): requests routed, prefix-cache hit rate (its scheduler's hit
  tokens / looked-up tokens, the definition of the top-level `prefix_cache_hit_rate`), KV usage
  (blocks in use / pool) mean and peak and queue length mean over the gauge samples, steps, and
  utilisation (share of the run's span it was not idle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.run.engine import Replica
    from sim.run.metrics import SimResult


class ReplicaSamples:
    """Per-replica gauges taken at the run's metrics samples (the heatmap rows of the fleet view)."""

    def __init__(self, n: int) -> None:
        self.t_s: list[float] = []
        self.kv_usage: list[list[float]] = [[] for _ in range(n)]
        self.queue: list[list[int]] = [[] for _ in range(n)]
        self.idle_s = [0.0] * n

    def add(self, t: float, replicas: list[Replica]) -> None:
        self.t_s.append(t)
        for rep in replicas:
            self.kv_usage[rep.index].append(rep.alloc.num_used_blocks / rep.alloc.num_blocks)
            self.queue[rep.index].append(rep.sched.num_waiting)


TIMELINE_POINTS = 240  # samples kept per replica for the fleet view's heatmaps


def timeline(samples: ReplicaSamples) -> dict[str, Any]:
    """Per-replica KV usage and queue at up to TIMELINE_POINTS of the run's gauge samples (every
    k-th sample: a heatmap, not a record of every sample)."""
    n = len(samples.t_s)
    stride = max(1, -(-n // TIMELINE_POINTS))
    pick = slice(0, n, stride)
    return {"t_s": [round(t, 6) for t in samples.t_s[pick]],
            "kv_usage": [[round(v, 4) for v in row[pick]] for row in samples.kv_usage],
            "queue": [row[pick] for row in samples.queue]}


def mean(xs: list[Any]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0


def routing_imbalance(routed: list[int]) -> float:
    mean = sum(routed) / len(routed) if routed else 0.0
    return max(routed) / mean if mean > 0 else 1.0


def fleet_summary(sim: Any, res: SimResult) -> dict[str, Any]:
    """The fleet keys of one finished FleetSimulation."""
    reps, samples = sim.s.replicas, sim.samples
    span = max((rep.t for rep in reps), default=0.0)
    routed = [slot.routed for slot in sim.slots]
    per = []
    for rep, slot in zip(reps, sim.slots, strict=True):
        q, h = rep.sched.prefix_queries, rep.sched.prefix_hits
        i = rep.index
        per.append({
            "replica": i, "routed": slot.routed, "steps": rep.steps,
            "prefix_cache_hit_rate": h / q if q else 0.0,
            "kv_usage_mean": mean(samples.kv_usage[i]), "kv_usage_peak": max(samples.kv_usage[i], default=0.0),
            "queue_mean": mean(samples.queue[i]),
            "utilisation": max(0.0, 1.0 - samples.idle_s[i] / span) if span > 0 else 0.0,
        })
    imbalance = routing_imbalance(routed)
    return {"routing_imbalance": imbalance,
            "fleet": {"router": sim.router_name, "pools": [{"role": "aggregated", "replicas": len(reps)}],
                      "replicas": per, "timeline": timeline(samples)}}

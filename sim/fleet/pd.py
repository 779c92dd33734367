"""Disaggregated prefill/decode (xPyD): a prefill pool computes each prompt, its KV crosses a link
to a decode pool that generates the output. Both pools run on one SimPy clock.

The handoff follows vLLM's P/D with the NIXL connector (vllm/distributed/kv_transfer):
1. a request is routed to a prefill replica (the scenario's router) and prefilled there as a
   request of one output token (the disaggregation proxy sends it with max_tokens=1); that token
   is not streamed to the client;
2. at the prefill's end the request goes to a decode replica (the scenario's `decode_router`, least
   outstanding requests by default: llm-d's and Dynamo's decode pick is load-based); the
   decode replica reserves blocks for the whole prompt before anything moves (a window group only
   its window: the computed_tokens of Allocator.allocate; if the pool cannot
   take them, the request waits there, FCFS: `pd_waited_for_blocks` counts them), then the KV moves
   (sim/core/remote_kv.py: vLLM's WAITING_FOR_REMOTE_KVS);
3. the prefill replica keeps the request's blocks until the transfer completes (vLLM's
   delay_free_blocks), then frees them;
4. the decode replica recomputes the last prompt token and samples the first output token, then
   decodes. So the client's first token comes from the decode replica: TTFT = arrival to that
   token (prefill queue + prefill + wait for decode blocks + transfer + one decode-side step), and
   TPOT is the decode replica's alone.

Transfer bytes (`transfer_bytes`) are the KV the decode replica holds for the prompt, less the
leading blocks its own prefix cache already has (vLLM asks the local cache first and the NIXL
connector reads only the blocks allocated without a hit; sim/core/remote_kv.py): per KV group the
kept tokens past the local hit on each of decode_tp ranks (a sliding window sends its window, MLA
its latent, a state group its state; heads replicated when TP exceeds the kv heads are sent to each
rank that holds a copy). Time (sim/core/link.py): each replica has one NIC
per GPU, so a replica's link is tp x the link's bandwidth; a transfer holds the prefill replica's
sending side and the decode replica's receiving side, FIFO on each, at the slower one's rate, and
completes latency after its data end. Pools differing in TP re-shard: each decode rank reads its
heads from the prefill ranks that hold them, ceil(tp_p / tp_d) reads per decode rank, each paying
the link's latency; the bytes are unchanged. Layer-pipelined (`kv_layer_pipelined`, as NIXL's and
Mooncake's layer-wise sends): a layer's KV leaves as soon as the layer is computed, so all but the
last layer's share moved while the prefill ran; only 1/num_layers of the bytes is booked after it
(the earlier shares are assumed to have found the link free: an optimistic bound, said so).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from models.links import get_link
from models.spec import SpecError
from sim.core.link import SharedLink, schedule_over
from sim.core.remote_kv import RemoteKV
from sim.core.request import REJECTED
from sim.core.scheduler import Scheduler
from sim.core.step_types import StepPlan
from sim.fleet import fleet_metrics
from sim.fleet.engine import FleetSimulation
from sim.fleet.layout import fleet_gpus, pools_of
from sim.fleet.live_view import LiveView
from sim.run import metrics
from sim.run.deployment import Deployment
from sim.run.distribution import distribution
from sim.run.engine import Replica, build
from sim.run.tier_metrics import tier_summary
from sim.scenario import Scenario
from sim.trace.model import Trace

TRANSFERS_SHOWN = 500  # the first transfers, for the fleet view's timeline


def transfer_bytes(dep: Deployment, tokens: int, cached: int = 0) -> int:
    """KV bytes of a `tokens`-token prompt as the deployment holds them, all TP ranks together, less
    what its prefix cache already holds (the first `cached` tokens, whole blocks): per KV group the
    kept tokens from `cached` on (a window keeps its last tokens, so it sends min(window, tokens -
    cached)) plus any fixed state (a state is the prompt's end state: always sent)."""
    tp, dtype = dep.scenario.tp, dep.scenario.kv_dtype
    return tp * sum(min(g.tokens_kept(tokens), tokens - cached) * g.bytes_per_token(dtype, tp) + g.state_bytes(tp)
                    for g in dep.spec.groups)


@dataclass
class TransferLog:
    """Every KV handoff: request, bytes, reserved (start), completion, prefill and decode replica."""

    rows: list[tuple[int, int, float, float, int, int]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        if not self.rows:
            return {"kv_transfer_bytes": 0, "kv_transfers": 0, "kv_transfer_s": distribution(np.zeros(0), maximum=True)}
        arr = np.array([(b, d - s) for _, b, s, d, _, _ in self.rows], dtype=np.float64)
        return {"kv_transfer_bytes": int(arr[:, 0].sum()), "kv_transfers": len(self.rows),
                "kv_transfer_s": distribution(arr[:, 1], maximum=True)}


class PrefillPool(FleetSimulation):
    """The prefill replicas: requests of one output token, blocks held until their KV has left."""

    handoff: Callable[[int, Replica, float], None]
    plain_engine_for_pre_split = False  # releases arrive from the decode pool: the engine waits for them

    def record_step(self, rep: Replica, plan: StepPlan, t_end: float, finished: list[int]) -> None:
        super().record_step(rep, plan, t_end, finished)
        for r in finished:
            self.handoff(r, rep, t_end)

    def keeps_running(self, rep: Replica) -> bool:
        return bool(rep.sched.remote.held)  # type: ignore[attr-defined]


class DecodePool(FleetSimulation):
    """The decode replicas: requests arrive from the prefill pool with their prompt's KV remote. Its
    router is the scenario's decode_router, asked at each handoff (PDFleet._handoff), never before
    the clock: feeds start empty, and even a state-free router's choices are made one by one."""

    routes_the_trace = False
    plain_engine_for_pre_split = False

    expected = 0  # requests the prefill pool will hand over
    received = 0

    def admit_arrivals(self, rep: Replica, t: float) -> None:
        times, ids, sched, prompt = rep.times, rep.arrivals, rep.sched, self.s.table.prompt
        ptr, n = rep.ptr, len(times)
        while ptr < n and times[ptr] <= t:
            r = ids[ptr]
            sched.add_remote_request(r, int(prompt[r]))  # type: ignore[attr-defined]
            ptr += 1
        rep.ptr = ptr


class PDFleet:
    """One prefill pool and one decode pool on one clock (module docstring)."""

    def __init__(self, trace: Trace, scenario: Scenario, *, skip_ahead: bool = True,
                 progress: Callable[[float], None] | None = None) -> None:
        self.layout = scenario.replace(pd=scenario.pd or "1:1")  # the pools as layout.pools_of lays them out
        prefill, decode = pools_of(self.layout)
        (n_p, tp_p), (n_d, tp_d) = (prefill.replicas, prefill.tp), (decode.replicas, decode.tp)
        self.scenario = scenario
        self.dep_p = _resolve_pool("prefill", scenario.replace(tp=tp_p, replicas=n_p, pd=None))
        self.dep_d = _resolve_pool("decode", scenario.replace(tp=tp_d, replicas=n_d, pd=None, router=scenario.decode_router))
        setup_p, setup_d = build(trace, self.dep_p), build(trace, self.dep_d)
        _reject_in_both(setup_p, setup_d)
        setup_p.table.output[setup_p.table.status != REJECTED] = 1  # the proxy's max_tokens=1
        for rep in setup_p.replicas:
            rep.sched.cfg = replace(rep.sched.cfg, hold_kv_on_finish=True)  # type: ignore[attr-defined]
        self.prefill = PrefillPool(setup_p, trace, skip_ahead=skip_ahead, progress=None)
        self.decode = DecodePool(setup_d, trace, skip_ahead=skip_ahead, progress=progress)
        self.decode.env = self.prefill.env
        self.decode.expected = int((setup_d.table.status != REJECTED).sum())
        self.decode.routing_done = self.decode.expected == 0
        link = get_link(scenario.kv_link)
        self.nic_p = [SharedLink(f"prefill{i}", link.effective_bandwidth * tp_p, link.latency_s) for i in range(n_p)]
        self.nic_d = [SharedLink(f"decode{i}", link.effective_bandwidth * tp_d, link.latency_s) for i in range(n_d)]
        self.reads = -(-tp_p // tp_d)  # re-sharding: reads per decode rank
        self.layers = self.dep_d.spec.num_layers
        self.log = TransferLog()
        self.source_of: dict[int, int] = {}
        self.handed_at: dict[int, float] = {}
        self.prefill.handoff = self._handoff
        for rep in setup_d.replicas:
            sched: Scheduler = rep.sched  # type: ignore[assignment]
            sched.remote.source = self._source(rep)

    def _handoff(self, r: int, prep: Replica, t: float) -> None:
        """Prefill of r ended on `prep` at t: pick a decode replica and queue r there."""
        d = self.decode
        views = [LiveView(rep, d.slots[rep.index], d.s.table, t) for rep in d.s.replicas]
        rep = d.s.replicas[d.router.choose(d.request_of(r, t), views)]
        self.source_of[r] = prep.index
        self.handed_at[r] = t
        d.assign(rep, r, t)
        d.received += 1
        d.routing_done = d.received >= d.expected
        d.wake(rep, t, arrival=True)
        if d.routing_done:
            for other in d.s.replicas:
                d.wake_idle(other)

    def _source(self, drep: Replica) -> Callable[[int, int, float], float]:
        def start(r: int, tokens: int, now: float) -> float:
            p, prompt = self.source_of[r], int(self.decode.s.table.prompt[r])
            total = transfer_bytes(self.dep_d, prompt, prompt - tokens)  # tokens: what its cache lacks
            booked = -(-total // self.layers) if self.scenario.kv_layer_pipelined else total
            tr = schedule_over((self.nic_p[p], self.nic_d[drep.index]), now, booked)
            done = tr.done + (self.reads - 1) * self.nic_d[drep.index].latency_s
            self.log.rows.append((r, total, now, done, p, drep.index))
            prep = self.prefill.s.replicas[p]
            prep.sched.release_at(r, done)  # type: ignore[attr-defined]
            self.prefill.wake(prep, done)
            return done
        return start

    def run(self) -> None:
        env = self.prefill.env
        if not self.prefill.state_free:
            env.process(self.prefill.router_process())
        for sim in (self.prefill, self.decode):
            for rep in sim.s.replicas:
                env.process(sim.engine(rep))
        env.run()
        for sim in (self.prefill, self.decode):
            sim.close(max((rep.t for rep in sim.s.replicas), default=0.0))

    def result(self, trace_digest: str, wall_s: float) -> metrics.SimResult:
        tp, td = self.prefill.s.table, self.decode.s.table
        td.admitted_s[:] = tp.admitted_s  # queueing is the prefill pool's
        td.prefix_hit[:] = tp.prefix_hit
        p_res = self.prefill.result(trace_digest, wall_s)
        res = self.decode.result(trace_digest, wall_s, routing=self.prefill.router_name)
        s = res.summary
        decode_timeline = s["fleet"]["timeline"]
        pools = [_pool("prefill", self.dep_p, p_res), _pool("decode", self.dep_d, res)]  # before s is the fleet's
        for key in ("prefix_cache_hit_rate", "prefix_cache_hits", "prefix_cache_queries"):  # the rate's own parts
            if key in p_res.summary:
                s[key] = p_res.summary[key]
        s.update(self.log.summary())
        s["pd_waited_for_blocks"] = sum(_blocked(rep) for rep in self.decode.s.replicas)
        s["pd_decode_hit_tokens"] = sum(_remote(rep).local_hit_tokens for rep in self.decode.s.replicas)
        s["gpus"] = fleet_gpus(self.layout)
        s["routing_imbalance"] = p_res.summary["routing_imbalance"]
        s["fleet"] = {"router": self.prefill.router_name, "decode_router": self.scenario.decode_router, "kv_link": self.scenario.kv_link,
                      "layer_pipelined": self.scenario.kv_layer_pipelined,
                      "pools": pools,
                      "replicas": [{**r, "pool": "prefill"} for r in p_res.summary["fleet"]["replicas"]]
                      + [{**r, "pool": "decode"} for r in res.summary["fleet"]["replicas"]]}
        s["replicas"] = len(self.prefill.s.replicas) + len(self.decode.s.replicas)
        s["fleet"]["transfers"] = [{"req": r, "bytes": b, "start_s": round(t0, 6), "done_s": round(t1, 6), "prefill": p,
                                    "decode": d} for r, b, t0, t1, p, d in self.log.rows[:TRANSFERS_SHOWN]]
        s["fleet"]["timeline"] = {"prefill": p_res.summary["fleet"]["timeline"], "decode": decode_timeline}
        if self.prefill.s.tiers is not None and "tier_hit_rate" in s:
            s.update(self._tier_keys(res))
        return metrics.SimResult(res.requests, res.steps, s, self.scenario, trace_digest)

    def _tier_keys(self, res: metrics.SimResult) -> dict[str, Any]:
        """KV tiers in a P/D fleet: each pool has its own (sim/run/tier_setup.py). Hits, load delays
        and the TTFT split are the prefill pool's, where prompts are looked up (as prefix_cache_*),
        over the fleet's requests frame; bytes moved are summed over both pools; occupancy and link
        use are listed per pool ("prefill/cpu/replica0"), and so is the occupancy series, both pools'
        samples on one time axis (`merged_series`; docs/METRICS.md)."""
        p, d = self.prefill, res.summary
        reps = p.s.replicas
        assert p.s.tiers is not None
        pk = tier_summary(p.s.tiers, res.requests, prefix_queries=sum(rep.sched.prefix_queries for rep in reps),
                          prefix_hits=sum(rep.sched.prefix_hits for rep in reps), duration_s=d["duration_s"],
                          occupancy=p._tier_occupancy)
        moved = {name: {k: parts.get(k, 0) + d["tier_bytes_moved"].get(name, {}).get(k, 0) for k in parts}
                 for name, parts in pk["tier_bytes_moved"].items()}
        per_pool = {key: {f"{role}/{name}": v for role, keys in (("prefill", pk), ("decode", d)) for name, v in keys[key].items()}
                    for key in ("tier_link_utilisation", "tier_occupancy")}
        series = merged_series({"prefill": pk["tier_occupancy_series"], "decode": d["tier_occupancy_series"]})
        return {**{key: pk[key] for key in ("tier_hit_rate", "tier_hit_tokens", "tier_load_delay_s", "ttft_split_s")},
                "tier_bytes_moved": moved, **per_pool, "tier_occupancy_series": series}


def merged_series(by_pool: dict[str, dict[str, list]]) -> dict[str, list]:
    """Occupancy series sampled at each pool's own times ({"t_s": [...], instance: [bytes, ...]})
    on the union of their times, instances named "pool/instance": between its own samples a pool's
    occupancy is held at its last sample (a sampled gauge, not interpolated), and before its first
    one it is 0 (the tiers start empty)."""
    times = np.unique(np.concatenate([np.asarray(ser.get("t_s", []), dtype=float) for ser in by_pool.values()]))
    out: dict[str, list] = {"t_s": times.tolist()}
    for pool, ser in by_pool.items():
        own = np.asarray(ser.get("t_s", []), dtype=float)
        at = np.searchsorted(own, times, side="right") - 1  # the last own sample at or before each time
        for name, values in ser.items():
            if name != "t_s":
                held = np.asarray(values, dtype=np.int64)[np.maximum(at, 0)] if len(values) else np.zeros(len(times), np.int64)
                out[f"{pool}/{name}"] = np.where(at >= 0, held, 0).tolist()
    return out


def _resolve_pool(role: str, scenario: Scenario) -> Deployment:
    """One pool's Deployment; a model, GPU or TP error names the pool (its TP came from --prefill-tp,
    --decode-tp or a fleet file's pool, not from --tp)."""
    try:
        return Deployment.resolve(scenario)
    except SpecError as exc:
        raise SpecError(f"{role} pool (tp={scenario.tp}): {exc}") from None


def _remote(rep: Replica) -> RemoteKV:
    sched: Scheduler = rep.sched  # type: ignore[assignment]
    return sched.remote


def _blocked(rep: Replica) -> int:
    return len(_remote(rep).blocked)


def _pool(role: str, dep: Deployment, res: metrics.SimResult) -> dict[str, Any]:
    fl = res.summary["fleet"]
    return {"role": role, "router": fl["router"], "replicas": len(fl["replicas"]), "tp": dep.scenario.tp,
            "routing_imbalance": res.summary["routing_imbalance"],
            "kv_usage_mean": fleet_metrics.mean([r["kv_usage_mean"] for r in fl["replicas"]]),
            "num_steps": res.summary["num_steps"], "num_preemptions": res.summary["num_preemptions"]}


def _reject_in_both(a: Any, b: Any) -> None:
    """A request either pool refuses is refused by the fleet (removed from both feeds)."""
    rej = (a.table.status == REJECTED) | (b.table.status == REJECTED)
    for setup in (a, b):
        newly = rej & (setup.table.status != REJECTED)
        if newly.any():
            setup.table.status[newly] = REJECTED
            setup.rejected += int(newly.sum())
            for rep in setup.replicas:
                keep = [i for i, r in enumerate(rep.arrivals) if not rej[r]]
                rep.arrivals = [rep.arrivals[i] for i in keep]
                rep.times = [rep.times[i] for i in keep]


def simulate_pd(trace: Trace, scenario: Scenario, *, progress: Callable[[float], None] | None = None,
                skip_ahead: bool = True) -> metrics.SimResult:
    wall0 = time.perf_counter()
    fleet = PDFleet(trace, scenario, skip_ahead=skip_ahead, progress=progress)
    fleet.run()
    return fleet.result(trace.digest(), time.perf_counter() - wall0)

"""Step time of one engine step from one of three sources (summary key `cost_model.source`):

- "roofline": roofline v2 from the model's shapes and the GPU datasheet (sim/timing/roofline.py);
- "profile": a calibration profile fitted to measured steps (sim/timing/profile.py);
- "measured-db": aiconfigurator-core's measured kernel tables (sim/timing/measured_db.py);
- "derived": those tables for the nearest measured variant, scaled (a KV dtype without measured
  kernels: int8/int4 from fp8, decode attention x bytes read; measured_db.nearest_measured_kv).

A step is described by its shape (sums over the sequences in it):
- decode_seqs D, decode_kv Kd: sequences computing one token, and their K/V tokens read;
- prefill_tokens P, prefill_kv Kp, prefill_pairs Pp, prefill_seqs Np: prompt chunks: tokens
  computed, cached/earlier tokens read, query-key pairs (sum of q x ctx + q (q+1) / 2), chunks.

Roofline v2 (per TP rank; ranks run in parallel; docs/CALIBRATION.md explains every term):

    T = D + P tokens computed;  S = D + Np sequences sampled (logits for sampled tokens only)
    linear   = max((gemm_flops x T + head_flops x S) / (peak x eff), streamed_weights / (bw x mem_eff))
               eff = prefill_efficiency when the step has prefill tokens, else decode_efficiency
    attn     = max(attn_flops x Pp / (peak x attn_eff), (Kp + P) x kv_bytes / (bw x mem_eff))   prefill
             + max(attn_flops x Kd / (peak x attn_eff), (Kd + D) x kv_bytes / (bw x mem_eff))   decode
               summed per KV group where groups read less than the context (sliding, chunked,
               state, eviction caps: sim/timing/attention_groups.py); MLA prefill runs the
               decompressed multi-head attention (prefill_attn_flops_per_pair)
    weights  = streamed non-expert bytes + routed-expert bytes x (1 - (1 - k/E)^T) for an MoE (the
               experts T tokens are routed to, uniform routing: a decode step of few tokens reads few)
    elementw = elementwise_bytes x T / (bw x mem_eff)
    comm     = 2 all-reduces per layer: latency + bytes x 2 (tp-1)/tp / bus bandwidth (NVLink or PCIe)
    step     = linear + attn + elementw + comm + layers x per_layer + step_overhead + per_seq x S
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from models.gpus import GPUSpec
from models.spec import ModelSpec
from sim.timing import roofline as rl
from sim.timing.attention_groups import AttnGroup, terms_of
from sim.timing.decode_timer import DecodeTimer, FormulaDecodeTimer, GroupedTableDecodeTimer, TableDecodeTimer
from sim.timing.knobs import host_link_bandwidth
from sim.timing.layer_offload import gpu_share, offload_bound, split_groups
from sim.timing.measured_table import CONTEXTS, interp_row
from sim.timing.profile import (  # noqa: F401  (re-exported: the profile API's historic home)
    COEFFICIENTS,
    MAX_PROFILE_BYTES,
    PROFILE_SCHEMA,
    PROFILE_VERSION,
    ProfileError,
    fit_profile,
    load_profile,
    profile_mismatches,
    save_profile,
    validate_profile,
)

if TYPE_CHECKING:
    from sim.timing.knobs import TimingKnobs


@dataclass(frozen=True)
class CostModel:
    """Step-time model of one TP group. Build with from_scenario(); call step_time / decode_step_times."""

    matmul_flops_per_token: float  # 2 x linear-layer params per rank (active params per token for MoE)
    attn_flops_per_pair: float  # 4 x layers x heads per rank x head_dim
    weight_bytes: float  # streamed per step, per rank (the embedding table is a lookup, not streamed)
    kv_bytes_per_token: float  # per rank
    peak_flops: float
    hbm_bandwidth: float
    allreduce_s_per_token: float
    allreduce_fixed_s: float
    head_flops_per_seq: float = 0.0  # 2 x vocab x hidden per rank: logits of one sampled sequence
    elementwise_bytes_per_token: float = 0.0
    layer_overhead_s: float = 0.0  # layers x per-layer small-kernel floor
    allreduce_link: str = "none"
    prefill_efficiency: float = rl.PREFILL_EFFICIENCY
    decode_efficiency: float = rl.DECODE_EFFICIENCY
    attention_efficiency: float = rl.ATTENTION_EFFICIENCY
    memory_efficiency: float = rl.MEMORY_EFFICIENCY
    step_overhead_s: float = rl.STEP_OVERHEAD_S
    per_seq_s: float = rl.PER_SEQ_S
    api_overhead_s: float = rl.API_OVERHEAD_S  # client-side time before the engine sees a request
    profile: dict[str, float] | None = None  # fitted coefficients; replaces the roofline when set
    table: Any = None  # sim.timing.measured_table.MeasuredTable; replaces the GPU part when set
    source: str = "roofline"
    source_detail: str = ""
    warnings: tuple[str, ...] = field(default=())
    prefill_attn_flops_per_pair: float = 0.0  # 0 = attn_flops_per_pair (MLA: the decompressed prefill kernel)
    attn_groups: tuple[AttnGroup, ...] = ()  # per-group attention terms; () = every layer reads its whole context
    expert_weight_bytes: float = 0.0  # routed experts per rank (MoE), streamed as far as tokens touch them
    expert_share: float = 0.0  # experts_per_tok / num_experts
    # Layer-wise offload (sim/timing/layer_offload.py): KV bytes per token per rank of the offloaded
    # layers, streamed over the host link (bytes/s per GPU and direction) every step. 0: none.
    offload_kv_bytes_per_token: float = 0.0
    host_bandwidth: float = 0.0
    offload_groups: tuple[AttnGroup, ...] = ()  # models with KV groups: the offloaded layers' terms per group
    _decode_cache: dict[int, tuple[float, Any]] = field(default_factory=dict, init=False, compare=False, repr=False)
    _decode_timers: dict[int, DecodeTimer] = field(default_factory=dict, init=False, compare=False,
                                                              repr=False)
    # The measured table times a step with a prompt chunk on its own (MeasuredTable.prefill_step):
    # no profile, no offload, no per-group attention, decode attention and all-reduces measured.
    _table_prefill: bool = field(default=False, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        t = self.table
        plain = (t is not None and self.profile is None and not self.offload_kv_bytes_per_token
                 and not self.offload_groups and not t.attn_groups and t.gen_attn is not None
                 and not t.roofline_allreduce)
        object.__setattr__(self, "_table_prefill", plain)

    @property
    def reads_prefill_pairs(self) -> bool:
        """Whether step_time reads `prefill_pairs`: not on the plain measured table, whose prompt
        chunks are timed by MeasuredTable.prefill_step from their tokens and cached prefix (and a
        step without prompt tokens has no pairs), so the executor need not count them."""
        return not self._table_prefill

    @classmethod
    def from_scenario(cls, spec: ModelSpec, gpu: GPUSpec, scenario: TimingKnobs, **overrides: Any) -> CostModel:
        """The step-time source for a scenario: its profile when set, else measured kernels where
        they cover it (cost_source auto), else roofline v2. `spec` is the model as it runs (the
        what-ifs applied: sim.run.deployment.Deployment.model_of), `gpu` the scenario's GPU; the
        Deployment resolves both and calls this once. `overrides` replace any field (tests and
        calibration use it)."""
        kwargs: dict[str, Any] = rl.roofline_terms(spec, gpu, scenario)
        kwargs["api_overhead_s"] = float(scenario.api_overhead_s)
        offload = float(getattr(scenario, "offload_layers", 0.0) or 0.0)  # a Scenario's; other knob sets have none
        if offload:
            kwargs.update(_offload_terms(spec, scenario, offload, kwargs))
            kwargs["host_bandwidth"] = host_link_bandwidth(scenario, gpu.host_link_bandwidth)
        kwargs.update(overrides)
        want = scenario.cost_source
        if scenario.profile:
            prof = load_profile(scenario.profile)
            kwargs.update(profile=prof["coefficients"], source="profile", source_detail=str(scenario.profile),
                          warnings=tuple(profile_mismatches(prof, scenario, spec)))
        elif want in ("auto", "measured-db"):
            return cls._measured(cls(**kwargs), spec, gpu, scenario, required=want == "measured-db")
        elif want == "roofline":
            kwargs.update(source_detail="chosen by the scenario")
        return cls(**kwargs)

    @classmethod
    def _measured(cls, roof: CostModel, spec: ModelSpec, gpu: GPUSpec, scenario: TimingKnobs, required: bool) -> CostModel:
        """The measured-db source where aiconfigurator-core covers the deployment, else the roofline
        with the reason (an error when the scenario asked for measured-db explicitly)."""
        from sim.timing import measured_db

        try:
            table, notes = measured_db.measured_table(spec, gpu.name, scenario, roof)
        except measured_db.NotCovered as exc:
            if required:
                raise ProfileError(f"cost_source measured-db: {exc}") from None
            return replace(roof, source_detail=f"measured kernels not used: {exc}")
        detail = f"aiconfigurator-core {measured_db.package_version()} ({measured_db.BACKEND} tables)"
        source = "derived" if table.derived else "measured-db"
        return replace(roof, table=table, source=source, source_detail=detail,
                       warnings=roof.warnings + notes)

    @property
    def describe(self) -> dict[str, Any]:
        """What the summary JSON says about the step-time source."""
        return {"source": self.source, "detail": self.source_detail, "warnings": list(self.warnings),
                "allreduce_link": self.allreduce_link, "api_overhead_s": self.api_overhead_s}

    # --- step times --------------------------------------------------------------------------
    def step_time(self, decode_seqs: int, decode_kv: int, prefill_tokens: int = 0, prefill_kv: int = 0,
                  prefill_pairs: int = 0, prefill_seqs: int = 0) -> float:
        """Seconds for one step of this shape (module docstring).

        Evaluated on Python floats (the engine calls this once per event; numpy costs ~15 us per
        scalar call). The very same formula as decode_step_times' arrays, operation for
        operation, so the floats are bit-identical (tests/test_cost_model.py checks). A step with a
        prompt chunk on the plain measured table (the engine's general step) takes one call."""
        if prefill_tokens > 0 and self._table_prefill:
            d, np_ = float(decode_seqs), float(prefill_seqs)
            gpu = self.table.prefill_step(d, float(decode_kv), float(prefill_tokens), float(prefill_kv), np_)
            return float(gpu + self.layer_overhead_s + self.step_overhead_s + self.per_seq_s * (d + np_))
        return float(self._times(float(decode_seqs), float(decode_kv), float(prefill_tokens), float(prefill_kv),
                                 float(prefill_pairs), float(prefill_seqs), max))

    def decode_time(self, decode_seqs: int, decode_kv: int) -> float:
        """step_time(decode_seqs, decode_kv) of a pure-decode step, bit for bit, faster: the parts
        that depend on the batch size alone are computed once per batch size (the engine's hot loop)."""
        if self.table is None or self.profile is not None or self.offload_kv_bytes_per_token or self.offload_groups:
            return self.step_time(decode_seqs, decode_kv)
        return float(self._table_decode(float(decode_seqs), float(decode_kv)))

    def decode_timer(self, decode_seqs: int) -> DecodeTimer:
        """decode_time(decode_seqs, kv) as a function of kv alone, bit for bit, with a loop that sums
        a run's step ends (sim/timing/decode_timer.py): a decode run asks for many steps of one
        batch size, so the per-batch parts are looked up once per batch size, not once per step."""
        timer = self._decode_timers.get(decode_seqs)
        if timer is None:
            timer = self._make_decode_timer(decode_seqs)
            self._decode_timers[decode_seqs] = timer
        return timer

    def _make_decode_timer(self, b: int) -> DecodeTimer:
        """The measured table's scalar branch of _table_decode with its per-batch work done once
        (the very same float operations in the same order); decode_time itself elsewhere."""
        groups = self.table.attn_groups if self.table is not None else ()
        if (self.table is None or self.profile is not None or self.offload_kv_bytes_per_token or self.offload_groups or b <= 0
                or any(g.kind == "state" for g in groups)):
            return FormulaDecodeTimer(b, self.decode_time)
        self._table_decode(float(b), 0.0)  # fills the per-batch cache
        base, row = self._decode_cache[b]
        if row is None:
            return FormulaDecodeTimer(b, self.decode_time)
        if groups:  # MeasuredTable.grouped_decode per step: a chunked group's reads through its own rule
            return GroupedTableDecodeTimer(b, base, CONTEXTS, row,
                                           [(g.layers, g.span, g.reads_per_seq if g.chunk else None) for g in groups])
        return TableDecodeTimer(b, float(base), CONTEXTS, row)

    def _table_decode(self, d: float, kd: Any) -> Any:
        """Measured-table pure-decode step: per-batch base + decode attention over the mean context."""
        key = int(d)
        parts = self._decode_cache.get(key)
        if parts is None:
            gpu, row = self.table.decode_parts(d)
            parts = (gpu + self.layer_overhead_s + self.step_overhead_s + self.per_seq_s * d, row)
            self._decode_cache[key] = parts
        base, row = parts
        if d <= 0:
            return base + 0.0 * kd
        if row is None:
            return base + self.decode_attention(d, kd, np.maximum if isinstance(kd, np.ndarray) else max)
        if self.table.attn_groups:
            return base + self.table.grouped_decode(row, d, kd, np.maximum if isinstance(kd, np.ndarray) else max)
        if isinstance(kd, np.ndarray):
            return base + interp_row(CONTEXTS, row, kd / d)
        x = kd / d  # the scalar case of interp_row, inlined: this runs once per simulated decode step
        if x < CONTEXTS[0]:
            x = float(CONTEXTS[0])
        i = min(bisect_right(CONTEXTS, x) - 1, len(CONTEXTS) - 2)
        a, b = float(row[i]), float(row[i + 1])
        return base + (a + (x - CONTEXTS[i]) / (CONTEXTS[i + 1] - CONTEXTS[i]) * (b - a))

    def decode_step_times(self, k: int, batch: int, context_tokens_start: int) -> np.ndarray:
        """Times of k consecutive pure-decode steps of `batch` sequences.

        Step j reads context_tokens_start + j x batch KV tokens (the summed context of the batch
        grows by one token per sequence per step); so decode_step_times(1, b, c)[0] == step_time(b, c).
        """
        if k <= 0:
            return np.zeros(0)
        kv = context_tokens_start + batch * np.arange(k, dtype=np.float64)
        z = np.float64(0.0)
        return self._times(np.float64(batch), kv, z, z, z, z, np.maximum)

    def _times(self, d: Any, kd: Any, p: Any, kp: Any, pp: Any, np_: Any, maximum: Callable[[Any, Any], Any]) -> Any:
        """The step-time formula over floats or float64 arrays (`maximum`: max or np.maximum)."""
        gpu = self._gpu_times(d, kd, p, kp, pp, np_, maximum)
        if not (self.offload_kv_bytes_per_token or self.offload_groups):
            return gpu
        if self.offload_groups:  # per KV group: what each kind of layer keeps streams (sim/timing/layer_offload.py)
            return offload_bound(gpu, self.offload_groups, self.host_bandwidth, d, kd, p, kp, np_, maximum)
        per_byte = self.offload_kv_bytes_per_token / self.host_bandwidth  # layer offload: host link, overlapped
        return maximum(maximum(gpu, (kd + kp) * per_byte), (d + p) * per_byte)

    def _gpu_times(self, d: Any, kd: Any, p: Any, kp: Any, pp: Any, np_: Any, maximum: Callable[[Any, Any], Any]) -> Any:
        if self.profile is not None:
            c = self.profile
            if "weights_s" in c:  # schema v2: max(compute, memory) with prefill and decode parts
                return (c["intercept_s"] + c["per_seq_s"] * (d + np_) + maximum(c["per_token_s"] * (d + p), c["weights_s"])
                        + c["per_prefill_pair_s"] * pp + c["per_kv_token_s"] * (kd + kp))
            # schema v1: linear in (new tokens, K/V read, attention pairs)
            return (c["intercept_s"] + c["per_new_token_s"] * (d + p) + c["per_kv_read_token_s"] * (kd + kp)
                    + c["per_attn_pair_s"] * (kd + pp))
        if self.table is not None and p == 0 and np_ == 0:
            return self._table_decode(float(d), kd)
        t = d + p
        s = d + np_
        if self.table is not None:
            gpu = self.table.step_seconds(d, kd, p, kp, pp, np_, maximum)
        else:
            gpu = self._roofline_gpu(d, kd, p, kp, pp, t, s, maximum)
        return gpu + self.layer_overhead_s + self.step_overhead_s + self.per_seq_s * s

    def _roofline_gpu(self, d: Any, kd: Any, p: Any, kp: Any, pp: Any, t: Any, s: Any,
                      maximum: Callable[[Any, Any], Any]) -> Any:
        peak, bw = self.peak_flops, self.hbm_bandwidth * self.memory_efficiency
        eff = self.prefill_efficiency if p > 0 else self.decode_efficiency
        linear = maximum((self.matmul_flops_per_token * t + self.head_flops_per_seq * s) / (peak * eff),
                         self.streamed_weight_bytes(t) / bw)
        attn = self.prefill_attention(p, kp, pp, s - d, maximum) + self.decode_attention(d, kd, maximum)
        return linear + attn + self.elementwise_bytes_per_token * t / bw + self.allreduce(t)

    def streamed_weight_bytes(self, t: Any) -> Any:
        """Weight bytes one step of t tokens reads: all of a dense model; of an MoE the non-expert
        weights and the routed experts at least one of its tokens is sent to (expected share under
        uniform routing)."""
        if not self.expert_weight_bytes:
            return self.weight_bytes
        return self.weight_bytes + self.expert_weight_bytes * (1.0 - (1.0 - self.expert_share) ** t)

    def prefill_attention(self, p: Any, kp: Any, pp: Any, np_: Any, maximum: Callable[[Any, Any], Any]) -> Any:
        """Roofline attention of the step's prompt chunks (p tokens after kp cached, pp pairs, np_ chunks)."""
        attn_peak = self.peak_flops * self.attention_efficiency
        bw = self.hbm_bandwidth * self.memory_efficiency
        flops = self.prefill_attn_flops_per_pair or self.attn_flops_per_pair
        if not self.attn_groups:
            return maximum(flops * pp / attn_peak, (kp + p) * self.kv_bytes_per_token / bw)
        if not p > 0:
            return 0.0
        return sum(g.prefill_seconds(p, kp, pp, np_, attn_peak, bw, maximum) for g in self.attn_groups)

    def decode_attention(self, d: Any, kd: Any, maximum: Callable[[Any, Any], Any]) -> Any:
        """Roofline decode attention of d sequences reading kd K/V tokens: max(compute, memory),
        per KV group when the groups read less than the context (mean context kd / d)."""
        attn_peak = self.peak_flops * self.attention_efficiency
        bw = self.hbm_bandwidth * self.memory_efficiency
        if not self.attn_groups:
            return maximum(self.attn_flops_per_pair * kd / attn_peak, (kd + d) * self.kv_bytes_per_token / bw)
        if not d > 0:
            return 0.0 * kd
        x = kd / d
        total = 0.0 * kd
        for g in self.attn_groups:
            total = total + g.decode_seconds(d, x, attn_peak, bw, maximum)
        return total

    def allreduce(self, t: Any) -> Any:
        """Roofline TP all-reduces of a step of t tokens (0 at TP 1)."""
        return self.allreduce_fixed_s + self.allreduce_s_per_token * t


def _offload_terms(spec: ModelSpec, scenario: TimingKnobs, fraction: float, terms: dict[str, Any]) -> dict[str, Any]:
    """Layer offload's cost-model fields: one-group models stream the offloaded share of each token's
    KV; models with KV groups stream what each group's offloaded layers keep (sim/timing/layer_offload.py)."""
    if not terms["attn_groups"]:
        return {"offload_kv_bytes_per_token": terms["kv_bytes_per_token"] * (1.0 - gpu_share(spec.num_layers, fraction))}
    off = terms_of(spec, split_groups(spec.groups, fraction)[1], scenario.kv_dtype, scenario.tp)
    return {"offload_groups": off, "offload_kv_bytes_per_token": float(sum(g.bytes_per_token for g in off))}

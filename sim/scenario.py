"""Scenario: every knob of one simulated (or measured) serving setup, in one place.

One frozen dataclass, JSON-serialisable and hashable, so it can key caches (st.cache_data),
travel in snapshot files and URLs, and drive both the simulator and the GPU backend unchanged.
Validation lives here so every entry point (CLI, dashboard, snapshot upload) rejects the same
bad values with the same one-line message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from models.kv_dtypes import KV_DTYPES
from models.links import LINKS
from models.registry import Registry
from models.strict import flag, number, whole
from models.weight_dtypes import WEIGHT_DTYPES
from sim.core.kv.placement import PLACEMENTS
from sim.core.kv.registry import ALLOCATORS
from sim.core.kv.reserve import RESERVE_POLICIES
from sim.core.preemption import PREEMPTION_MODES
from sim.core.routing.registry import ROUTERS
from sim.core.tiers.policy import TIER_POLICIES
from sim.core.tiers.scope import TIER_SCOPES
from sim.errors import ScenarioError
from sim.guard import limits
from sim.memory.pool_sources import KV_POOL_SOURCES
from sim.timing.sources import COST_SOURCES

__all__ = ["CHOICES", "Scenario", "ScenarioError"]

TIER_MAX_GIB = 1 << 20  # 1 PiB: a remote store may be far larger than any GPU budget
TIER_DEFAULTS = {"cpu_tier_gib": 0.0, "nvme_tier_gib": 0.0, "remote_tier_gib": 0.0, "tier_policy": "write-through",
                 "host_link_gb_s": None, "offload_layers": 0.0, "cpu_tier_scope": "replica"}
FLEET_DEFAULTS = {"router": "round-robin", "router_kv_weight": 1.0, "pd": None, "prefill_tp": None, "decode_tp": None,
                  "kv_link": "rdma-400g", "kv_layer_pipelined": False, "decode_router": "least-outstanding",
                  "gpus_per_node": 8}
ENGINE_DEFAULTS = {"prefix_cache_retention_interval": 0, "async_scheduling": None, "kv_pool": "kvsim", "language_model_only": False}
FLAG_FIELDS = (  # the plain true/false fields: validated, and read from JSON/URL text, alike
    "prefix_caching", "chunked_prefill", "expert_parallel", "kv_layer_pipelined", "language_model_only")
MAX_GPUS_PER_NODE = 72  # GB200 NVL72, the largest NVLink domain sold as one system

# Scenario field -> the registry that holds its names (the one list; validation reads it live).
CHOICES: dict[str, Registry[Any]] = {
    "allocator": ALLOCATORS,
    "reserve": RESERVE_POLICIES,
    "placement": PLACEMENTS,
    "preemption": PREEMPTION_MODES,
    "cost_source": COST_SOURCES,
    "kv_dtype": KV_DTYPES,
    "weight_dtype": WEIGHT_DTYPES,
    "tier_policy": TIER_POLICIES,
    "cpu_tier_scope": TIER_SCOPES,
    "router": ROUTERS,
    "decode_router": ROUTERS,
    "kv_link": LINKS,
    "kv_pool": KV_POOL_SOURCES,
}


@dataclass(frozen=True)
class Scenario:
    """What is served, on what, and how the engine schedules and stores KV."""

    # What is served and on what.
    model: str = "llama-3-8b"
    gpu: str = "h100-sxm"
    tp: int = 1
    replicas: int = 1  # data-parallel engine replicas, each with its own KV pool
    router: str = "round-robin"  # which replica serves each request (sim/core/routing, docs/FLEET.md)
    router_kv_weight: float = 1.0  # KV-aware routers: weight of an uncached prompt block vs a block of load
    # Disaggregated prefill/decode (sim/fleet/pd.py, docs/FLEET.md): "P:D" prefill and decode replicas
    # (None: aggregated), their TP (None: `tp`), the link the KV crosses, layer-pipelined sending.
    pd: str | None = None
    prefill_tp: int | None = None
    decode_tp: int | None = None
    kv_link: str = "rdma-400g"
    kv_layer_pipelined: bool = False
    decode_router: str = "least-outstanding"  # P/D: which decode replica takes each prefilled request
    # GPUs per node (8: DGX/HGX H100): replicas of one node share its NVMe tier (sim/fleet/layout.py).
    gpus_per_node: int = 8
    weight_dtype: str = "native"  # as the checkpoint ships (bf16 for most; mxfp4 experts for gpt-oss, fp8 for DeepSeek)
    kv_dtype: str = "bf16"
    kv_heads: int | None = None  # GQA what-if: None = the model's own
    # KV budget: explicit GiB (whole deployment, all TP ranks), or derived from the GPU.
    kv_budget_gib: float | None = None
    gpu_mem_util: float = 0.9
    # Who derives it: kvsim's budget or vLLM's start-up accounting (num_gpu_blocks; sim/memory/pool_sources.py).
    kv_pool: str = "kvsim"
    # KV layout.
    allocator: str = "paged"
    block_size: int = 16
    reserve: str = "max"  # contiguous only
    placement: str = "first-fit"  # contiguous only
    prefix_caching: bool = False
    # vLLM's prefix_cache_retention_interval (tokens): which full blocks of a sliding-window or state
    # group the prefix cache keys. 0 (vLLM's default): only where a request may be resumed (its
    # replay boundary, a shared-prefix junction); N > 0: also the end of every N tokens; None: every
    # block (sim/core/kv/sliding_retention.py).
    prefix_cache_retention_interval: int | None = 0
    expert_parallel: bool = False  # MoE experts placed whole on ranks (vLLM --enable-expert-parallel)
    # A multimodal checkpoint served text-only (vLLM --language-model-only): its image encoder is not
    # loaded, so its weights stay out of the memory budget (models/vision.py). No effect on text models.
    language_model_only: bool = False
    expert_imbalance: float = 1.0  # max / mean routed-token load per rank under expert parallelism
    kv_eviction: str | None = None  # cap KV per sequence: window:N, streaming:S+R, h2o:N (models/eviction.py)
    # Scheduler.
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    max_model_len: int | None = None  # None = min(model's context, 32768)
    chunked_prefill: bool = True
    # vLLM's async scheduling (--async-scheduling / --no-async-scheduling); None: vLLM's default, on
    # for a GPU (models/kv_groups.py async_scheduling_on). It sets max_in_flight_tokens (2 or 1 x
    # max_batched_tokens), which bounds what a sliding or chunked group counts at admission and in
    # vLLM's start-up "Maximum concurrency" line; kvsim's step loop stays synchronous either way.
    async_scheduling: bool | None = None
    preemption: str = "recompute"
    swap_space_gib: float = 4.0
    # KV tiers below the GPU pool (sim/core/tiers/, docs/TIERS.md): GiB per replica (CPU), per node
    # (NVMe), for the run (remote store); 0 = none. host_link_gb_s: PCIe GB/s per GPU and direction
    # (None: the GPU entry's). offload_layers: fraction of layers whose KV lives in CPU memory and is
    # streamed every decode step (FlexGen-style).
    cpu_tier_gib: float = 0.0
    nvme_tier_gib: float = 0.0
    remote_tier_gib: float = 0.0
    tier_policy: str = "write-through"
    cpu_tier_scope: str = "replica"  # "node": one CPU tier shared by a node's replicas (sim/core/tiers/scope.py)
    host_link_gb_s: float | None = None
    offload_layers: float = 0.0
    static_batch: int | None = None  # static-batching baseline with this batch size
    # Load: the trace replayed `speedup` times faster (arrival times divided by it; 2 = twice the rate).
    speedup: float = 1.0
    # Cost model and randomness.
    profile: str | None = None  # path to a calibration profile JSON
    cost_source: str = "auto"  # step times: auto (measured kernels where covered, else roofline) | measured-db | roofline
    api_overhead_s: float = 0.0  # client-side HTTP + tokenisation before the engine sees a request (TTFT)
    seed: int = 0

    def __post_init__(self) -> None:
        self.validate()
        object.__setattr__(self, "speedup", float(self.speedup))  # 2 and 2.0: one scenario, one digest
        object.__setattr__(self, "router_kv_weight", float(self.router_kv_weight))

    def validate(self) -> None:
        def bad(name: str, why: str) -> ScenarioError:
            return ScenarioError(f"scenario: {name}={getattr(self, name)!r}: {why}")

        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise bad(name, f"must be one of {allowed.choices_text()}")
        counts = {"tp": limits.MAX_TP, "replicas": limits.MAX_REPLICAS, "block_size": limits.MAX_BLOCK_SIZE,
                  "max_num_seqs": limits.MAX_NUM_SEQS, "max_batched_tokens": limits.MAX_BATCHED_TOKENS}
        optional = {"kv_heads": limits.MAX_KV_HEADS, "max_model_len": limits.MAX_MODEL_LEN,
                    "static_batch": limits.MAX_STATIC_BATCH}
        for name, hi in counts.items():
            whole(getattr(self, name), f"scenario: {name}", 1, hi, ScenarioError)
        for name, hi in optional.items():
            if getattr(self, name) is not None:
                whole(getattr(self, name), f"scenario: {name}", 1, hi, ScenarioError)
        if self.prefix_cache_retention_interval is not None:
            whole(self.prefix_cache_retention_interval, "scenario: prefix_cache_retention_interval", 0,
                  limits.MAX_MODEL_LEN, ScenarioError)
        whole(self.gpus_per_node, "scenario: gpus_per_node", 1, MAX_GPUS_PER_NODE, ScenarioError)
        whole(self.seed, "scenario: seed", 0, limits.MAX_SEED, ScenarioError)
        number(self.gpu_mem_util, "scenario: gpu_mem_util", 0.0, 1.0, ScenarioError, lo_open=True)
        if self.kv_budget_gib is not None:
            number(self.kv_budget_gib, "scenario: kv_budget_gib", 0.0, limits.MAX_GIB, ScenarioError, lo_open=True)
            if self.kv_pool != "kvsim":
                raise bad("kv_pool", "sizes the pool from the GPU; kv_budget_gib sets it explicitly: give one of the two")
        number(self.speedup, "scenario: speedup", limits.MIN_SPEEDUP, limits.MAX_SPEEDUP, ScenarioError)
        number(self.swap_space_gib, "scenario: swap_space_gib", 0.0, limits.MAX_GIB, ScenarioError)
        for name in ("cpu_tier_gib", "nvme_tier_gib", "remote_tier_gib"):
            number(getattr(self, name), f"scenario: {name}", 0.0, TIER_MAX_GIB, ScenarioError)
        if self.host_link_gb_s is not None:
            number(self.host_link_gb_s, "scenario: host_link_gb_s", 0.0, 10_000.0, ScenarioError, lo_open=True)
        number(self.offload_layers, "scenario: offload_layers", 0.0, 0.99, ScenarioError)
        number(self.api_overhead_s, "scenario: api_overhead_s", 0.0, 60.0, ScenarioError)
        number(self.expert_imbalance, "scenario: expert_imbalance", 1.0, 64.0, ScenarioError)
        number(self.router_kv_weight, "scenario: router_kv_weight", 0.0, 1e6, ScenarioError)
        for name in ("prefill_tp", "decode_tp"):
            if getattr(self, name) is not None:
                whole(getattr(self, name), f"scenario: {name}", 1, limits.MAX_TP, ScenarioError)
        if self.pd is not None:
            from sim.core.routing.pd_split import parse_pd

            try:
                parse_pd(self.pd)
            except ValueError as exc:
                raise bad("pd", str(exc)) from None
            if self.static_batch is not None:
                raise bad("pd", "disaggregated prefill/decode needs continuous batching (no static_batch)")
        for name in FLAG_FIELDS:
            if not isinstance(getattr(self, name), bool):  # "false" is not False: no truthiness here
                raise bad(name, "must be true or false")
        if self.async_scheduling is not None and not isinstance(self.async_scheduling, bool):
            raise bad("async_scheduling", "must be true, false or null (vLLM's default)")
        for name in ("model", "gpu"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip() or len(getattr(self, name)) > 4096:
                raise bad(name, "must be a non-empty name or path")
        if self.profile is not None and (not isinstance(self.profile, str) or len(self.profile) > 4096):
            raise bad("profile", "must be a path or empty")
        if self.kv_eviction is not None:
            from models.eviction import EvictionError, parse_eviction

            try:
                parse_eviction(self.kv_eviction if isinstance(self.kv_eviction, str) else repr(self.kv_eviction))
            except EvictionError as exc:
                raise ScenarioError(f"scenario: {exc}") from None

    # Serialisation -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> Scenario:
        """Build from untrusted JSON data: unknown keys are an error, not silently dropped."""
        if not isinstance(data, dict):
            raise ScenarioError("scenario: expected a JSON object")
        data = {k: v for k, v in data.items() if k != "extra"}  # an old field (never used): older files carry it
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ScenarioError(f"scenario: unknown field(s): {', '.join(unknown)}")
        data = dict(data)
        for name in FLAG_FIELDS:  # JSON/URL text "false" means False, not truthy
            if isinstance(data.get(name), str):
                data[name] = flag(data[name], f"scenario: {name}", ScenarioError)
        if isinstance(data.get("async_scheduling"), str):  # URL text: "none"/"" for vLLM's default
            text = data["async_scheduling"].strip().lower()
            data["async_scheduling"] = None if text in ("", "none", "null") else flag(
                text, "scenario: async_scheduling", ScenarioError)
        try:
            return cls(**data)
        except TypeError as exc:  # wrong value types that compare badly
            raise ScenarioError(f"scenario: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        from models.safe_json import loads

        return cls.from_dict(loads(text, error=ScenarioError, source="scenario"))

    def digest(self) -> str:
        """Stable short hash of every field (all of them change results)."""
        data = self.to_dict()
        if data.get("speedup") == 1.0:  # added later: runs at the recorded rate keep their digests
            data.pop("speedup")
        for name, default in (*TIER_DEFAULTS.items(), *FLEET_DEFAULTS.items(), *ENGINE_DEFAULTS.items()):  # added later (issues 25, 26): runs without keep their digests
            if data.get(name) == default:
                data.pop(name)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def replace(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, **changes)

    def with_kv_budget(self, gib: float, **changes: Any) -> Scenario:
        """The scenario with an explicit KV budget (a measured or a chosen pool): no pool source then."""
        return dataclasses.replace(self, kv_budget_gib=gib, kv_pool="kvsim", **changes)

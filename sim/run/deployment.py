"""Deployment: a Scenario resolved once into what runs (nano-vllm's Config lesson).

Model spec after the kv-heads what-if, GPU, the replica's KV budget and its vLLM-like terms, bytes
per token, block count, max_model_len and the step-time source are derived here, once, and passed
on; the engine, the schedulers and the reports read these fields instead of re-deriving them from
the Scenario. The step-time source is whatever `CostModel.from_scenario` returns (sim/timing owns
that call), so a new source needs no change here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from models.gpus import GPUSpec, get_gpu
from models.kv_groups import State, async_scheduling_on, max_in_flight_tokens
from models.spec import ModelSpec, SpecError, load_spec
from sim.core.kv.base import KVAllocator
from sim.core.kv.group_managers import pool_shape
from sim.core.kv.registry import (
    ALLOCATORS,
    AllocatorKind,
    KVLayout,
    blocks_for_budget,
    make_allocator,
    make_group_allocator,
    needs_group_pools,
)
from sim.errors import DoesNotFit, ScenarioError
from sim.memory.capacity import (
    DEFAULT_RUNTIME_OVERHEAD,
    GiB,
    MemoryBudget,
    kv_bytes_per_token_per_gpu,
    memory_budget,
    pipeline_budget,
)
from sim.memory.vllm_pipeline import PipelineStage
from sim.memory.vllm_pool import hybrid_block_size
from sim.memory.vllm_profile import scenario_vllm_pool
from sim.scenario import Scenario
from sim.timing.cost_model import CostModel
from sim.timing.layer_offload import offloaded_layers, split_groups

DEFAULT_MAX_MODEL_LEN_CAP = 32768


@dataclass(frozen=True)
class Sizing:
    """A scenario resolved as far as memory goes: the model as it runs, the GPU and one GPU's budget
    (computed once). What the planners that need no run read (the Capacity page, `sim capacity`);
    a scenario that leaves no room for KV still has a Sizing (its budget says so)."""

    scenario: Scenario
    spec: ModelSpec
    gpu: GPUSpec
    budget: MemoryBudget  # one GPU of one TP group (sim.memory.capacity.memory_budget)

    @classmethod
    def of(cls, scenario: Scenario, *, runtime_overhead_bytes: int = DEFAULT_RUNTIME_OVERHEAD) -> Sizing:
        spec, gpu = Deployment.model_of(scenario), get_gpu(scenario.gpu)
        return cls(scenario, spec, gpu, scenario_memory_budget(scenario, spec, gpu, runtime_overhead_bytes))

    def budget_args(self) -> dict[str, Any]:
        """The knobs the budget was computed with, as sim.memory.capacity's functions take them."""
        sc = self.scenario
        return dict(tp=sc.tp, weight_dtype=sc.weight_dtype, kv_dtype=sc.kv_dtype, gpu_mem_util=sc.gpu_mem_util,
                    max_batched_tokens=sc.max_batched_tokens, max_num_seqs=sc.max_num_seqs,
                    runtime_overhead_bytes=self.budget.runtime_overhead_bytes)

    def pipeline_stage(self, pp: int) -> tuple[ModelSpec, MemoryBudget, PipelineStage | None]:
        """(the model on one GPU, its budget, its stage): the whole model's at pp 1, else the pipeline
        stage whose GPU holds the fewest tokens of KV (sim.memory.capacity.pipeline_budget; SpecError
        where the model cannot be split)."""
        if pp == 1:
            return self.spec, self.budget, None
        return pipeline_budget(self.spec, self.gpu, pp, **self.budget_args())


@dataclass(frozen=True)
class Deployment:
    """One replica's resolved deployment (every replica is the same); see the module docstring."""

    scenario: Scenario
    spec: ModelSpec  # after the kv-heads override
    gpu: GPUSpec
    allocator: AllocatorKind
    kv_budget_bytes: int  # one replica, all TP ranks, fixed (per-tensor) scales taken out
    budget_terms: dict[str, Any] | None  # the derived budget's terms; None for an explicit budget
    bytes_per_token: int
    num_blocks: int
    grouped: bool  # one manager per KV layer group (sliding, state, mixed models), any allocator
    max_model_len: int
    cost: CostModel

    @staticmethod
    def model_of(scenario: Scenario) -> ModelSpec:
        """The scenario's model as it runs (kv-heads what-if, text-only, KV eviction cap): the spec `resolve`
        uses, for callers that need only the model (checking a grid's names before a sweep)."""
        spec = load_spec(scenario.model)
        spec = spec.with_kv_heads(scenario.kv_heads) if scenario.kv_heads else spec
        spec = spec.language_model_only() if scenario.language_model_only else spec
        return spec.with_eviction(scenario.kv_eviction)

    @classmethod
    def resolve(cls, scenario: Scenario) -> Deployment:
        spec = cls.model_of(scenario)
        _check_retention(scenario, spec)
        scenario = forced_block_size(scenario, spec)
        gpu = get_gpu(scenario.gpu)
        budget, terms = _kv_budget(scenario, spec, gpu)
        # A model with several KV groups: one manager per group over a shared pool of pages, for
        # every allocator (paged, contiguous) and the static-batch baseline alike.
        grouped = needs_group_pools(spec.groups)
        if grouped:
            probe = _group_allocator(scenario, spec, budget)
            num_blocks, bpt = probe.num_blocks, probe.bytes_per_token
        else:
            bpt = scenario_kv_bytes_per_token(scenario, spec)
            if scenario.offload_layers:  # the offloaded layers' KV lives in CPU memory (sim/timing/layer_offload.py)
                bpt = bpt * (spec.num_layers - offloaded_layers(spec.num_layers, scenario.offload_layers)) // spec.num_layers
            num_blocks = blocks_for_budget(budget, scenario.block_size, bpt)
        if num_blocks < 1:
            raise ScenarioError(f"scenario: KV budget of {budget} bytes holds no block of {scenario.block_size} tokens")
        if terms and "num_gpu_blocks" in terms and not scenario.offload_layers and num_blocks != terms["num_gpu_blocks"]:
            raise ScenarioError(f"scenario: kv_pool='vllm': kvsim's pages for {scenario.model} hold {num_blocks} blocks "
                                f"where vLLM's pool has {terms['num_gpu_blocks']} (a layout kvsim does not model)")
        return cls(scenario, spec, gpu, ALLOCATORS.lookup(scenario.allocator), budget, terms, bpt, num_blocks,
                   grouped, _max_model_len(scenario, spec), CostModel.from_scenario(spec, gpu, scenario))

    @property
    def layout(self) -> KVLayout:
        """The KV pool's shape, what the allocator factories read."""
        return kv_layout(self.scenario, self.spec)

    def make_allocator(self, prefix_block_size: int | None = None) -> KVAllocator:
        """A fresh, empty KV pool for one replica (prefix_block_size: the trace's hash granularity)."""
        if self.grouped:
            return _group_allocator(self.scenario, self.spec, self.kv_budget_bytes, prefix_block_size)
        return make_allocator(self.layout, self.num_blocks, self.bytes_per_token, prefix_block_size=prefix_block_size)


def _kv_budget(scenario: Scenario, spec: ModelSpec, gpu: GPUSpec) -> tuple[int, dict[str, Any] | None]:
    """One replica's KV budget in bytes (fixed per-tensor scales taken out) and its terms (None: explicit)."""
    if scenario.kv_budget_gib is not None:  # fp8 scales taken out (the derived budget has them out)
        return int(scenario.kv_budget_gib * GiB) - spec.kv_fixed_bytes(scenario.kv_dtype), None
    if scenario.kv_pool == "vllm":
        return vllm_pool_budget(scenario, spec, gpu)
    derived = scenario_memory_budget(scenario, spec, gpu)  # computed once
    return derived_kv_budget_bytes(scenario, derived), derived.as_dict()


def page_bytes(scenario: Scenario, spec: ModelSpec) -> int:
    """Bytes of one pool block across the replica's TP ranks, every layer (vLLM's page x tp): what
    one of vLLM's `num_gpu_blocks` occupies, laid out as kvsim's allocators lay it out (a model
    with several KV groups: sim/core/kv/group_managers.py `pool_shape`, padding layers included)."""
    if needs_group_pools(spec.groups):
        return pool_shape(tuple(spec.groups), scenario.block_size, scenario.kv_dtype, scenario.tp)[0]
    return scenario.block_size * scenario_kv_bytes_per_token(scenario, spec)


def pool_budget_bytes(scenario: Scenario, spec: ModelSpec, num_gpu_blocks: int) -> int:
    """The budget that holds exactly `num_gpu_blocks` of the scenario's blocks (every layer: with
    layer offload the kept layers' blocks are smaller, so more fit in the same bytes)."""
    return num_gpu_blocks * page_bytes(scenario, spec)


def vllm_pool_budget(scenario: Scenario, spec: ModelSpec, gpu: GPUSpec) -> tuple[int, dict[str, Any]]:
    """kv_pool="vllm": the pool vLLM V1's start-up accounting sizes (sim/memory/vllm_profile.py,
    the newest version read, a warm compile cache), as a budget of exactly that many blocks."""
    pool = scenario_vllm_pool(scenario, spec, gpu, _max_model_len(scenario, spec))
    n = pool["num_gpu_blocks"]
    if n is None:
        raise ScenarioError(f"scenario: kv_pool='vllm': vLLM's pool is not modelled for {scenario.model} "
                            f"({pool['vllm_memory'].get('skipped', 'unknown layout')}); use kv_pool='kvsim'")
    if n < 1:
        raise DoesNotFit(f"scenario: kv_pool='vllm': vLLM's accounting leaves no KV blocks for {scenario.model} "
                         f"on {scenario.gpu} x tp={scenario.tp}")
    if not pool["vllm_startup"]["starts"]:  # vLLM refuses to start (sim/memory/vllm_startup_check.py)
        raise DoesNotFit(f"scenario: kv_pool='vllm': {pool['vllm_startup']['message']}")
    budget = pool_budget_bytes(scenario, spec, n)
    return budget, {"kv_budget_bytes": budget, "num_gpu_blocks": n, "source": "vllm", "vllm_memory": pool["vllm_memory"]}


def forced_block_size(scenario: Scenario, spec: ModelSpec) -> Scenario:
    """The scenario at the block size vLLM runs the model with: for a model with linear-attention
    state layers vLLM raises the attention block size until one layer's state fits a page
    (vllm/platforms/interface.py `_align_hybrid_block_size`, sim/memory/vllm_pool.py
    hybrid_block_size: 272 tokens for Qwen3-Next at TP4), and its state blocks stand for as many
    tokens. Other models: unchanged."""
    groups = [g for g in spec.groups if g.num_layers > 0]
    if not any(isinstance(g, State) for g in groups) or all(isinstance(g, State) for g in groups):
        return scenario
    size = hybrid_block_size(groups, scenario.kv_dtype, scenario.tp, scenario.block_size)[0]
    return scenario if size == scenario.block_size else replace(scenario, block_size=size)


def _check_retention(scenario: Scenario, spec: ModelSpec) -> None:
    """vLLM refuses a retention interval > 0 for a model with no sliding-window or state group
    (kv_cache_coordinator.py `_validate_prefix_cache_retention_interval`); so does kvsim."""
    if scenario.prefix_cache_retention_interval and not any(g.kind in ("sliding", "state") for g in spec.groups):
        raise ScenarioError(f"scenario: prefix_cache_retention_interval={scenario.prefix_cache_retention_interval}: "
                            f"{scenario.model} has no sliding-window or state KV group, where it applies (use 0)")


def scenario_async_scheduling(scenario: Scenario) -> bool:
    """Whether the scenario's vLLM runs with async scheduling: its setting, None = vLLM's GPU default."""
    return async_scheduling_on(scenario.async_scheduling)


def scenario_in_flight_tokens(scenario: Scenario) -> int:
    """vLLM's max_in_flight_tokens for the scenario's GPU engine (models/kv_groups.py)."""
    return max_in_flight_tokens(scenario.max_batched_tokens, scenario_async_scheduling(scenario))


def kv_layout(scenario: Scenario, spec: ModelSpec | None = None) -> KVLayout:
    """The scenario's KV layout (sim.core.kv.registry.KVLayout: what the allocator factories read).
    Window and chunk groups get vLLM's admission cap for max_in_flight_tokens (2 x max_batched_tokens
    under async scheduling, vLLM's GPU default, 1 x without: scenario.async_scheduling,
    models/kv_groups.py async_scheduling_on), and the scenario's max_model_len
    (`spec`: the model as it runs, Deployment.model_of, loaded when not given)."""
    spec = spec or Deployment.model_of(scenario)
    return KVLayout(scenario.allocator, scenario.block_size, scenario.prefix_caching, scenario.placement,
                    scenario.kv_dtype, scenario.tp, scenario.prefix_cache_retention_interval,
                    in_flight_tokens=scenario_in_flight_tokens(scenario),
                    max_model_len=_max_model_len(scenario, spec))


def scenario_memory_budget(scenario: Scenario, spec: ModelSpec, gpu: GPUSpec,
                           runtime_overhead_bytes: int = DEFAULT_RUNTIME_OVERHEAD) -> MemoryBudget:
    """sim.memory.capacity.memory_budget with the scenario's knobs (one TP group = one replica);
    `spec` is the model as it runs (Deployment.model_of)."""
    return memory_budget(spec, gpu, tp=scenario.tp, weight_dtype=scenario.weight_dtype, kv_dtype=scenario.kv_dtype,
                         gpu_mem_util=scenario.gpu_mem_util, max_batched_tokens=scenario.max_batched_tokens,
                         max_num_seqs=scenario.max_num_seqs, runtime_overhead_bytes=runtime_overhead_bytes)


def derived_kv_budget_bytes(scenario: Scenario, budget: MemoryBudget) -> int:
    """KV pool of one replica (all its TP ranks) derived from the GPU; SpecError (one line) when the
    weights and overheads leave no room for KV."""
    if not budget.fits:
        raise SpecError(
            f"{scenario.model} on {scenario.gpu} x tp={scenario.tp}: no room for KV "
            f"({budget.weights_bytes / GiB:.1f} GiB weights + {budget.activation_peak_bytes / GiB:.1f} GiB activations "
            f"+ {budget.runtime_overhead_bytes / GiB:.1f} GiB overhead > {budget.usable_bytes / GiB:.1f} GiB usable)")
    return budget.kv_budget_bytes * scenario.tp


def scenario_kv_bytes_per_token(scenario: Scenario, spec: ModelSpec) -> int:
    """KV bytes per token across one replica's TP ranks (replicated heads counted on every rank):
    spec.kv_bytes_per_token(kv_dtype) unless tp exceeds the kv heads, so that token slots =
    budget // bytes_per_token match the per-GPU plan."""
    return scenario.tp * kv_bytes_per_token_per_gpu(spec, scenario.kv_dtype, scenario.tp)


def _group_allocator(scenario: Scenario, spec: ModelSpec, budget: int, prefix_block_size: int | None = None) -> KVAllocator:
    """The per-group pool; with layer offload it holds only each group's kept layers (sim/timing/layer_offload.py)."""
    groups = split_groups(spec.groups, scenario.offload_layers)[0] if scenario.offload_layers else spec.groups
    try:
        return make_group_allocator(kv_layout(scenario, spec), groups, budget, prefix_block_size)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None


def _max_model_len(scenario: Scenario, spec: ModelSpec) -> int:
    """The scenario's max_model_len, else the model's context capped at 32K; without chunked
    prefill vLLM requires max_num_batched_tokens >= max_model_len, so it is capped there too."""
    max_len = int(scenario.max_model_len or min(int(spec.max_position_embeddings), DEFAULT_MAX_MODEL_LEN_CAP))
    return max_len if scenario.chunked_prefill else min(max_len, scenario.max_batched_tokens)

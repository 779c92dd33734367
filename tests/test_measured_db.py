"""Measured-kernel step times (aiconfigurator-core) as the default source where they exist."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.gpus import GPUS
from models.spec import load_spec
from sim.scenario import Scenario
from sim.timing import measured_db, measured_table
from sim.timing.cost_model import CostModel, ProfileError
from tests.resolved import cost_of

aic = pytest.importorskip("aiconfigurator_core.sdk.engine")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("KVSIM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kvsim-cache"))


def cost(**scenario) -> CostModel:
    return cost_of(Scenario(**{"model": "llama-3-8b", **scenario}))


@pytest.mark.slow
def test_h100_steps_agree_with_the_database_own_estimate(tmp_path):
    """Done-when of issue 10: decode (batch 1-256, context 512-8192) and prefill (128-8192 tokens)
    single-step GPU times within 5% of aiconfigurator-core's own estimate, on and off the grid."""
    cm = cost(gpu="h100-sxm")
    assert cm.source == "measured-db" and cm.warnings == ()
    (tmp_path / "config.json").write_text(json.dumps(load_spec("llama-3-8b").config))
    handle = aic.EngineHandle.compile(str(tmp_path), "h100_sxm", "vllm", tp_size=1)
    for b in (1, 3, 8, 17, 32, 50, 64, 100, 128, 200, 256):
        for c in (512, 700, 1024, 3000, 4096, 6000, 8192):
            mine = cm.table.step_seconds(b, b * c, 0, 0, 0, 0, max)
            assert mine == pytest.approx(handle.decode_step_latency(b, c, 2) * 1e-3, rel=0.05), (b, c)
    for t in (128, 200, 512, 777, 1024, 2048, 3000, 4096, 6000, 8192):
        mine = cm.table.step_seconds(0, 0, t, 0, t * (t + 1) // 2, 1, max)
        assert mine == pytest.approx(handle.predict_prefill_latency(1, t) * 1e-3, rel=0.05), t
    # kvsim's own CPU terms come on top of the kernels
    assert cm.step_time(64, 64 * 1024) == pytest.approx(
        cm.table.step_seconds(64, 64 * 1024, 0, 0, 0, 0, max) + cm.layer_overhead_s + cm.step_overhead_s + 64 * cm.per_seq_s)


def test_scalar_and_vectorised_paths_are_bit_identical():
    cm = cost(gpu="h100-sxm")
    times = cm.decode_step_times(60, 37, 37 * 900)
    assert [cm.step_time(37, 37 * 900 + 37 * j) for j in range(60)] == times.tolist()
    assert np.all(np.diff(times) >= 0)


def test_uncovered_gpu_falls_back_with_the_reason():
    cm = cost(gpu="rtx-4090")
    assert cm.source == "roofline" and "no measured vLLM kernels for GPU rtx-4090" in cm.source_detail
    with pytest.raises(ProfileError, match="cost_source measured-db: no measured vLLM kernels"):
        cost(gpu="rtx-4090", cost_source="measured-db")
    assert cost(gpu="h100-sxm", cost_source="roofline").source == "roofline"
    assert cost(gpu="h100-sxm", weight_dtype="int4").source == "roofline"


def test_decode_attention_only_inside_the_measured_head_range():
    """Llama-2-7B has 32 KV heads: the tables stop at 8, so decode attention is the roofline's."""
    cm = cost(model="llama-2-7b", gpu="h100-sxm")
    assert cm.source == "measured-db" and cm.table.gen_attn is None
    assert any("32 KV heads" in w for w in cm.warnings)
    no_kv = cm.table.step_seconds(16, 0, 0, 0, 0, 0, max)
    with_kv = cm.table.step_seconds(16, 16 * 4096, 0, 0, 0, 0, max)
    assert with_kv - no_kv == pytest.approx(cm.decode_attention(16, 16 * 4096, max) - cm.decode_attention(16, 0, max))


def test_pcie_allreduce_from_the_roofline_where_unmeasured():
    l40s = cost(model="llama-3-70b", gpu="l40s", tp=4)
    assert l40s.table.roofline_allreduce and any("PCIe" in w for w in l40s.warnings)
    t = 64
    base = l40s.table.step_seconds(t, t * 1024, 0, 0, 0, 0, max)
    assert base > l40s.allreduce(t) > 20e-3  # 160 all-reduces over PCIe Gen4
    h100 = cost(model="llama-3-70b", gpu="h100-sxm", tp=4)
    assert not h100.table.roofline_allreduce and h100.table.gen_comm[0] > 0  # measured NVLink all-reduce


def test_table_cached_on_disk_keyed_by_package_version(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_CACHE_DIR", str(tmp_path))
    measured_db._cached_arrays.cache_clear()
    first = cost(gpu="h200").step_time(8, 8 * 2048)
    files = list((tmp_path / "measured_db").glob("*.npz"))
    assert len(files) == 1
    measured_db._cached_arrays.cache_clear()
    monkeypatch.setattr(measured_db, "query_tables", lambda *a: pytest.fail("the disk cache was not used"))
    assert cost(gpu="h200").step_time(8, 8 * 2048) == first
    spec = load_spec("llama-3-8b")
    dep = measured_db.Deployment("h200_sxm", 1, "bf16", "bf16")
    key = measured_db.table_key(dict(spec.config), dep)
    assert measured_db.table_key(dict(spec.config), measured_db.Deployment("h200_sxm", 2, "bf16", "bf16")) != key
    monkeypatch.setattr(measured_db, "package_version", lambda: "9.9.9")
    assert measured_db.table_key(dict(spec.config), dep) != key


def test_summary_names_the_source():
    from sim.run.engine import simulate
    from sim.trace import synthetic

    trace = synthetic(n=20, rate=5.0, seed=1)
    assert simulate(trace, Scenario(model="llama-3-8b", gpu="h100-sxm")).summary["cost_model"]["source"] == "measured-db"
    assert simulate(trace, Scenario(model="llama-3-8b", gpu="rtx-4090")).summary["cost_model"]["source"] == "roofline"


def test_a_model_the_tables_lack_falls_back_once():
    """tiny-llama's 16-wide heads are not in the attention tables: roofline, reason stated, no recompile."""
    cm = cost(model="tiny-llama", gpu="h100-sxm")
    assert cm.source == "roofline" and "lacks data for this model" in cm.source_detail
    assert len(measured_db._NOT_COVERED) >= 1
    assert cost(model="tiny-llama", gpu="h100-sxm").source_detail == cm.source_detail


def _own_estimate(model: str, dep: measured_db.Deployment, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(load_spec(model).config))
    return aic.EngineHandle.compile(str(tmp_path), dep.system, "vllm", **dep.compile_kwargs())


@pytest.mark.slow
@pytest.mark.parametrize(("model", "tp", "weights", "ep", "contexts"), [
    ("qwen3-30b-a3b", 1, "bf16", False, (512, 1024, 3000, 8192)),  # MoE, experts split by TP
    ("qwen3-30b-a3b", 2, "bf16", True, (512, 1024, 3000, 8192)),  # expert parallel
    ("gpt-oss-120b", 2, "native", False, (512, 1024, 3000, 8192)),  # mxfp4 experts, sliding layers per group
    ("deepseek-v3", 8, "native", False, (512, 1024, 3000, 8192)),  # MLA module tables, fp8 block experts
    # chunked layers: inside the first 8,192-token chunk (at 8,192 a new chunk starts: kvsim's chunked
    # layers then read 0 cached tokens where the package's windowed kernel reads 8,192)
    ("llama-4-scout", 4, "bf16", False, (512, 1024, 3000, 6000)),
])
def test_moe_and_mla_steps_agree_with_the_database_own_estimate(tmp_path, model, tp, weights, ep, contexts):
    """The MoE / MLA kernels of the measured tables: decode and prefill GPU times within 3% of
    aiconfigurator-core's own estimate for the same compile (gpt-oss, Llama-4: kvsim's per-group
    attention against the package's own windowed kernels)."""
    cm = cost(model=model, gpu="h100-sxm", tp=tp, weight_dtype=weights, expert_parallel=ep)
    assert cm.source == "measured-db", cm.source_detail
    dep = measured_db.Deployment("h100_sxm", tp, weights, "bf16", moe=True, expert_parallel=ep)
    handle = _own_estimate(model, dep, tmp_path)
    for b in (1, 8, 32, 64, 200, 256):
        for c in contexts:
            mine = cm.table.step_seconds(b, b * c, 0, 0, 0, 0, max)
            assert mine == pytest.approx(handle.decode_step_latency(b, c, 2) * 1e-3, rel=0.03), (b, c)
    for t in (128, 512, 1024, 3000, 8192):
        mine = cm.table.step_seconds(0, 0, t, 0, t * (t + 1) // 2, 1, max)
        assert mine == pytest.approx(handle.predict_prefill_latency(1, t) * 1e-3, rel=0.03), t


def test_moe_compile_splits_or_places_experts_and_keeps_the_checkpoint_quant():
    dep = measured_db.Deployment("h100_sxm", 4, "bf16", "fp8", moe=True)
    assert dep.compile_kwargs() == {"tp_size": 4, "moe_tp_size": 4, "gemm_quant_mode": "bfloat16",
                                    "moe_quant_mode": "bfloat16", "kvcache_quant_mode": "fp8"}
    ep = measured_db.Deployment("h100_sxm", 4, "native", "bf16", moe=True, expert_parallel=True)
    assert ep.compile_kwargs() == {"tp_size": 4, "moe_ep_size": 4}  # quant from the checkpoint's config
    assert measured_db.Deployment("h100_sxm", 2, "bf16", "bf16").compile_kwargs() == {
        "tp_size": 2, "gemm_quant_mode": "bfloat16"}


def test_gpt_oss_measured_attention_is_scaled_per_kv_group():
    """The table holds one measured full-attention layer; 18 full layers read the context, 18
    sliding layers their 128-token window: at 8K about half of all 36 layers at 8K."""
    cm = cost(model="gpt-oss-120b", gpu="h100-sxm", tp=2, weight_dtype="native")
    assert cm.table.attn_groups and any("per KV group" in w for w in cm.warnings)
    _, row = cm.table.decode_parts(32)
    layer = lambda ctx: measured_table.interp_row(measured_table.CONTEXTS, row, ctx)  # noqa: E731
    grouped = cm.table.grouped_decode(row, 32, 32 * 8192, max)
    assert grouped == pytest.approx(18 * layer(8192) + 18 * layer(128))
    assert 0.45 < grouped / (36 * layer(8192)) < 0.6
    times = cm.decode_step_times(30, 32, 32 * 8000)
    assert [cm.step_time(32, 32 * 8000 + 32 * j) for j in range(30)] == times.tolist()


def test_expert_weights_the_tables_lack_fall_back_with_the_reason():
    """aiconfigurator-core measured gpt-oss's MoE only in mxfp4 (what it ships): bf16 experts are not covered."""
    cm = cost(model="gpt-oss-20b", gpu="h100-sxm", weight_dtype="bf16")
    assert cm.source == "roofline" and "MoE data missing" in cm.source_detail


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["b200", "b300", "gb200"])
def test_blackwell_gpus_have_measured_tables(gpu):
    cm = cost(gpu=gpu)
    assert cm.source == "measured-db" and GPUS[gpu].measured_db_system in ("b200_sxm", "b300_sxm", "gb200")
    assert cm.step_time(32, 32 * 2048) < cost(gpu="h100-sxm").step_time(32, 32 * 2048)  # faster HBM and GEMMs


@pytest.mark.slow
def test_expert_parallel_keeps_the_tp_all_reduces_and_its_own_routing():
    """vLLM without data-parallel attention: EP adds no all-to-all (every rank holds every token);
    the package's vLLM model times the same pre/post-dispatch all-reduces for TP and EP."""
    tp = cost(model="qwen3-30b-a3b", gpu="h100-sxm", tp=2)
    ep = cost(model="qwen3-30b-a3b", gpu="h100-sxm", tp=2, expert_parallel=True, expert_imbalance=1.5)
    assert np.array_equal(tp.table.gen_comm, ep.table.gen_comm) and tp.table.gen_comm[0] > 0
    assert not np.array_equal(tp.table.gen_other, ep.table.gen_other)  # EP's own MoE kernel rows
    assert any("expert_imbalance applies to the roofline only" in w for w in ep.warnings)


def test_scalar_interpolation_is_the_general_one_bit_for_bit():
    """step_seconds' scalar interpolation (no type tests) gives the general functions' floats,
    below, inside and past the grids, on ints, Python floats and numpy scalars."""
    rng = np.random.default_rng(3)
    grid, gy = measured_table.SEQS, measured_table.CONTEXTS
    row, table = rng.random(len(grid)), rng.random((len(grid), len(gy)))
    points = [0, 1, 0.5, 3, 7.25, 1024, 5000, np.float64(33.3)] + list(rng.uniform(0, 2000, 50))
    for x in points:
        assert measured_table._interp1_scalar(grid, row, x) == measured_table._interp1(grid, row, x)
        for y in [0, 10, 100.5, 70000, np.float64(2500.25), float(rng.uniform(0, 200000))]:
            assert (measured_table._interp2_scalar(grid, gy, table, x, y)
                    == measured_table._interp2(grid, gy, table, x, y))

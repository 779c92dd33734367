"""Measured-kernel step times (aiconfigurator-core) as the default source where they exist."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.spec import load_spec
from sim.scenario import Scenario
from sim.timing import measured_db
from sim.timing.cost_model import CostModel, ProfileError

aic = pytest.importorskip("aiconfigurator_core.sdk.engine")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("KVSIM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kvsim-cache"))


def cost(**scenario) -> CostModel:
    return CostModel.from_scenario(None, None, Scenario(**{"model": "llama-3-8b", **scenario}))


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
    key = measured_db.table_key(dict(spec.config), "h200_sxm", 1, "bf16", "bf16")
    monkeypatch.setattr(measured_db, "package_version", lambda: "9.9.9")
    assert measured_db.table_key(dict(spec.config), "h200_sxm", 1, "bf16", "bf16") != key


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

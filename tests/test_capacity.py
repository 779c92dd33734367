"""Capacity planner: budget terms, TP splitting (and replication of kv heads), GPUs required, scenario budget."""

from __future__ import annotations

import pytest

from models.gpus import get_gpu
from models.spec import SpecError, load_spec
from sim.memory.capacity import (
    GiB,
    activation_peak_bytes,
    capacity_table,
    gpus_required,
    kv_bytes_per_token_per_gpu,
    kv_heads_per_gpu,
    max_concurrent,
    memory_budget,
)
from sim.scenario import Scenario
from tests.resolved import kv_budget_of, kv_bytes_per_token_of


def test_budget_terms_add_up():
    b = memory_budget(load_spec("llama-3-8b"), get_gpu("a100-80gb"), kv_dtype="fp8")
    assert b.usable_bytes == int(81_920 * 2**20 * 0.9)
    assert b.kv_budget_bytes == (b.usable_bytes - b.weights_bytes - b.activation_peak_bytes
                                 - b.runtime_overhead_bytes - b.kv_fixed_bytes)
    assert b.kv_fixed_bytes == 2 * 32 * 4 and b.kv_bytes_per_token == 65_536 and b.fits


def test_tp_splits_weights_and_kv_heads():
    spec, gpu = load_spec("llama-3-70b"), get_gpu("h100-sxm")
    one, four = memory_budget(spec, gpu, tp=1), memory_budget(spec, gpu, tp=4)
    assert not one.fits  # 141 GB of weights on one 80 GB GPU
    assert four.weights_bytes == pytest.approx(spec.weight_bytes() / 4, abs=1)
    assert four.kv_heads_per_gpu == 2 and four.kv_bytes_per_token == spec.kv_bytes_per_token() // 4
    assert max_concurrent(one, 2048) == 0 and max_concurrent(four, 2048) > 100


def test_kv_heads_are_replicated_beyond_tp():
    spec = load_spec("llama-3-70b")  # 8 kv heads
    assert kv_heads_per_gpu(spec, 8) == 1
    gqa1 = spec.with_kv_heads(1)  # MQA at tp=8: each rank keeps the one head
    assert kv_heads_per_gpu(gqa1, 8) == 1
    assert kv_bytes_per_token_per_gpu(gqa1, "bf16", 8) == gqa1.kv_bytes_per_token()
    with pytest.raises(SpecError, match="tp=3 must divide the 64 attention heads"):
        kv_heads_per_gpu(spec, 3)
    with pytest.raises(SpecError, match="one must divide the other"):
        kv_heads_per_gpu(load_spec("qwen2.5-7b").with_kv_heads(14), 4)


def test_activation_peak_grows_with_batch_tokens_and_shrinks_with_tp():
    spec = load_spec("qwen2.5-7b")
    small, big = activation_peak_bytes(spec, tokens=2048), activation_peak_bytes(spec, tokens=8192)
    assert big > small > 0
    assert activation_peak_bytes(spec, tp=2) < big
    # MLP dominates the layer for Qwen2.5-7B: residual 2h + gate/up 2I + activated I per token, 2 bytes each
    layer = 8192 * (2 * 3584 + 3 * 18944) * 2
    assert big == layer + 256 * 152_064 * 4 * 2


def test_quantised_kv_holds_more_sequences():
    spec, gpu = load_spec("llama-3-8b"), get_gpu("l40s")
    rows = {d: capacity_table(spec, gpu, [8192], kv_dtype=d)["rows"][0]["max_concurrent"]
            for d in ("bf16", "fp8", "int8", "int4")}
    assert rows["int4"] > rows["fp8"] >= rows["int8"] > rows["bf16"] > 0


def test_gpus_required_picks_the_fewest():
    spec, gpu = load_spec("qwen2.5-7b"), get_gpu("h100-sxm")
    plan = gpus_required(spec, gpu, users=1000, context=8192, tp=1)
    per = max_concurrent(memory_budget(spec, gpu), 8192)
    assert plan.per_replica == per and plan.replicas == -(-1000 // per) and plan.gpus == plan.replicas
    searched = gpus_required(load_spec("llama-3-70b"), gpu, users=10, context=8192)
    assert searched.tp >= 2 and searched.gpus == searched.tp * searched.replicas and searched.per_replica >= 10
    impossible = gpus_required(load_spec("llama-3-70b").with_kv_heads(64), get_gpu("l4"), users=1, context=131_072)
    assert impossible.gpus == 0


def test_capacity_table_rows_and_bad_context():
    table = capacity_table(load_spec("mistral-7b"), get_gpu("h100-sxm"), [4096, 65_536])
    first, second = table["rows"]
    assert first["kv_per_seq_bytes"] == 4096 * 131_072
    assert first["max_concurrent"] == table["assumptions"]["kv_budget_bytes"] // first["kv_per_seq_bytes"]
    assert second["beyond_model_context"] and not first["beyond_model_context"]
    assert first["decode_floor_ms_full"] > first["decode_floor_ms_batch1"]
    with pytest.raises(SpecError, match="context 0"):
        capacity_table(load_spec("mistral-7b"), get_gpu("h100-sxm"), [0])


def test_scenario_kv_budget_explicit_and_derived():
    assert kv_budget_of(Scenario(model="qwen2.5-7b", kv_budget_gib=12.0)) == 12 * GiB
    derived = kv_budget_of(Scenario(model="qwen2.5-7b", gpu="h100-sxm"))
    assert derived == memory_budget(load_spec("qwen2.5-7b"), get_gpu("h100-sxm")).kv_budget_bytes
    tp4 = Scenario(model="llama-3-70b", gpu="h100-sxm", tp=4)
    per_gpu = memory_budget(load_spec("llama-3-70b"), get_gpu("h100-sxm"), tp=4)
    assert kv_budget_of(tp4) == 4 * per_gpu.kv_budget_bytes
    assert kv_bytes_per_token_of(tp4) == load_spec("llama-3-70b").kv_bytes_per_token()
    # token slots from the deployment view equal the per-GPU plan
    assert kv_budget_of(tp4) // kv_bytes_per_token_of(tp4) == (
        per_gpu.kv_budget_bytes // per_gpu.kv_bytes_per_token)


def test_scenario_replicated_heads_and_what_if():
    mqa = Scenario(model="llama-3-70b", tp=8, kv_heads=1)
    assert kv_bytes_per_token_of(mqa) == 8 * load_spec("llama-3-70b").with_kv_heads(1).kv_bytes_per_token()


def test_scenario_that_does_not_fit_is_a_one_line_error():
    with pytest.raises(SpecError, match="no room for KV") as exc:
        kv_budget_of(Scenario(model="llama-3-70b", gpu="l4"))
    assert "\n" not in str(exc.value)

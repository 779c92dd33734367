"""Deployment: a Scenario resolved once; the run reports exactly what the Deployment resolved."""

from __future__ import annotations

from models.spec import load_spec
from sim.memory.capacity import GiB
from sim.run.deployment import Deployment
from sim.run.engine import build, simulate
from sim.scenario import Scenario
from sim.trace import parse_synthetic_spec
from tests.resolved import kv_budget_of


def test_resolved_fields_follow_the_formulas():
    sc = Scenario(model="llama-3-8b", kv_heads=2, kv_dtype="fp8", kv_budget_gib=2.0, block_size=32)
    dep = Deployment.resolve(sc)
    spec = load_spec("llama-3-8b").with_kv_heads(2)
    assert dep.spec == spec and dep.gpu.name == "h100-sxm"
    assert dep.bytes_per_token == spec.kv_bytes_per_token("fp8")
    assert dep.kv_budget_bytes == 2 * GiB - spec.kv_fixed_bytes("fp8")  # fp8 scales come off an explicit budget
    assert dep.num_blocks == dep.kv_budget_bytes // (32 * dep.bytes_per_token)
    assert dep.budget_terms is None and dep.max_model_len == 8192  # llama-3-8b's context, under the 32K cap
    derived = Deployment.resolve(Scenario(model="qwen2.5-7b"))
    assert derived.kv_budget_bytes == kv_budget_of(Scenario(model="qwen2.5-7b"))
    assert derived.budget_terms is not None and derived.budget_terms["kv_budget_bytes"] == derived.kv_budget_bytes


def test_no_chunked_prefill_caps_max_model_len_at_the_token_budget():
    dep = Deployment.resolve(Scenario(chunked_prefill=False, max_batched_tokens=4096, kv_budget_gib=1.0))
    assert dep.max_model_len == 4096


def test_the_run_reports_what_the_deployment_resolved():
    sc = Scenario(kv_budget_gib=1.0, allocator="contiguous", reserve="oracle")
    trace = parse_synthetic_spec("n=30,rate=10,seed=2").generate()
    setup = build(trace, sc)
    dep = setup.deployment
    assert dep is not None and setup.cost is dep.cost and setup.num_blocks == dep.num_blocks
    summary = simulate(trace, sc).summary
    assert (summary["num_blocks"], summary["bytes_per_token"], summary["max_model_len"]) == (
        dep.num_blocks, dep.bytes_per_token, dep.max_model_len)

"""The bundled default (ui/defaults.py) tells the story: KV memory binds on a real trace slice, the
queue keeps up, and paging, reservation policy, GQA and KV quantisation each change the answer."""

from __future__ import annotations

import numpy as np
import pytest

from sim.plan.config_search import SearchOptions
from sim.plan.grid import expand, parse_grid
from sim.plan.search import search
from sim.plan.slo import parse_slo
from sim.plan.workload import Workload
from sim.run.engine import simulate
from sim.run.verdict import binding
from sim.trace import load_trace
from ui.defaults import DEFAULT_SAMPLE, DEFAULT_SCENARIO, PLAN_GPUS


@pytest.fixture(scope="module")
def trace(samples_dir):
    return load_trace(samples_dir / DEFAULT_SAMPLE)


@pytest.fixture(scope="module")
def default(trace):
    return simulate(trace, DEFAULT_SCENARIO)


def test_the_sample_is_a_slice_of_the_real_azure_trace(samples_dir, shared_traces):
    real = (shared_traces / "AzureLLMInferenceTrace_conv.csv").read_text().splitlines()
    ours = (samples_dir / DEFAULT_SAMPLE).read_text().splitlines()
    assert ours == [real[0]] + real[1 + 8000:1 + 8600:2]


def test_default_is_kv_bound_and_keeps_up(trace, default):
    s = default.summary
    assert binding(default) == "kv"
    assert s["num_preemptions"] > 0 and s["kv_cache_usage_perc"]["peak"] == pytest.approx(1.0)
    assert s["completed"] == len(trace) and s["rejected"] == 0
    # The queue does not grow without bound: over the second half of the arrivals, the engine
    # starts (first admission) nearly as many requests as arrive.
    req = default.requests
    last = req["arrival_s"].max()
    window = (req["arrival_s"] >= last / 2) & (req["arrival_s"] <= last)
    started = ((req["admitted_s"] >= last / 2) & (req["admitted_s"] <= last)).sum()
    assert window.sum() - started < 0.2 * window.sum()
    assert s["mean_num_waiting"] < 2
    assert s["overloaded"] is False and s["binding"] == "kv"  # the engine's own verdicts agree


def test_every_kv_choice_changes_the_answer(trace, default):
    base = default.summary

    def run(**changes):
        return simulate(trace, DEFAULT_SCENARIO.replace(**changes)).summary

    contiguous = run(allocator="contiguous", reserve="max")
    pow2 = run(allocator="contiguous", reserve="pow2")
    mha = run(kv_heads=32)
    fp8 = run(kv_dtype="fp8")
    assert contiguous["mean_num_waiting"] > 20 * max(base["mean_num_waiting"], 1)  # max reservation swamps it
    assert pow2["ttft_s"]["p99"] < contiguous["ttft_s"]["p99"] / 5  # a tighter reservation recovers most
    assert contiguous["kv_breakdown_mean"]["token_states"] < base["kv_breakdown_mean"]["token_states"] / 3
    assert mha["mean_num_waiting"] > 20 * max(base["mean_num_waiting"], 1)  # 4x the bytes per token
    assert mha["num_preemptions"] > base["num_preemptions"]
    assert fp8["num_preemptions"] == 0 and fp8["kv_cache_usage_perc"]["peak"] < 0.9
    assert fp8["ttft_s"]["p99"] < base["ttft_s"]["p99"] / 2
    assert np.isfinite(fp8["ttft_s"]["p99"])


def test_default_plan_sweep_finds_kv_binding_at_bf16_and_fp8_helps(trace):
    configs = expand(DEFAULT_SCENARIO, parse_grid({"gpu": list(PLAN_GPUS), "kv_dtype": "bf16,fp8"}))
    rows = search(Workload(trace=trace), configs, SearchOptions(parse_slo("ttft_p99=2,tpot_p99=0.1"))).rows
    by = {(r["gpu"], r["kv_dtype"]): r for r in rows}
    assert by["rtx-4090", "bf16"]["binding"] == "kv"
    assert by["rtx-4090", "fp8"]["max_rate_per_s"] > 1.2 * by["rtx-4090", "bf16"]["max_rate_per_s"]
    assert all(r["slo_met_at_max"] for r in rows)

"""The sustainable rate's interval by replay (sim/plan/rate_interval.py): the time-scaling identity
holds in the engine, the replayed interval differs from the first order where an objective is
absolute, and every row says which method made its interval."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from sim.fidelity.calibrate import default_coefficients
from sim.fleet.replay import simulate
from sim.plan import rate_interval as ri
from sim.plan.config_search import SearchOptions, probe, search_config
from sim.plan.executors import PoolExecutor
from sim.plan.search import search
from sim.plan.slo import parse_slo
from sim.plan.workload import Workload
from sim.run.deployment import Deployment
from sim.scenario import Scenario
from sim.timing.profile import PROFILE_SCHEMA, save_profile, validate_profile

SHAREGPT = "synthetic:preset=sharegpt-like,n=300,rate=10,seed=1"
K = 1.25


def profile_scaled(tmp_path, scale: float, name: str) -> str:
    """llama-3-8b / h100 as a v2 profile with both calibration scales (memory and compute) = scale:
    every step time x scale (the knob sim/fidelity/calibrate.py fits)."""
    dep = Deployment.resolve(Scenario(model="llama-3-8b", gpu="h100-sxm", cost_source="roofline"))
    coef = {k: v * scale for k, v in default_coefficients(dep.cost).items()}
    prof = validate_profile({"schema": PROFILE_SCHEMA, "schema_version": 2, "model": "llama-3-8b",
                             "device": "h100-sxm", "tp": 1, "coefficients": coef}, name)
    return str(save_profile(prof, tmp_path / name))


@pytest.mark.parametrize("flags", [{}, {"replicas": 2, "router": "least-outstanding", "max_num_seqs": 32}])
def test_scaled_steps_at_a_level_are_the_original_at_k_times_it(tmp_path, flags):
    """The identity the interval rests on: steps x K at level L == the original at K L (its API term
    / K), every latency x K, the same schedule (steps, preemptions)."""
    base = Scenario(model="llama-3-8b", gpu="h100-sxm", api_overhead_s=0.01,
                    profile=profile_scaled(tmp_path, 1.0, "one.json"), **flags)
    slow = replace(base, profile=profile_scaled(tmp_path, K, "k.json"))
    w, level = Workload.from_ref(SHAREGPT), 12.0
    scaled = simulate(w.at(level), Deployment.resolve(slow))
    original = simulate(w.at(K * level), ri.scaled_deployment(Deployment.resolve(base), K))
    assert scaled.summary["num_steps"] == original.summary["num_steps"]
    assert scaled.summary["num_preemptions"] == original.summary["num_preemptions"]
    for col in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
        a, b = scaled.requests[col].to_numpy(float), original.requests[col].to_numpy(float)
        assert np.isfinite(a).sum() > 250
        np.testing.assert_allclose(a, K * b, rtol=1e-9, atol=1e-12, equal_nan=True)
    # without the API term's / K the identity is off by (K - 1) x api on every TTFT
    plain = simulate(w.at(K * level), Deployment.resolve(base))
    ttft = scaled.requests["ttft_s"].to_numpy(float) - K * plain.requests["ttft_s"].to_numpy(float)
    assert np.nanmedian(ttft) == pytest.approx(-(K - 1) * 0.01, rel=1e-6)


def test_scaled_slo_and_factors():
    slo = parse_slo("ttft_p99=2,tpot_p99=0.1,goodput=0.9")
    assert ri.scaled_slo(slo, 2.0).targets == (("ttft", "p99", 1.0), ("tpot", "p99", 0.05))
    assert ri.scaled_slo(slo, 2.0).goodput == 0.9
    method = {"log_bounds": {"e2e_s": [-0.2, 0.3], "tpot_s": [-9, 9]}}
    assert ri.step_factors(method) == pytest.approx((math.exp(-0.2), math.exp(0.3)))
    assert ri.step_factors(None) is None


def test_tpot_bound_interval_by_replay_is_wider_below_than_first_order():
    """TPOT p99 near its limit on a flat curve: a slower engine loses far more than its slowdown."""
    w = Workload.from_ref(SHAREGPT)
    row = search_config(w, Scenario(model="llama-3-8b", gpu="h100-sxm"),
                        SearchOptions(parse_slo("tpot_p99=0.012"), rate_intervals="all"))
    rate, (lo, hi) = row["max_rate_per_s"], row["max_rate_interval"]
    assert row["slo_met_at_max"] and row["rate_interval_source"] == ri.RESIMULATED
    k_fast, k_slow = row["rate_interval_step_factors"]
    first_lo, first_hi = rate / k_slow, rate / k_fast
    assert lo < rate < hi
    assert lo < 0.8 * first_lo  # measured: 11.0 vs 22.2 requests/s (rate 27.9; n=600: 7.7 vs 16.5, rate 20.7)
    assert row["rate_interval_probes"] >= 4 and "re-run" in row["rate_interval_note"]
    # the low end is a level the slower engine passes: the original passes S / k_slow at k_slow x it
    dep = Deployment.resolve(Scenario.from_dict(row["scenario"]))
    level = lo / w.rate(1.0) if w.spec is None else lo
    ok = simulate(w.at(k_slow * level), ri.scaled_deployment(dep, k_slow))
    assert not ri.scaled_slo(parse_slo("tpot_p99=0.012"), k_slow).violations(ok.summary, ok.requests)
    assert first_hi > 0


def test_search_re_simulates_the_best_row_and_labels_the_rest():
    w = Workload.from_ref(SHAREGPT)
    configs = [Scenario(model="llama-3-8b", gpu="h100-sxm", max_num_seqs=n) for n in (4, 64)]
    result = search(w, configs, SearchOptions(parse_slo("ttft_p99=1")), workers=1)
    best = set(ri.best_rows(result.rows, None))
    assert len(best) == 1 and result.to_dict()["best"]["row"] in best
    for i, r in enumerate(result.rows):
        if not r["slo_met_at_max"]:
            assert r["max_rate_interval"] is None
        elif i in best:
            assert r["rate_interval_source"] == ri.RESIMULATED and r["rate_interval_probes"] > 0
        else:
            assert r["rate_interval_source"] == ri.FIRST_ORDER and "only the best row" in r["rate_interval_note"]
            k_fast, k_slow = r["rate_interval_step_factors"]
            assert r["max_rate_interval"] == pytest.approx([r["max_rate_per_s"] / k_slow, r["max_rate_per_s"] / k_fast])


def test_links_keep_the_first_order_labelled():
    """Time the identity does not scale (KV tiers, P/D links, swap): first order, and it says why."""
    assert ri.identity_blockers(Scenario()) == []
    assert ri.identity_blockers(Scenario(cpu_tier_gib=8.0, prefix_caching=True)) == ["KV tiers load and store over links"]
    assert ri.identity_blockers(Scenario(preemption="swap"))
    dep = Deployment.resolve(Scenario(cpu_tier_gib=8.0, prefix_caching=True))
    got = ri.resimulated(Workload.from_ref(SHAREGPT), dep, SearchOptions(parse_slo("ttft_p99=1")), 10.0, 10.0,
                         {"log_bounds": {"e2e_s": [-0.1, 0.1]}}, probe)
    assert got.source == ri.FIRST_ORDER and "KV tiers" in got.note and got.probes == 0
    assert got.bounds == pytest.approx([10 * math.exp(-0.1), 10 * math.exp(0.1)])


def test_the_answer_run_is_judged_again_not_run_again():
    """The search's full run at the answer's level serves both ends (judged under S / k): the same
    interval as running it, one run fewer per end."""
    w, options = Workload.from_ref(SHAREGPT), SearchOptions(parse_slo("ttft_p99=1"), rate_intervals="first-order")
    row = search_config(w, Scenario(model="llama-3-8b", gpu="h100-sxm"), options)
    dep = Deployment.resolve(Scenario.from_dict(row["scenario"]))
    level, rate, method = row["level"], row["max_rate_per_s"], {"log_bounds": {"e2e_s": [-0.15, 0.15]}}
    at = probe(w, dep, level, options.slo, False)
    fresh = ri.resimulated(w, dep, options, level, rate, method, probe)
    shared = ri.resimulated(w, dep, options, level, rate, method, probe, at)
    assert shared.bounds == fresh.bounds and shared.source == ri.RESIMULATED
    assert shared.probes == fresh.probes - 1  # fresh runs the level once (the low end), shared never
    assert shared.bounds[0] < rate < shared.bounds[1]


def test_the_ends_side_by_side_on_the_pool_give_the_sequential_bounds():
    """The best row's interval as the search makes it (its ends on the pool's two workers, both judging
    the row's answer run again) against both ends one after the other in this process with no shared
    run (the high end judging the low end's first run): the same bounds, one run fewer."""
    w, options = Workload.from_ref(SHAREGPT), SearchOptions(parse_slo("ttft_p99=1,tpot_p99=0.02"),
                                                           rate_intervals="first-order")
    row = search_config(w, Scenario(model="llama-3-8b", gpu="h100-sxm", max_num_seqs=32), options)
    dep = Deployment.resolve(Scenario.from_dict(row["scenario"]))
    level, rate, method = row["level"], row["max_rate_per_s"], {"log_bounds": {"e2e_s": [-0.2, 0.25]}}
    sequential = ri.resimulated(w, dep, options, level, rate, method, probe)
    at = ri.AnswerRun(level, row["slo_summary"])
    with PoolExecutor(w, options, 2) as ex:
        ends = ex.ends()
        assert ends is not None
        parallel = ri.resimulated(w, dep, options, level, rate, method, probe, at, ends)
    here = ri.resimulated(w, dep, options, level, rate, method, probe, at)  # the row's run shared, in this process
    assert parallel.source == ri.RESIMULATED and parallel.bounds[0] < rate < parallel.bounds[1]
    assert parallel.bounds == sequential.bounds == here.bounds
    assert parallel.probes == here.probes == sequential.probes - 1
    assert parallel.cpu_s > 0  # measured in the workers, handed back with each end


@pytest.mark.slow
def test_azure_conversation_70b_tpot_binds_and_the_replay_widens_the_interval(shared_traces):
    """docs/PLAN.md's measured example: llama-3.1-70b TP4 on h100-sxm, Azure conversation trace, the
    Plan page's SLO. TPOT p99 binds, so the slower engine loses more than its slowdown."""
    w = Workload.from_ref(str(shared_traces / "AzureLLMInferenceTrace_conv.csv"))
    row = search_config(w, Scenario(model="llama-3.1-70b", gpu="h100-sxm", tp=4),
                        SearchOptions(parse_slo("ttft_p99=2,tpot_p99=0.1"), rate_intervals="all"))
    rate, (lo, hi) = row["max_rate_per_s"], row["max_rate_interval"]
    k_fast, k_slow = row["rate_interval_step_factors"]
    assert row["rate_interval_source"] == ri.RESIMULATED and row["tpot_p99_s"] > 0.09  # near its 0.1 s limit
    assert lo < 0.97 * rate / k_slow  # measured at 93e9bf5: 3.43 vs 3.70 (rate 4.65)
    assert hi > rate / k_fast  # 6.20 vs 5.84


def test_a_capped_row_is_not_re_simulated():
    """Met at every rate tried: the rate is a lower bound, so no bracket is re-run (the probe must not run)."""
    def no_probe(*_args):
        raise AssertionError("a capped row ran a probe")

    row = {"max_rate_per_s": 5.0, "cost_per_mtok": 1.0, "tok_s_per_gpu": 10.0, "capped": True, "slo_met_at_max": True,
           "level": 2.0, "scenario": Scenario().to_dict(), "max_rate_interval": [4.0, 6.0],
           "rate_interval_source": ri.FIRST_ORDER, "rate_interval_note": "first"}
    ri.refine_best([row], Workload.from_ref(SHAREGPT), SearchOptions(parse_slo("ttft_p99=1")), no_probe)
    assert row["rate_interval_source"] == ri.FIRST_ORDER and row["max_rate_interval"] == [4.0, 6.0]
    assert row["rate_interval_note"].startswith("not re-simulated: the SLO was met at every rate tried")

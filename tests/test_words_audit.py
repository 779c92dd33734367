"""The words and defaults audit of issue 24: one test per item, each failing on the code before its
fix (the commit that added it says which)."""

from __future__ import annotations

from sim.run.deployment import Deployment
from sim.scenario import Scenario


def test_gpt_oss_120b_fits_one_h100_with_the_default_weight_dtype():
    """Weights default to the checkpoint's shipped dtype: gpt-oss-120b's mxfp4 experts fit one H100
    (bf16 needed 217.6 GiB and "did not fit" until one knew to pick mxfp4 or native)."""
    assert Scenario().weight_dtype == "native"
    dep = Deployment.resolve(Scenario(model="gpt-oss-120b", gpu="h100-sxm"))
    assert dep.kv_budget_bytes > 8 * 2**30 and dep.num_blocks > 0
    # a bf16 checkpoint ships bf16: the default leaves llama-3-8b exactly as before
    native, bf16 = Deployment.resolve(Scenario()), Deployment.resolve(Scenario(weight_dtype="bf16"))
    assert native.kv_budget_bytes == bf16.kv_budget_bytes and native.num_blocks == bf16.num_blocks


def test_best_states_its_criterion_and_offers_three():
    """"Best" meant cheapest and never said so; it now names its criterion, and fewest GPUs and
    highest requests/s per GPU are offered beside lowest $."""
    from sim.plan.rank import CRITERIA, best_row

    rows = [  # a cheap slow card and a dear fast one
        {"max_rate_per_s": 2.0, "gpus": 1, "gpus_for_target": 5, "usd_per_gpu_hour": 1.0, "tok_s_per_gpu": 400.0,
         "cost_per_mtok": 0.7},
        {"max_rate_per_s": 5.0, "gpus": 1, "gpus_for_target": 2, "usd_per_gpu_hour": 4.0, "tok_s_per_gpu": 1000.0,
         "cost_per_mtok": 1.1},
    ]
    assert set(CRITERIA) == {"cost", "gpus", "rate"}
    cost, gpus, rate = (best_row(rows, 10.0, by) for by in ("cost", "gpus", "rate"))
    assert (cost["row"], cost["criterion"]) == (0, "lowest $ per hour for 10 requests/s")  # $5/h against $8/h
    assert (gpus["row"], gpus["criterion"]) == (1, "fewest GPUs for 10 requests/s")
    assert (rate["row"], rate["criterion"]) == (1, "highest requests/s per GPU")
    assert best_row(rows)["criterion"] == "lowest $ per million output tokens"

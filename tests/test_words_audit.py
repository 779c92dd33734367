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

"""Cost model: roofline sanity, vectorised decode steps, calibration profiles."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.gpus import get_gpu
from models.spec import load_spec
from sim.plan.capacity import bandwidth_floor_s
from sim.scenario import Scenario, ScenarioError
from sim.timing.cost_model import CostModel, ProfileError, fit_profile, load_profile, save_profile

PURE = {"compute_efficiency": 1.0, "memory_efficiency": 1.0, "fixed_overhead_s": 0.0}


def model(**scenario) -> CostModel:
    return CostModel.from_scenario(None, None, Scenario(**{"model": "qwen2.5-7b", **scenario}))


def test_decode_at_batch_1_is_the_bandwidth_floor():
    spec, gpu = load_spec("qwen2.5-7b"), get_gpu("h100-sxm")
    pure = CostModel.from_scenario(spec, gpu, Scenario(model="qwen2.5-7b"), **PURE)
    t = pure.step_time(1, 1000, 1000)
    floor = bandwidth_floor_s(spec, gpu, batch=1, context=1001)  # KV read + the new token's KV written
    assert t == pytest.approx(floor, rel=1e-9)
    assert 4.5e-3 < t < 4.7e-3
    assert 4.5e-3 < model().step_time(1, 1000, 1000) < 7e-3  # defaults: 85% of HBM peak + 0.4 ms


def test_prefill_is_compute_bound():
    cm = CostModel.from_scenario(None, None, Scenario(model="qwen2.5-7b"), **PURE)
    t = cm.step_time(8192, 0, 8192 * 4096)
    compute = (cm.matmul_flops_per_token * 8192 + cm.attn_flops_per_pair * 8192 * 4096) / cm.peak_flops
    assert t == pytest.approx(compute, rel=1e-9)
    assert t > 10 * cm.step_time(1, 0, 0)


def test_decode_step_times_match_step_time_and_grow():
    cm = model()
    times = cm.decode_step_times(50, 32, 32 * 500)
    assert times.shape == (50,) and np.all(np.diff(times) >= 0)
    for j in (0, 17, 49):
        kv = 32 * 500 + 32 * j
        assert times[j] == pytest.approx(cm.step_time(32, kv, kv), rel=1e-12)
    assert cm.decode_step_times(0, 32, 0).shape == (0,)


@pytest.mark.parametrize("scenario", [{}, {"tp": 4, "model": "llama-3-70b", "gpu": "h200"}, {"weight_dtype": "fp8"}])
def test_scalar_step_time_is_bit_identical_to_the_array_path(scenario):
    """step_time runs on Python floats (the engine's per-event path); the engine mixes it with
    decode_step_times' arrays, so the two must agree to the last bit, not approximately."""
    cm = model(**scenario)
    rng = np.random.default_rng(1)
    for batch in (1, 7, 32, 255):
        start = int(rng.integers(0, 10**6))
        times = cm.decode_step_times(40, batch, start)
        for j in range(40):
            kv = start + batch * j
            assert cm.step_time(batch, kv, kv) == times[j]
    assert cm.step_time(8192, 0, 8192 * 4096) == float(cm._times(np.float64(8192), np.float64(0), np.float64(8192 * 4096), np.maximum))


def test_scalar_step_time_is_bit_identical_with_a_profile(tmp_path):
    prof = fit_profile(synthetic_rows((2e-3, 3e-5, 4e-9, 5e-12)), model="qwen2.5-7b")
    cm = model(profile=str(save_profile(prof, tmp_path / "p.json")))
    times = cm.decode_step_times(30, 13, 12345)
    assert [cm.step_time(13, 12345 + 13 * j, 12345 + 13 * j) for j in range(30)] == times.tolist()


def test_tensor_parallel_adds_allreduce_and_splits_work():
    one = CostModel.from_scenario(None, None, Scenario(model="llama-3-70b", gpu="h200", tp=1))
    four = CostModel.from_scenario(None, None, Scenario(model="llama-3-70b", gpu="h200", tp=4))
    assert one.allreduce_fixed_s == 0 and four.allreduce_fixed_s > 0 and four.allreduce_s_per_token > 0
    assert four.weight_bytes == pytest.approx(one.weight_bytes / 4)
    assert four.step_time(64, 64 * 2048, 64 * 2048) < one.step_time(64, 64 * 2048, 64 * 2048)


def test_fp8_weights_use_fp8_peak_and_a100_falls_back():
    assert model(weight_dtype="fp8").peak_flops == get_gpu("h100-sxm").fp8_flops
    assert model(weight_dtype="fp8", gpu="a100-80gb").peak_flops == get_gpu("a100-80gb").bf16_flops


def synthetic_rows(coef, n=400, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    new = rng.integers(1, 8192, n)
    kv = rng.integers(0, 500_000, n)
    pairs = new * rng.integers(1, 8192, n)
    t = coef[0] + coef[1] * new + coef[2] * kv + coef[3] * pairs
    t = t * (1 + noise * rng.standard_normal(n))
    return np.column_stack([new, kv, pairs, t])


def test_fit_recovers_known_coefficients():
    truth = (2.0e-3, 3.0e-5, 4.0e-9, 5.0e-12)
    prof = fit_profile(synthetic_rows(truth), device="test", model="qwen2.5-7b")
    got = prof["coefficients"]
    for name, want in zip(("intercept_s", "per_new_token_s", "per_kv_read_token_s", "per_attn_pair_s"), truth,
                          strict=True):
        assert got[name] == pytest.approx(want, rel=1e-6)
    assert prof["fit"]["r2"] == pytest.approx(1.0) and prof["device"] == "test"
    noisy = fit_profile(synthetic_rows(truth, noise=0.02, seed=1))["coefficients"]
    assert noisy["per_new_token_s"] == pytest.approx(truth[1], rel=0.05)


def test_fit_keeps_coefficients_non_negative_and_handles_constant_columns():
    rows = synthetic_rows((1e-3, 2e-5, 0.0, 0.0), noise=0.01, seed=2)
    rows[:, 2] = 0  # no KV read measured
    coef = fit_profile(rows)["coefficients"]
    assert all(v >= 0 for v in coef.values()) and coef["per_kv_read_token_s"] == 0
    with pytest.raises(ProfileError, match="at least 4"):
        fit_profile(rows[:3])
    with pytest.raises(ProfileError, match="rows of"):
        fit_profile([[1, 2, 3]] * 5)


def test_profile_round_trip_and_use_in_scenario(tmp_path):
    prof = fit_profile(synthetic_rows((2e-3, 3e-5, 4e-9, 5e-12)), device="NVIDIA H100", model="qwen2.5-7b", tp=1)
    path = save_profile(prof, tmp_path / "p.json")
    assert load_profile(path)["coefficients"] == pytest.approx(prof["coefficients"])
    cm = model(profile=str(path))
    assert cm.source.startswith("profile") and cm.warnings == ()
    assert cm.step_time(10, 1000, 5000) == pytest.approx(2e-3 + 10 * 3e-5 + 1000 * 4e-9 + 5000 * 5e-12, rel=1e-6)
    assert cm.decode_step_times(3, 4, 100)[2] == pytest.approx(cm.step_time(4, 108, 108))
    other = CostModel.from_scenario(None, None, Scenario(model="llama-3-8b", profile=str(path)))
    assert any("model=qwen2.5-7b" in w for w in other.warnings)


@pytest.mark.parametrize(("content", "message"), [
    ("{", "not valid JSON"),
    (json.dumps({"schema": "other"}), "not a kvsim cost profile"),
    (json.dumps({"schema": "kvsim.cost_profile", "schema_version": 9}), "schema_version 9 unsupported"),
    (json.dumps({"schema": "kvsim.cost_profile", "schema_version": 1,
                 "coefficients": {"intercept_s": 1e-3, "per_new_token_s": -1, "per_kv_read_token_s": 0,
                                  "per_attn_pair_s": 0}}), "per_new_token_s must be a finite number >= 0"),
    (" " * (1 << 20) + "{}", "too large"),
])
def test_bad_profiles_are_one_line_scenario_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ProfileError, match=message) as exc:
        model(profile=str(path))
    assert isinstance(exc.value, ScenarioError) and "\n" not in str(exc.value) and "bad.json" in str(exc.value)

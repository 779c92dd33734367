"""Cost model: roofline sanity, vectorised decode steps, calibration profiles."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.gpus import get_gpu
from models.spec import load_spec
from sim.memory.capacity import bandwidth_floor_s
from sim.scenario import Scenario, ScenarioError
from sim.timing.cost_model import CostModel, ProfileError, fit_profile, load_profile, save_profile
from sim.timing.profile import COEFFICIENTS_V2
from tests.resolved import cost_of

PURE = {"prefill_efficiency": 1.0, "decode_efficiency": 1.0, "attention_efficiency": 1.0, "memory_efficiency": 1.0,
        "step_overhead_s": 0.0, "per_seq_s": 0.0, "layer_overhead_s": 0.0}


def model(**scenario) -> CostModel:
    return cost_of(Scenario(**{"model": "qwen2.5-7b", "cost_source": "roofline", **scenario}))


def test_decode_at_batch_1_is_the_bandwidth_floor():
    spec, gpu = load_spec("qwen2.5-7b"), get_gpu("h100-sxm")
    pure = CostModel.from_scenario(spec, gpu, Scenario(model="qwen2.5-7b", cost_source="roofline"), **PURE)
    t = pure.step_time(1, 1000)
    floor = bandwidth_floor_s(spec, gpu, batch=1, context=1001)  # KV read + the new token's KV written
    table = spec.param_breakdown()["embedding"] * 2 / gpu.hbm_bandwidth  # a lookup: never streamed whole
    elementwise = pure.elementwise_bytes_per_token / gpu.hbm_bandwidth
    assert t == pytest.approx(floor - table + elementwise, rel=1e-6)
    assert 4.1e-3 < t < 4.4e-3
    assert 5e-3 < model().step_time(1, 1000) < 7e-3  # defaults: measured H100 streaming (84%) + overheads


def test_prefill_is_compute_bound():
    cm = cost_of(Scenario(model="qwen2.5-7b", cost_source="roofline"), **PURE)
    pairs = 8192 * 8193 // 2
    t = cm.step_time(0, 0, 8192, 0, pairs, 1)
    compute = (cm.matmul_flops_per_token * 8192 + cm.head_flops_per_seq + cm.attn_flops_per_pair * pairs) / cm.peak_flops
    elementwise = cm.elementwise_bytes_per_token * 8192 / cm.hbm_bandwidth
    assert t == pytest.approx(compute + elementwise, rel=1e-9)
    assert t > 10 * cm.step_time(1, 0)
    # logits for sampled tokens only: 8192 prompt tokens pay one lm_head row, not 8192
    assert cm.step_time(0, 0, 8192, 0, pairs, 2) - t == pytest.approx(cm.head_flops_per_seq / cm.peak_flops)


def test_decode_step_times_match_step_time_and_grow():
    cm = model()
    times = cm.decode_step_times(50, 32, 32 * 500)
    assert times.shape == (50,) and np.all(np.diff(times) >= 0)
    for j in (0, 17, 49):
        kv = 32 * 500 + 32 * j
        assert times[j] == pytest.approx(cm.step_time(32, kv), rel=1e-12)
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
            assert cm.step_time(batch, kv) == times[j]
    f = np.float64
    assert cm.step_time(3, 900, 8192, 10, 8192 * 4096, 2) == float(cm._times(f(3), f(900), f(8192), f(10), f(8192 * 4096), f(2), np.maximum))


@pytest.mark.parametrize("scenario", [{"cost_source": "measured-db", "model": "llama-3-8b", "gpu": "h100-sxm"},
                                      {"cost_source": "measured-db", "model": "gpt-oss-20b", "gpu": "h100-sxm"},
                                      {"cost_source": "measured-db", "model": "llama-4-scout", "gpu": "h100-sxm", "tp": 4},
                                      {}])
def test_decode_timer_is_decode_time_bit_for_bit(scenario):
    """decode_timer(b) is the decode run's per-batch-size form of decode_time: the same floats,
    below the first measured context, between grid points and past the last."""
    cm = cost_of(Scenario(**{"model": "qwen2.5-7b", "cost_source": "roofline", **scenario}))
    for batch in (1, 7, 32, 255):
        timer = cm.decode_timer(batch)
        for kv in [0, 5, batch * 16, batch * 100 + 3, 10**6 + 1, batch * 200_000]:
            assert timer(kv) == cm.decode_time(batch, kv)
            assert timer(kv) == cm.step_time(batch, kv)


@pytest.mark.parametrize("scenario", [{"cost_source": "measured-db", "model": "llama-3-8b", "gpu": "h100-sxm"},
                                      {"cost_source": "measured-db", "model": "gpt-oss-20b", "gpu": "h100-sxm"},
                                      {"cost_source": "measured-db", "model": "llama-4-scout", "gpu": "h100-sxm", "tp": 4},
                                      {}])
def test_decode_timer_ends_are_single_steps_summed_bit_for_bit(scenario):
    """timer.ends sums a run's step times in one loop that keeps the context grid segment: the very
    floats of adding decode_time step by step, across segments (a batch of 1 walks through the grid's
    first points), below the first point, past the last, and stopping at the step that reaches the horizon."""
    cm = cost_of(Scenario(**{"model": "qwen2.5-7b", "cost_source": "roofline", **scenario}))
    for batch, kv, k in [(1, 0, 600), (3, 10, 400), (64, 64 * 1000, 300), (255, 255 * 120_000, 50)]:
        timer, t, expected = cm.decode_timer(batch), 1.5, []
        for j in range(k):
            t += cm.decode_time(batch, kv + j * batch)
            expected.append(t)
        assert timer.ends(1.5, kv, k, float("inf")) == expected
        assert timer.ends(1.5, kv, k, expected[k // 2]) == expected[: k // 2 + 1]
        assert timer.ends(1.5, kv, k, (expected[7] + expected[8]) / 2) == expected[:9]


def test_scalar_step_time_is_bit_identical_with_a_profile(tmp_path):
    prof = fit_profile(synthetic_rows((2e-3, 3e-5, 4e-9, 5e-12)), model="qwen2.5-7b")
    cm = model(profile=str(save_profile(prof, tmp_path / "p.json")))
    times = cm.decode_step_times(30, 13, 12345)
    assert [cm.step_time(13, 12345 + 13 * j) for j in range(30)] == times.tolist()


def test_tensor_parallel_adds_allreduce_and_splits_work():
    one = cost_of(Scenario(model="llama-3-70b", gpu="h200", tp=1, cost_source="roofline"))
    four = cost_of(Scenario(model="llama-3-70b", gpu="h200", tp=4, cost_source="roofline"))
    assert one.allreduce_fixed_s == 0 and four.allreduce_fixed_s > 0 and four.allreduce_s_per_token > 0
    assert four.weight_bytes == pytest.approx(one.weight_bytes / 4)
    assert four.step_time(64, 64 * 2048) < one.step_time(64, 64 * 2048)


def test_allreduce_costs_follow_the_link():
    """70B at TP4: NVLink (H100 SXM) vs PCIe Gen4 (L40S): latency and bus bandwidth of each link kind."""
    from sim.timing import roofline as rl

    nv = cost_of(Scenario(model="llama-3-70b", gpu="h100-sxm", tp=4, cost_source="roofline"))
    pcie = cost_of(Scenario(model="llama-3-70b", gpu="l40s", tp=4))
    assert (nv.allreduce_link, pcie.allreduce_link) == ("nvlink", "pcie")
    layers, hidden = 80, 8192
    assert nv.allreduce_fixed_s == pytest.approx(2 * layers * rl.NVLINK_ALLREDUCE_LATENCY_S)
    assert pcie.allreduce_fixed_s == pytest.approx(2 * layers * rl.PCIE_ALLREDUCE_LATENCY_S)
    bytes_per_token = 2 * layers * 2 * 3 / 4 * hidden * 2  # 2 all-reduces per layer, ring factor 2(tp-1)/tp, bf16
    assert nv.allreduce_s_per_token == pytest.approx(bytes_per_token / (450e9 * rl.NVLINK_BUS_EFFICIENCY))
    assert pcie.allreduce_s_per_token == pytest.approx(bytes_per_token / (32e9 * rl.PCIE_BUS_EFFICIENCY))
    # a decode step of 64 sequences: ~34 ms of all-reduce over PCIe Gen4, ~1.6 ms over NVLink
    nv_comm = nv.allreduce_fixed_s + 64 * nv.allreduce_s_per_token
    pcie_comm = pcie.allreduce_fixed_s + 64 * pcie.allreduce_s_per_token
    assert 20e-3 < pcie_comm < 50e-3 and 1e-3 < nv_comm < 2.5e-3 and pcie_comm > 10 * nv_comm


def test_pcie_allreduce_matches_a_measured_point():
    """aiconfigurator-core's vLLM 0.19.0 custom all-reduce on 2 x RTX PRO 6000 (PCIe Gen5): 1 MiB of
    bf16 (524,288 elements) takes 91.5 us, 8 MiB 567 us. One all-reduce of the model = 1/(2 layers)."""
    cm = cost_of(Scenario(model="qwen2.5-72b", gpu="rtx-pro-6000", tp=2, cost_source="roofline"))
    layers, hidden = 80, 8192
    for elements, measured in ((524_288, 91.5e-6), (4_194_304, 567e-6)):
        one = (cm.allreduce_fixed_s + cm.allreduce_s_per_token * elements / hidden) / (2 * layers)
        assert one == pytest.approx(measured, rel=0.2)


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
    # a 10-token prefill chunk after 1000 cached tokens (5000 pairs): new 10, K/V read 1000, pairs 5000
    assert cm.step_time(0, 0, 10, 1000, 5000, 1) == pytest.approx(2e-3 + 10 * 3e-5 + 1000 * 4e-9 + 5000 * 5e-12, rel=1e-6)
    assert cm.decode_step_times(3, 4, 100)[2] == pytest.approx(cm.step_time(4, 108))
    other = cost_of(Scenario(model="llama-3-8b", profile=str(path)))
    assert any("model=qwen2.5-7b" in w for w in other.warnings)


@pytest.mark.parametrize(("content", "message"), [
    ("{", "not valid JSON"),
    (json.dumps({"schema": "other"}), "not a kvsim cost profile"),
    (json.dumps({"schema": "kvsim.cost_profile", "schema_version": 9}), "schema_version 9 unsupported"),
    (json.dumps({"schema": "kvsim.cost_profile", "schema_version": 1,
                 "coefficients": {"intercept_s": 1e-3, "per_new_token_s": -1, "per_kv_read_token_s": 0,
                                  "per_attn_pair_s": 0}}), r"coefficients.per_new_token_s: -1 is out of range \[0, 60\]"),
    # NaN named by its field, not "not valid JSON"; an absurd finite coefficient refused (issue 29)
    ('{"schema": "kvsim.cost_profile", "schema_version": 1, "coefficients": {"intercept_s": 1e-3, '
     '"per_new_token_s": NaN, "per_kv_read_token_s": 0, "per_attn_pair_s": 0}}', "coefficients.per_new_token_s: NaN is not a number"),
    (json.dumps({"schema": "kvsim.cost_profile", "schema_version": 1,
                 "coefficients": {"intercept_s": 1e300, "per_new_token_s": 0, "per_kv_read_token_s": 0,
                                  "per_attn_pair_s": 0}}), r"coefficients.intercept_s: 1e\+300 is out of range"),
    (json.dumps({"schema": "kvsim.cost_profile", "schema_version": 1, "tp": 10**400,
                 "coefficients": {"intercept_s": 1e-3, "per_new_token_s": 0, "per_kv_read_token_s": 0,
                                  "per_attn_pair_s": 0}}), "bad.json: tp: 1000.* is out of range"),
    (" " * (1 << 20) + "{}", "too large"),
])
def test_bad_profiles_are_one_line_scenario_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ProfileError, match=message) as exc:
        model(profile=str(path))
    assert isinstance(exc.value, ScenarioError) and "\n" not in str(exc.value) and "bad.json" in str(exc.value)


def v2_rows(coef, n=300, noise=0.0, seed=0):
    """Step shapes spanning decode (batch 1-256) and prefill (16-8192 tokens), timed by the v2 form."""
    from sim.timing.profile_fit import v2_times

    rng = np.random.default_rng(seed)
    dec = rng.random(n) < 0.6
    d = np.where(dec, rng.integers(1, 257, n), rng.integers(0, 8, n)).astype(float)
    kd = d * rng.integers(16, 8192, n)
    p = np.where(dec, 0, rng.integers(16, 8193, n)).astype(float)
    kp = np.where(dec, 0, rng.integers(0, 4096, n)).astype(float)
    pp = p * kp + p * (p + 1) / 2
    nps = (p > 0).astype(float)
    shape = np.column_stack([d, kd, p, kp, pp, nps])
    t = v2_times(dict(zip(COEFFICIENTS_V2, coef, strict=True)), shape) * (1 + noise * rng.standard_normal(n))
    return np.column_stack([shape, t])


def test_v2_fit_recovers_known_coefficients_within_two_percent(tmp_path):
    """Done-when of issue 10: a profile fitted on synthetic data from known coefficients recovers them."""
    from sim.timing.profile_fit import fit_profile_v2

    truth = (4e-4, 1.5e-5, 5.5e-5, 5.2e-3, 2.0e-11, 4.0e-8)  # 8B on an H100-like GPU: ridge near 95 tokens
    prof = fit_profile_v2(v2_rows(truth), model="qwen2.5-7b")
    for name, want in zip(COEFFICIENTS_V2, truth, strict=True):
        assert prof["coefficients"][name] == pytest.approx(want, rel=0.02), name
    # 1% timing noise: the terms that carry most of the time stay within 10% (the prefill attention
    # term is <1% of a prefill step here, so noise of that size hides it)
    noisy = fit_profile_v2(v2_rows(truth, noise=0.01, seed=3))["coefficients"]
    for name in ("per_token_s", "weights_s", "per_kv_token_s"):
        assert noisy[name] == pytest.approx(truth[COEFFICIENTS_V2.index(name)], rel=0.1), name
    # a v2 profile drives the simulator, scalar and vectorised paths bit-identical
    cm = model(profile=str(save_profile(prof, tmp_path / "v2.json")))
    assert cm.source == "profile"
    times = cm.decode_step_times(20, 64, 64 * 1000)
    assert [cm.step_time(64, 64 * 1000 + 64 * j) for j in range(20)] == times.tolist()
    assert cm.step_time(1, 1000) == pytest.approx(truth[0] + truth[1] + truth[3] + truth[5] * 1000)


def test_old_v1_profile_file_still_loads(tmp_path):
    """A schema-v1 file exactly as kvsim wrote them before calibration v2."""
    path = tmp_path / "old.json"
    path.write_text(json.dumps({
        "schema": "kvsim.cost_profile", "schema_version": 1, "device": "NVIDIA H100 80GB HBM3", "model": "qwen2.5-7b",
        "tp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16",
        "coefficients": {"intercept_s": 0.0061, "per_new_token_s": 2.1e-05, "per_kv_read_token_s": 1.9e-09,
                         "per_attn_pair_s": 4.0e-13},
        "fit": {"samples": 240, "r2": 0.998, "rmse_s": 0.0002, "max_rel_error": 0.06, "median_rel_error": 0.01}}))
    cm = model(profile=str(path))
    assert cm.step_time(8, 8000) == pytest.approx(0.0061 + 8 * 2.1e-5 + 8000 * 1.9e-9 + 8000 * 4e-13)


def test_gpu_backend_rows_map_to_v2_shapes():
    from sim.timing.profile_fit import shapes_from_v1_rows

    rows = np.array([[32, 32 * 500, 32 * 500, 0.01], [512, 0, 512 * 513 // 2, 0.05]])
    out = shapes_from_v1_rows(rows)
    assert out[0].tolist() == [32, 16000, 0, 0, 0, 0, 0.01]
    assert out[1].tolist() == [0, 0, 512, 0, 512 * 513 // 2, 1, 0.05]


@pytest.mark.parametrize("model_name", ["llama-3-8b", "gpt-oss-20b"])
def test_measured_table_memo_gives_the_computed_floats(model_name):
    """MeasuredTable keeps the pieces of a general step that depend on one integer of its shape
    (tokens, sequences, a chunk and its cached prefix): a step timed from the memo is the very float
    timed with the memo empty, for prefill, mixed and chunked shapes, bounded in size."""
    from sim.timing import measured_table

    cm = cost_of(Scenario(model=model_name, gpu="h100-sxm", cost_source="measured-db"))
    assert cm.table is not None
    shapes = [(0, 0, 512, 0, 512 * 513 // 2, 1), (7, 7 * 900, 300, 0, 300 * 301 // 2, 1),
              (31, 31 * 2000, 2048, 4096, 2048 * 4096 + 2048 * 2049 // 2, 1), (3, 3000, 700, 128, 90_000, 2),
              (0, 0, 1, 0, 1, 1), (255, 255 * 70_000, 8000, 0, 8000 * 8001 // 2, 1)]
    fresh = []
    for shape in shapes:
        cm.table._memo.clear()
        fresh.append(cm.step_time(*shape))
    assert cm.table._memo  # filled by the last one
    assert [cm.step_time(*shape) for shape in shapes] == fresh  # warm memo, shape after shape
    assert [cm.step_time(*shape) for shape in shapes] == fresh
    for i in range(measured_table.MEMO_LIMIT + 10):
        cm.table._remember(("probe", i), i)
    assert len(cm.table._memo) <= measured_table.MEMO_LIMIT


def test_prefill_step_in_one_call_is_the_general_formula_bit_for_bit():
    """On the plain measured table a step with a prompt chunk is timed by MeasuredTable.prefill_step
    (one call, d's half of the decode-attention interpolation kept): the very floats of the general
    path (_times -> step_seconds) over random shapes, small and large contexts, with and without
    decoders, memo cold and warm."""
    cm = cost_of(Scenario(model="llama-3-8b", gpu="h100-sxm", cost_source="measured-db"))
    assert cm._table_prefill
    assert not cost_of(Scenario(model="gpt-oss-20b", gpu="h100-sxm", cost_source="measured-db"))._table_prefill
    rng = np.random.default_rng(5)
    shapes = [(0, 0, 512, 0, 0, 1), (3, 10, 300, 0, 0, 1), (33, 33 * 16, 64, 0, 0, 1), (2000, 2000 * 9000, 50, 10, 0, 1)]
    for _ in range(300):
        d = int(rng.integers(0, 300))
        np_ = int(rng.integers(1, 4))
        shapes.append((d, d * int(rng.integers(1, 40_000)), int(rng.integers(1, 9000)), int(rng.integers(0, 70_000)), 0, np_))
    for warm in (False, True):
        if not warm:
            cm.table._memo.clear()
        for shape in shapes:
            general = float(cm._times(*(float(v) for v in shape), max))
            assert cm.step_time(*shape) == general, shape


@pytest.mark.parametrize("model_name", ["llama-3-8b", "gpt-oss-20b"])
def test_step_shape_without_pairs_times_the_same_where_pairs_are_not_read(model_name):
    """The executor leaves a plan's attention pairs uncounted when the cost model does not read them
    (`reads_prefill_pairs` False: the plain measured table times prompt chunks from tokens and cached
    prefix): the step time is the very float of the full shape's, with and without decoders and with
    several chunks; a table with attention groups reads them and keeps the count."""
    from sim.core.step_types import StepPlan

    cm = cost_of(Scenario(model=model_name, gpu="h100-sxm", cost_source="measured-db"))
    assert cm.reads_prefill_pairs == (model_name == "gpt-oss-20b")
    rng = np.random.default_rng(11)
    for _ in range(200):
        d = int(rng.integers(0, 64))
        ctx = rng.integers(1, 30_000, size=d).astype(np.int64)
        n = int(rng.integers(0, 4))
        plan = StepPlan(0.0, np.arange(d, dtype=np.int64), ctx, prefill_ids=list(range(100, 100 + n)),
                        prefill_context=[int(x) for x in rng.integers(0, 50_000, size=n)],
                        prefill_tokens=[int(x) for x in rng.integers(0, 4096, size=n)])
        full, short = plan.step_shape(), plan.step_shape(with_pairs=False)
        assert short[:4] == full[:4] and short[5] == full[5] and short[4] == 0
        if not cm.reads_prefill_pairs and full[0] + full[2]:
            assert cm.step_time(*short) == cm.step_time(*full), full

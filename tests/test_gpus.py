"""GPU catalog and custom GPU definitions."""

from __future__ import annotations

import json

import pytest

from models.gpus import GPUS, GpuError, get_gpu, gpu_from_dict, list_gpus

REQUIRED = ["h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "l40s", "l4", "a10g", "rtx-4090", "mi300x"]


def test_catalog_has_every_required_gpu_with_a_source():
    assert set(REQUIRED) <= set(list_gpus())
    for name in REQUIRED:
        g = get_gpu(name)
        assert g.hbm_bytes > 16 * 2**30 and g.hbm_bandwidth > 1e11 and g.bf16_flops > 5e13
        assert g.host_link_bandwidth > 0 and g.nvlink_bandwidth >= 0
        assert "datasheet" in g.source or "whitepaper" in g.source


def test_driver_reported_memory_convention():
    assert get_gpu("h100-sxm").hbm_bytes == 81_559 * 2**20
    assert "81,559 MiB" in get_gpu("h100-sxm").source


def test_no_fp8_on_ampere_and_fallback_to_bf16():
    for name in ("a100-40gb", "a100-80gb", "a10g"):
        g = get_gpu(name)
        assert g.fp8_flops == 0 and "no fp8" in g.source
        assert g.peak_flops("fp8") == g.bf16_flops
    h = get_gpu("h100-sxm")
    assert h.peak_flops("fp8") == h.fp8_flops == pytest.approx(2 * h.bf16_flops, rel=0.01)


def test_names_are_case_insensitive_and_aliased():
    assert get_gpu("H100") is GPUS["h100-sxm"]
    assert get_gpu("RTX 4090") is GPUS["rtx-4090"]
    with pytest.raises(GpuError, match="unknown GPU 'b900'"):
        get_gpu("b900")


def test_custom_gpu_from_dict_in_human_units():
    g = gpu_from_dict({"name": "my-gpu", "hbm_gib": 96, "hbm_bandwidth_gbs": 4000, "bf16_tflops": 500})
    assert g.hbm_bytes == 96 * 2**30 and g.hbm_bandwidth == 4e12 and g.bf16_flops == 5e14
    assert g.fp8_flops == 0 and g.nvlink_bandwidth == 0
    assert g.sm_count == 0 and g.cuda_major == 0  # not given: the pool takes its defaults
    g = gpu_from_dict({"name": "h", "hbm_gib": 96, "hbm_bandwidth_gbs": 4000, "bf16_tflops": 500, "sm_count": 78,
                       "compute_capability": "9.0"})
    assert g.sm_count == 78 and g.cuda_major == 9


@pytest.mark.parametrize(("data", "message"), [
    ({"hbm_gib": 10, "bf16_tflops": 1}, "needs a positive hbm_bandwidth"),
    ({"hbm_gib": -1, "hbm_bandwidth_gbs": 1, "bf16_tflops": 1}, r"hbm_gib: -1 is out of range \[0, 1,048,576\]"),
    ({"hbm_gib": "80", "hbm_bandwidth_gbs": 1, "bf16_tflops": 1}, "hbm_gib: expected a number, got '80'"),
    # absurd but finite sizes: refused naming the key as written, never an OverflowError (issue 29)
    ({"hbm_gib": 1e300, "hbm_bandwidth_gbs": 1, "bf16_tflops": 1}, r"hbm_gib: 1e\+300 is out of range \[0, 1,048,576\]"),
    ({"hbm_bytes": 10**400, "hbm_bandwidth_gbs": 1, "bf16_tflops": 1}, "hbm_bytes: 1000000000.* is out of range"),
    ({"hbm_gib": 80, "hbm_bandwidth_gbs": 1, "bf16_tflops": 1e30}, "bf16_tflops: 1e\\+30 is out of range"),
    ({"hbm_gib": 80, "hbm_bandwidth_gbs": 1, "bf16_tflops": 1, "gemm_efficiency": 1.5}, "gemm_efficiency: 1.5 is out of range"),
    ({"hbm_gib": 80, "hbm_bandwidth_gbs": 1, "bf16_tflops": 1, "tdp": 700}, "unknown key"),
    ({"hbm_gib": 80, "hbm_bandwidth_gbs": 1, "bf16_tflops": 1, "compute_capability": "hopper"},
     "compute_capability must look like 9.0, not 'hopper'"),
    ({"hbm_gib": 80, "hbm_bandwidth_gbs": 1, "bf16_tflops": 1, "sm_count": -3}, "sm_count: -3 is out of range"),
    ({"hbm_gib": 80, "hbm_bandwidth_gbs": 1, "bf16_tflops": 1, "sm_count": 78.5}, "sm_count must be a whole number"),
    ([1, 2], "expected a JSON object"),
])
def test_custom_gpu_errors_are_one_line(data, message):
    with pytest.raises(GpuError, match=message) as exc:
        gpu_from_dict(data)
    assert "\n" not in str(exc.value)


def test_custom_gpu_from_file_and_bad_files(tmp_path):
    good = tmp_path / "lab-gpu.json"
    good.write_text(json.dumps({"hbm_gib": 48, "hbm_bandwidth_gbs": 900, "bf16_tflops": 200}))
    assert get_gpu(str(good)).name == "lab-gpu"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GpuError, match="bad.json: not valid JSON"):
        get_gpu(str(bad))
    big = tmp_path / "big.json"
    big.write_text(" " * 70_000 + "{}")
    with pytest.raises(GpuError, match="too large"):
        get_gpu(str(big))


def test_device_names_of_measured_runs():
    from models.gpus import gpu_for_device

    assert gpu_for_device("NVIDIA GeForce RTX 4090").name == "rtx-4090"
    assert gpu_for_device("NVIDIA  H100 80GB HBM3").name == "h100-sxm"
    assert gpu_for_device("NVIDIA RTX PRO 6000 Blackwell Server Edition").hbm_bandwidth == 1792e9
    with pytest.raises(GpuError, match="not in the GPU catalog"):
        gpu_for_device("Mystery GPU")


# Hand-checked against each entry's source line: (MiB, TB/s, dense bf16 TF, dense fp8 TF, NVLink GB/s per direction)
NEW_GPUS = {
    "b200": (184_320, 7.7, 2250, 4500, 900), "b300": (275_040, 7.75, 2250, 4500, 900),
    "gb200": (189_471, 8.0, 2500, 5000, 900), "h20": (98_304, 4.0, 148, 296, 450),
    "rtx-5090": (32_607, 1.792, 209.6, 419.2, 0), "mi325x": (262_144, 6.0, 1307.4, 2614.9, 448),
    "mi355x": (294_912, 8.0, 2516.6, 5033.2, 537.6),
}


@pytest.mark.parametrize(("name", "figures"), NEW_GPUS.items())
def test_blackwell_hopper_h20_and_mi3xx_figures(name, figures):
    mib, tbs, bf16, fp8, nvlink = figures
    g = get_gpu(name)
    assert (g.hbm_bytes, g.hbm_bandwidth, g.bf16_flops, g.fp8_flops, g.nvlink_bandwidth) == (
        mib * 2**20, pytest.approx(tbs * 1e12), pytest.approx(bf16 * 1e12), pytest.approx(fp8 * 1e12),
        pytest.approx(nvlink * 1e9))
    assert g.peak_flops("fp8") == pytest.approx(2 * g.peak_flops("bf16"), rel=0.01)
    assert g.source and g.label


def test_gb200_is_per_gpu_with_a_grace_link():
    g = get_gpu("gb200")
    assert g.host_link == "NVLink-C2C to Grace" and g.host_link_bandwidth == 450e9
    assert get_gpu("B200-SXM") is GPUS["b200"] and get_gpu("5090") is GPUS["rtx-5090"]


def test_a_gpu_registered_from_outside_is_priced_timed_and_searched():
    """A GPU is one registry entry: its price reaches the planner's cost, its measured efficiencies
    the roofline, its name the search and the options doc (docs/ARCHITECTURE.md, "A new GPU")."""
    from dataclasses import replace

    from models.gpus import register_gpu
    from sim.plan.config_search import SearchOptions
    from sim.plan.prices import Price, cost_per_mtok, default_price
    from sim.plan.search import search
    from sim.plan.slo import parse_slo
    from sim.plan.workload import Workload
    from sim.run.deployment import Deployment
    from sim.scenario import Scenario
    from ui.options_doc import render

    gpu = replace(get_gpu("l4"), name="test-l4x", label="L4 with a price (a test GPU)", usd_per_gpu_hour=0.5,
                  price_source="a test price", gemm_efficiency=0.5, memory_efficiency=0.6, efficiency_source="a test")
    register_gpu(gpu)
    try:
        assert default_price("test-l4x") == Price(0.5, "a test price")
        cost = Deployment.resolve(Scenario(model="llama-3.2-3b", gpu="test-l4x", cost_source="roofline")).cost
        assert (cost.prefill_efficiency, cost.memory_efficiency) == (0.5, 0.6)
        assert "`test-l4x`" in render()
        rows = search(Workload.from_ref("synthetic:n=40,rate=4"), [Scenario(model="llama-3.2-3b", gpu="test-l4x")],
                      SearchOptions(parse_slo("e2e_p99=60"))).rows
        assert rows[0]["usd_per_gpu_hour"] == 0.5 and rows[0]["max_rate_per_s"] > 0
        assert rows[0]["cost_per_mtok"] == pytest.approx(cost_per_mtok(0.5, rows[0]["tok_s_per_gpu"]))
    finally:
        GPUS.unregister("test-l4x")
    assert default_price("test-l4x") is None


def test_cards_people_run_vllm_on():
    """T4, RTX 3090, A10 (and RTX A6000, L40, A100 PCIe) with their datasheet figures and sources."""
    from models.gpus import get_gpu, gpu_for_device

    t4, r3090, a10 = get_gpu("t4"), get_gpu("rtx-3090"), get_gpu("a10")
    assert (t4.hbm_bytes, t4.hbm_bandwidth, t4.bf16_flops, t4.fp8_flops) == (15_360 << 20, 320e9, 65e12, 0.0)
    assert (r3090.hbm_bytes, r3090.hbm_bandwidth, r3090.bf16_flops) == (24_576 << 20, 936e9, 71e12)
    assert (a10.hbm_bytes, a10.hbm_bandwidth, a10.bf16_flops) == (23_028 << 20, 600e9, 125e12)
    for name in ("t4", "rtx-3090", "a10", "rtx-a6000", "l40", "a100-80gb-pcie"):
        assert "datasheet" in get_gpu(name).source or "whitepaper" in get_gpu(name).source
    assert gpu_for_device("Tesla T4").name == "t4" and gpu_for_device("NVIDIA GeForce RTX 3090").name == "rtx-3090"
    assert gpu_for_device("NVIDIA A10").name == "a10"


def test_measured_decode_efficiency_reaches_the_cost_model():
    """Large decode batches: the GEMMs at 256 tokens run 0.93 of peak on the RTX 4090 (LLMServingSim
    kernel profile), 0.65 on the H100 (aiconfigurator); other GPUs keep the general 0.6."""
    from models.gpus import get_gpu
    from models.spec import load_spec
    from sim.scenario import Scenario
    from sim.timing.cost_model import CostModel

    for gpu, want in (("rtx-4090", 0.93), ("h100-sxm", 0.65), ("l4", 0.6)):
        sc = Scenario(model="llama-3.1-8b", gpu=gpu, cost_source="roofline")
        assert CostModel.from_scenario(load_spec("llama-3.1-8b"), get_gpu(gpu), sc).decode_efficiency == want

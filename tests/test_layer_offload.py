"""Layer-wise KV offload (--offload-layers): capacity grows, the host link read joins the step time."""

from __future__ import annotations

import pytest

from models.gpus import get_gpu
from sim.run.deployment import Deployment
from sim.scenario import Scenario
from sim.timing.layer_offload import offloaded_layers
from tests.resolved import cost_of

BASE = Scenario(model="llama-3-8b", gpu="h100-sxm", kv_budget_gib=10.0, cost_source="roofline")


def test_hand_computed_decode_step_where_the_host_link_binds():
    """llama-3-8b bf16: 2 x 32 layers x 8 kv heads x 128 x 2 B = 131,072 B per token. Offloading half
    the layers puts 16 layers = 65,536 B per token in CPU memory. A decode step of 8 sequences of
    4,096 tokens reads 32,768 context tokens x 65,536 B = 2,147,483,648 B over PCIe Gen5 x16 (the
    h100-sxm entry's host link): that, not the GPU step, is the step time."""
    sc = BASE.replace(offload_layers=0.5)
    gpu = get_gpu("h100-sxm")
    plain = cost_of(BASE).step_time(8, 32_768)
    off = cost_of(sc)
    host = 32_768 * 65_536 / gpu.host_link_bandwidth
    assert offloaded_layers(32, 0.5) == 16 and off.offload_kv_bytes_per_token == 65_536
    assert host > plain  # the host term binds: ~34 ms at 63 GB/s against a GPU step of a few ms
    assert off.step_time(8, 32_768) == pytest.approx(host, rel=1e-12)
    assert off.decode_time(8, 32_768) == off.step_time(8, 32_768)
    assert off.decode_step_times(3, 8, 32_768)[2] == off.step_time(8, 32_768 + 16)  # skip-ahead: same floats
    # a small batch leaves the GPU term binding: the offload costs nothing there
    assert off.step_time(1, 16) == cost_of(BASE).step_time(1, 16)


def test_capacity_grows_by_the_gpu_share_of_the_layers():
    plain, off = Deployment.resolve(BASE), Deployment.resolve(BASE.replace(offload_layers=0.5))
    assert off.bytes_per_token * 2 == plain.bytes_per_token
    assert off.num_blocks == pytest.approx(2 * plain.num_blocks, abs=1)


def test_host_link_override_and_bad_values_are_one_line():
    sc = BASE.replace(offload_layers=0.25, host_link_gb_s=1.0)
    assert cost_of(sc).host_bandwidth == 1e9
    from sim.errors import ScenarioError

    with pytest.raises(ScenarioError, match="offload_layers"):
        BASE.replace(offload_layers=1.0)

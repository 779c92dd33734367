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


GPT_OSS = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=10.0, cost_source="roofline")


def test_models_with_several_kv_groups_stream_what_each_group_keeps():
    """gpt-oss-20b: 12 full-attention layers and 12 sliding-window layers of 128 tokens, 8 kv heads x
    64 dims x K,V x 2 B = 2,048 B per token per layer. F = 0.5 offloads 6 layers of each group. A
    decode step of 8 sequences of 4,096 tokens reads the full layers' KV of the whole context,
    6 x 2,048 x 32,768 = 402,653,184 B, and the sliding layers' KV of their window only,
    6 x 2,048 x 8 x 128 = 12,582,912 B: 415,236,096 B over PCIe Gen5 x16 (64 GB/s), 6.49 ms against
    a GPU step of 4.47 ms, so the host link binds. It writes back 8 new tokens x 12 layers x 2,048 B."""
    from sim.timing.layer_offload import host_bytes

    off = cost_of(GPT_OSS.replace(offload_layers=0.5))
    assert [(g.kind, g.layers, g.bytes_per_token, g.span) for g in off.offload_groups] == [
        ("full", 6, 12_288.0, 0.0), ("sliding", 6, 12_288.0, 128.0)]
    read, write = host_bytes(off.offload_groups, 8.0, 32_768.0, 0.0, 0.0, 0.0)
    assert (read, write) == (6 * 2048 * 32_768 + 6 * 2048 * 8 * 128, 8 * 12 * 2048)
    host = 415_236_096 / get_gpu("h100-sxm").host_link_bandwidth
    plain = cost_of(GPT_OSS).step_time(8, 32_768)
    assert plain < host
    assert off.step_time(8, 32_768) == pytest.approx(host, rel=1e-12)
    assert off.decode_time(8, 32_768) == off.step_time(8, 32_768)
    assert off.decode_step_times(3, 8, 32_768)[2] == off.step_time(8, 32_768 + 16)  # skip-ahead: same floats
    # a prefill chunk of 1,000 tokens after 3,000 cached: the full layers read the 3,000, the sliding 128
    read, write = host_bytes(off.offload_groups, 0.0, 0.0, 1000.0, 3000.0, 1.0)
    assert (read, write) == (6 * 2048 * 3000 + 6 * 2048 * 128, 1000 * 12 * 2048)


def test_state_groups_stream_their_state_in_and_out_every_step():
    """qwen3-next-80b-a3b: 12 full layers and 36 Gated DeltaNet layers with a fixed state per sequence.
    F = 0.5 offloads 6 full and 18 state layers; each decode sequence reads and writes the 18 layers'
    state every step whatever its context."""
    from models.spec import load_spec
    from sim.timing.layer_offload import host_bytes

    sc = Scenario(model="qwen3-next-80b-a3b", gpu="h100-sxm", kv_budget_gib=10.0, cost_source="roofline",
                  offload_layers=0.5)
    state = next(g for g in load_spec("qwen3-next-80b-a3b").groups if g.kind == "state")
    per_seq = 18 * state.state_bytes() // 36
    off = cost_of(sc)
    assert [(g.kind, g.layers) for g in off.offload_groups] == [("full", 6), ("state", 18)]
    read, write = host_bytes(off.offload_groups, 8.0, 32_768.0, 0.0, 0.0, 0.0)
    assert read == 6 * 2048 * 32_768 + 8 * per_seq and write == 8 * 6 * 2048 + 8 * per_seq


def test_the_gpu_pool_of_a_grouped_model_holds_only_the_kept_layers():
    plain, off = Deployment.resolve(GPT_OSS), Deployment.resolve(GPT_OSS.replace(offload_layers=0.5))
    assert off.bytes_per_token * 2 == plain.bytes_per_token  # a page holds one block of 6, not 12, layers
    assert off.num_blocks == pytest.approx(2 * plain.num_blocks, abs=1)


def test_a_grouped_model_runs_with_layer_offload_and_slows_down():
    from sim.fleet.replay import simulate
    from sim.trace.synthetic import synthetic

    trace = synthetic(40, 20.0, input="fixed:value=2000", output="fixed:value=200", seed=3)
    runs = {f: simulate(trace, GPT_OSS.replace(offload_layers=f)).summary for f in (0.0, 0.75)}
    assert runs[0.75]["completed"] == runs[0.0]["completed"] == 40
    assert runs[0.75]["tpot_s"]["p50"] > 2 * runs[0.0]["tpot_s"]["p50"]  # measured: 20.4 ms against 7.2 ms

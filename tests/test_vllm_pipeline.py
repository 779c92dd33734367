"""Pipeline parallelism in the memory plan: vLLM's layer split, each stage's part of the model, its
start-up profile, the least stage's pool, and `sim capacity --pp` (sim/memory/vllm_pipeline.py)."""

from __future__ import annotations

import json
import math

import pytest

from models.cuda_memory import GiB, cuda_total_bytes
from models.gpus import get_gpu
from models.spec import SpecError, load_spec
from sim.__main__ import main
from sim.memory.capacity import memory_budget, pipeline_budget
from sim.memory.startup_logs import check, load_logs
from sim.memory.vllm_pipeline import pipeline_stages, pp_partition
from sim.memory.vllm_profile import vllm_memory_profile
from sim.memory.vllm_weights import rope_cache_bytes

H100 = get_gpu("h100-sxm")


def test_layer_split_follows_get_pp_indices():
    """distributed/utils.py: layers // pp each; the remainder one each to the stages before the last,
    from the second-to-last backwards; VLLM_PP_LAYER_PARTITION as given."""
    assert pp_partition(32, 2) == [16, 16] and pp_partition(32, 4) == [8, 8, 8, 8]
    assert pp_partition(80, 3) == [27, 27, 26]  # remainder 2: stages -2 and -3
    assert pp_partition(61, 4) == [15, 15, 16, 15]  # remainder 1: the second-to-last
    assert pp_partition(32, 2, "10,22") == [10, 22]
    assert [(s.start_layer, s.layers, s.first, s.last) for s in pipeline_stages(30, 3)] == [
        (0, 10, True, False), (10, 10, False, False), (20, 10, False, True)]
    for bad in ((32, 33, None), (32, 2, "16,15"), (32, 2, "a,b"), (32, 2, "32,0")):
        with pytest.raises(SpecError):
            pp_partition(*bad)


def test_each_stage_holds_its_layers_and_its_ends():
    """Untied Llama-3.1-8B: the stages' parameters add up to the model's. Tied Gemma-7B: the last stage
    builds its own embedding for the head (llama.py / gemma.py), one embedding more than the model."""
    llama = load_spec("llama-3.1-8b")
    parts = [s.spec(llama).param_breakdown() for s in pipeline_stages(32, 4)]
    embed = llama.vocab_size * llama.hidden_size
    assert [p["embedding"] for p in parts] == [embed, 0, 0, 0]
    assert [p["lm_head"] for p in parts] == [0, 0, 0, embed]
    assert [p["norms"] for p in parts] == [8 * 2 * 4096, 8 * 2 * 4096, 8 * 2 * 4096, 8 * 2 * 4096 + 4096]
    assert sum(sum(p.values()) for p in parts) == llama.num_params
    gemma = load_spec("gemma-7b")
    tied = [s.spec(gemma).param_breakdown() for s in pipeline_stages(gemma.num_layers, 2)]
    assert tied[0]["embedding"] == tied[1]["embedding"] == gemma.vocab_size * gemma.hidden_size
    assert sum(sum(p.values()) for p in tied) == gemma.num_params + gemma.vocab_size * gemma.hidden_size


def test_an_moe_stage_counts_its_own_dense_and_moe_layers():
    """DeepSeek-V3 (61 layers, first_k_dense_replace 3) over 2 stages: 31 + 30 layers, the 3 dense ones on
    the first; the stages' parameters add up to the model's. A stage of the dense layers alone is dense."""
    spec = load_spec("deepseek-v3")
    first, last = (s.spec(spec) for s in pipeline_stages(61, 2))
    assert (first.num_layers, first.moe.moe_layers, last.num_layers, last.moe.moe_layers) == (31, 28, 30, 30)
    assert first.num_params + last.num_params == spec.num_params
    dense = pipeline_stages(61, 2, "3,58")[0].spec(spec)
    assert dense.moe is None and dense.intermediate_size == spec.moe.dense_intermediate


def test_a_hybrid_stage_holds_its_share_of_each_group():
    """vLLM groups a kind's layers as layers[i::n] and sizes each stage's pool by the most layers of one group
    it holds (kv_cache_utils.py, read in 0.19.0). Gemma-2-9B (42 layers, the even ones sliding; groups of
    21) over 2 stages: 11 sliding + 10 full on the first, so 11 pages a block on each. Gemma-3-27B text-only
    (62 layers, every 6th full: 10 full, 52 sliding in 6 groups of <= 10) over 2: stage 0 holds 5 full and
    sliding positions 0-25, at most 5 of one group. Qwen3-Next-80B (48 layers, every 4th full: groups of 12,
    the 36 state layers in 3) over 2: 6 of each group a stage."""
    from sim.memory.vllm_pool import pool_layout, stage_layout

    for name, pp, kinds0, most in (("gemma-2-9b-it", 2, {"full": 10, "sliding": 11}, 11),
                                   ("gemma-3-27b", 2, {"full": 5, "sliding": 26}, 5),
                                   ("qwen3-next-80b-a3b", 2, {"full": 6, "state": 18}, 6)):
        spec = load_spec(name).language_model_only()
        stages = pipeline_stages(spec.num_layers, pp)
        assert {g.kind: g.num_layers for g in stages[0].spec(spec).groups} == kinds0, name
        whole = pool_layout(spec, "bf16", 1, 16)
        for s in stages:
            layout = stage_layout(spec, whole, s.start_layer, s.layers)
            assert layout.group_size == most and layout.groups == whole.groups, (name, s.rank)
            assert layout.bytes_per_block == most * whole.page_bytes
    prof = vllm_memory_profile(load_spec("gemma-2-9b-it"), H100, pp=2, vllm_version="0.19")
    assert prof.bytes_per_block == 11 * pool_layout(load_spec("gemma-2-9b-it"), "bf16", 1, 16).page_bytes


def test_an_image_encoder_stays_on_every_stage():
    """vLLM builds a multimodal model's vision tower on every rank, and the V1 runner's profile_run encodes the
    dummy images on each (gemma3_mm.py, gpu_model_runner.py in 0.19.0): each stage holds the tower and its image term."""
    spec = load_spec("gemma-3-27b")
    prof = vllm_memory_profile(spec, H100, pp=2, vllm_version="0.19")
    one = vllm_memory_profile(spec, H100, vllm_version="0.19")
    assert prof.pp_rank == 1 and prof.mm_profile_bytes == one.mm_profile_bytes > 0
    for s in pipeline_stages(spec.num_layers, 2):
        assert s.spec(spec).vision == spec.vision
    # Model Runner V2 (every model from 0.29) encodes them on the first stage only (gpu/model_runner.py profile_run)
    v2 = vllm_memory_profile(spec, H100, pp=2, vllm_version="0.32")
    assert v2.pp_rank == 1 and v2.mm_profile_bytes == 0
    assert vllm_memory_profile(spec, H100, vllm_version="0.32").mm_profile_bytes > 0


def test_models_it_cannot_split_are_refused_in_one_line():
    with pytest.raises(SpecError, match="learned positions") as err:
        pipeline_stages(load_spec("opt-13b").num_layers, 2)[0].spec(load_spec("opt-13b"))
    assert "\n" not in str(err.value)


def test_the_last_stage_samples_and_later_stages_keep_what_they_receive():
    """By hand, Llama-3.1-8B at PP2 on vLLM 0.19, max_num_batched_tokens 8,192 and 1,024 rows: stage 0 has
    no sampler and no received tensors; stage 1 has the whole model's sampler side plus 2 x 8,192 x 4,096
    x 2 B of hidden states and residual; the pool is the smaller, as every stage takes the least one's."""
    spec = load_spec("llama-3.1-8b")
    kw = dict(gpu_mem_util=0.95, max_batched_tokens=8192, max_num_seqs=1024, vllm_version="0.19.0")
    whole = vllm_memory_profile(spec, H100, **kw)
    prof = vllm_memory_profile(spec, H100, pp=2, **kw)
    first, last = prof.stages
    received = 2 * 8192 * 4096 * 2
    assert prof.pp == 2 and prof.pp_rank == 1 and prof.intermediate_tensors_bytes == received
    assert prof.transient_peak_bytes == whole.transient_peak_bytes + received
    assert prof.sampler_buffer_bytes == whole.sampler_buffer_bytes > 0
    assert first["transient_peak_bytes"] == whole.forward_peak_bytes + whole.cublas_workspace_bytes  # forward only
    # every stage holds the RoPE cache; the embedding, the layers and the head are split between them
    assert abs(first["weights_bytes"] + last["weights_bytes"] - whole.weights_bytes - rope_cache_bytes(spec)) <= 2
    assert prof.non_torch_bytes == round(0.07 * GiB)  # a PP stage's logged figure at 0.19 (NON_TORCH)
    requested = math.ceil(cuda_total_bytes("h100-sxm", H100.hbm_bytes)[0] * 0.95)
    available = requested - prof.weights_bytes - prof.transient_peak_bytes - prof.sampler_buffer_bytes - prof.non_torch_bytes
    assert prof.available_kv_bytes == available and prof.bytes_per_block == 16 * 16 * 2 * 8 * 128 * 2
    assert prof.num_gpu_blocks == available // prof.bytes_per_block == min(s["num_gpu_blocks"] for s in prof.stages)
    assert first["num_gpu_blocks"] > last["num_gpu_blocks"] and first["bytes_per_block"] == prof.bytes_per_block


def test_logged_pipeline_starts_within_a_tenth_of_a_percent():
    """llm-d-planner's Llama-3.1-8B starts at PP2 and PP4 (vLLM 0.19.0, H100): the engine's pool, and the
    last stage's logged weights, peak and non-torch memory. Read before the code was written, not held out."""
    rows = {c.log.id: c for c in map(check, load_logs()) if c.log.pp > 1 and c.log.id.startswith("llama31")}
    assert set(rows) == {"llama31-8b-h100-pp2-8k", "llama31-8b-h100-pp4-8k"}
    for c in rows.values():
        assert abs(c.error) < 0.001 and c.in_range and c.profile.pp_rank == c.log.pp - 1, c.log.id
        for term in ("weights", "activation", "non_torch"):
            logged, counted = c.terms[term]
            assert abs(logged - counted) < 0.01, (c.log.id, term)


def test_kvsim_budget_on_the_binding_stage():
    """kvsim's own plan takes the stage whose GPU holds the fewest tokens: Llama-3.1-8B's last stage
    (lm_head, logits), with half the layers' KV per token."""
    spec = load_spec("llama-3.1-8b")
    part, budget, stage = pipeline_budget(spec, H100, 2)
    assert stage.last and part.num_layers == 16 and budget.kv_bytes_per_token == spec.kv_bytes_per_token() // 2
    first = memory_budget(pipeline_stages(32, 2)[0].spec(spec), H100, stage=pipeline_stages(32, 2)[0])
    assert first.activation_peak_bytes < budget.activation_peak_bytes  # no logits on the first stage


def test_capacity_cli_pp(capsys):
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--pp", "2", "--contexts", "8192",
                 "--gpu-mem-util", "0.95", "--max-num-seqs", "1024", "--vllm-version", "0.19", "--users", "500",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    a, row = out["assumptions"], out["rows"][0]
    assert a["pp"] == 2 and a["pp_stage"] == {"rank": 1, "layers": 16} and a["num_params"] == load_spec("llama-3.1-8b").num_params
    prof = vllm_memory_profile(load_spec("llama-3.1-8b"), H100, pp=2, gpu_mem_util=0.95, max_num_seqs=1024,
                               vllm_version="0.19")
    assert a["num_gpu_blocks"] == prof.num_gpu_blocks and row["vllm_blocks_per_seq"] == 512
    assert row["vllm_max_concurrent"] == prof.num_gpu_blocks // 512
    plan = out["gpus_required"][0]
    assert plan["pp"] == 2 and plan["gpus"] == plan["replicas"] * 2 and plan["replicas"] == math.ceil(500 / row["max_concurrent"])
    assert main(["capacity", "--model", "opt-13b", "--gpu", "h100-sxm", "--pp", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --pp 2: opt-13b: pipeline parallelism is not modelled") and "\n" not in err
    assert main(["capacity", "--model", "gemma-3-27b", "--gpu", "h100-sxm", "--pp", "2"]) == 0


def test_capacity_cli_prints_every_stage(capsys):
    assert main(["capacity", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--pp", "2", "--contexts", "8192"]) == 0
    out = capsys.readouterr().out
    assert "x tp=8 x pp=2 (stage 1, 30 layers, sets the pool)" in out
    assert "stage 0: 31 layers" in out and "stage 1: 30 layers" in out


def test_stages_add_batches_in_flight_to_the_window_count(capsys):
    """vLLM 0.32 counts max_in_flight_tokens beyond a sliding window at start-up: with 2 stages and async
    scheduling on Model Runner V2 that is 3 batches (config/vllm.py max_concurrent_batches: pp + 1)."""
    from sim.memory.vllm_pool import pool_layout, stage_layout

    assert main(["capacity", "--model", "gpt-oss-20b", "--gpu", "h100-sxm", "--pp", "2", "--contexts", "8192",
                 "--max-model-len", "32768", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)["assumptions"]
    spec = load_spec("gpt-oss-20b")
    stage = pipeline_stages(spec.num_layers, 2)[a["vllm_memory"]["pp_rank"]]
    layout = stage_layout(spec, pool_layout(spec), stage.start_layer, stage.layers)
    logged = a["vllm_logged_max_concurrency"]
    assert "3 x max_num_batched_tokens" in logged["why_it_differs"]
    assert logged["concurrency"] == pytest.approx(layout.max_concurrency(a["num_gpu_blocks"], 32768, 3 * 8192))


def test_held_out_pipeline_start_on_another_card_and_version():
    """The kubesimplify blog's Qwen3-32B at PP2 on two RTX PRO 6000 (vLLM 0.27.1, 0.426 of 95.01 GiB), found after
    the pipeline code: kvsim said 3,496 blocks then (-1.2%), 3,467 (-2.1%) with the card's CUDA total as the post
    prints it, against 3,540. The last stage binds (its sampler); the post's stage 0 kept 6.92 GiB."""
    c = {c.log.id: c for c in map(check, load_logs())}["kubesimplify-pro6000-qwen3-32b-pp2"]
    assert c.log.held_out["kvsim_blocks_before"] == 3496 and c.measured_blocks == 3540
    assert c.profile.pp_rank == 1 and -0.025 < c.error < -0.015

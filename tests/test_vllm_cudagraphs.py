"""vLLM's CUDA-graph memory estimate (sim/memory/vllm_cudagraphs.py), term by term."""

from __future__ import annotations

from models.cuda_memory import MiB
from models.gpus import get_gpu
from models.spec import load_spec
from sim.memory.vllm_cudagraphs import (
    LARGE_SEGMENT,
    MLA_FULL_FIRST_BYTES,
    PER_FULL_LAYER_BYTES,
    PER_PIECE_BYTES,
    PIECEWISE_FIRST_BYTES,
    capture_sizes,
    cudagraph_estimate_bytes,
    full_first_capture_bytes,
    largest_capture,
    segment_jump_bytes,
)

H100 = get_gpu("h100-sxm")


def test_fa3_split_accumulators_match_the_logged_full_first_capture():
    """32 splits x heads per rank x 512 rows x (head_dim + 1) x 4 B (fp32 out_accum + softmax_lse_accum)
    against the FULL first captures vLLM 0.19.0 logs on H100 (llm-d-planner d3121e0): 260, 132, 70 MiB for
    Llama-3.1-8B at TP1, 2, 4; 268 and 142 for Llama-3.3-70B at TP2 and 4 (the rest is a few 2 MiB pages)."""
    llama8, llama70 = load_spec("llama-3.1-8b"), load_spec("llama-3.3-70b")
    assert full_first_capture_bytes(llama8, 1, 512, H100) == 32 * 32 * 512 * 129 * 4
    for spec, tp, logged_mib in ((llama8, 1, 260), (llama8, 2, 132), (llama8, 4, 70), (llama70, 2, 268),
                                 (llama70, 4, 142)):
        counted = full_first_capture_bytes(spec, tp, 512, H100) / MiB
        assert 0 <= logged_mib - counted <= 14, (spec.name, tp, counted)


def test_no_fixed_splits_off_fa3_and_for_models_flashattention_does_not_serve():
    """vLLM fixes FA3's splits only (aot_schedule); Ampere and Ada run FA2. Gemma-3 (a multimodal
    prefix-LM, with or without its tower loaded) and gpt-oss (sinks) logged 4-8 MiB; MLA takes FlashMLA's
    measured workspace."""
    llama = load_spec("llama-3.1-8b")
    for card in ("l4", "a100-80gb", "rtx-4090", "mi300x"):
        assert full_first_capture_bytes(llama, 1, 256, get_gpu(card)) == 0
    assert full_first_capture_bytes(load_spec("gpt-oss-20b"), 2, 512, H100) == 0
    gemma = load_spec("gemma-3-27b")
    assert full_first_capture_bytes(gemma, 1, 512, H100) == 0
    assert full_first_capture_bytes(gemma.language_model_only(), 1, 512, H100) == 0
    assert full_first_capture_bytes(load_spec("deepseek-v3"), 8, 512, H100) == MLA_FULL_FIRST_BYTES


def test_capture_counts():
    """Sizes 1, 2, 4, every 8 to 256, every 16 after: 51 up to 512, 35 up to 256; gpt-oss raises the
    largest to 1,024 (its model config), 83 graphs as its log prints."""
    assert len(capture_sizes(512)) == 51 and len(capture_sizes(256)) == 35
    assert largest_capture(load_spec("llama-3.1-8b"), 1024) == 512
    assert largest_capture(load_spec("llama-3.1-8b"), 128) == 256
    assert largest_capture(load_spec("llama-3.1-8b"), 256, max_batched_tokens=256) == 256  # never past the budget
    assert len(capture_sizes(largest_capture(load_spec("llama-3.1-8b"), 1024, max_batched_tokens=100))) == 15
    assert len(capture_sizes(largest_capture(load_spec("gpt-oss-20b"), 1024))) == 83


def test_estimate_by_hand_llama_8b_h100():
    """The larger first capture (FA3's 258 MiB over the piecewise median) + 50 piecewise graphs of 33
    pieces + 50 FULL graphs of 32 layers: vLLM 0.19.0 logs 0.84 GiB (260 + 50 x 6 + 50 x 6 MiB)."""
    spec = load_spec("llama-3.1-8b")
    first = 32 * 32 * 512 * 129 * 4
    assert first > PIECEWISE_FIRST_BYTES
    expected = first + 50 * round(PER_PIECE_BYTES * 33) + 50 * round(PER_FULL_LAYER_BYTES * 32)
    got = cudagraph_estimate_bytes(spec, 1, 1024, H100)
    assert got == expected
    assert abs(got / 2**30 - 0.84) < 0.01
    # off Hopper the piecewise first capture is the larger: the same graphs, 136 MiB less
    l4 = cudagraph_estimate_bytes(spec, 1, 1024, get_gpu("l4"))
    assert l4 == PIECEWISE_FIRST_BYTES + expected - first


def test_one_allocator_segment_a_graph_explains_the_outlying_readings():
    """A mode whose second capture opens a new 20 MiB segment reads ~20 MiB more a graph. The A100 40GB
    Qwen3-8B start (0.19.1, 256 rows: 50 + 34 further graphs) logs 2.35 GiB: the base estimate + both modes'
    jump; Llama-3.1-8B at TP2 on H100 logs 1.69 GiB with 26 MiB a piecewise graph: the base + 50 segments."""
    qwen = load_spec("qwen3-8b")
    a100 = cudagraph_estimate_bytes(qwen, 1, 256, get_gpu("a100-40gb")) + segment_jump_bytes(qwen, 256)
    assert segment_jump_bytes(qwen, 256) == (50 + 34) * LARGE_SEGMENT
    assert abs(a100 / 2**30 - 2.35) < 0.03
    llama = load_spec("llama-3.1-8b")
    tp2 = cudagraph_estimate_bytes(llama, 2, 1024, H100) + 50 * LARGE_SEGMENT
    assert abs(tp2 / 2**30 - 1.69) < 0.03


def test_pool_range_takes_the_segment_jump_where_the_estimate_is_subtracted():
    from sim.memory.vllm_profile import vllm_memory_profile

    qwen, l4 = load_spec("qwen3-8b"), get_gpu("l4")
    kw = {"max_batched_tokens": 2048, "max_num_seqs": 256, "compile_cache": "warm"}
    before = vllm_memory_profile(qwen, l4, vllm_version="0.19", **kw)  # not subtracted: no jump
    after = vllm_memory_profile(qwen, l4, vllm_version="0.27", **kw)
    assert before.cudagraph_jump_bytes == 0 and after.cudagraph_jump_bytes == segment_jump_bytes(qwen, 256)
    low = (after.available_kv_bytes - after.cudagraph_jump_bytes) // after.bytes_per_block
    assert after.num_gpu_blocks_range[0] < low <= after.num_gpu_blocks
    assert "20 MiB allocator segment" in after.sources["num_gpu_blocks_range"]

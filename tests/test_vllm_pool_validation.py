"""kvsim's vLLM pool against public vLLM start-up logs (tests/data/vllm_startup_logs.jsonl).

The summary bounds are what the model achieves now (docs/CALIBRATION.md, "Validation on public
start-up logs"), so a regression fails; they are not tuned per row. Per-term checks compare each
printed term (weights, peak activation, non-torch) with kvsim's."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from models.cuda_memory import GiB
from models.gpus import get_gpu
from models.spec import load_spec
from sim.memory.cublas_workspace import cublas_workspace_bytes
from sim.memory.startup_logs import DATA, StartupLogError, check, load_logs, release_from_traceback, summary
from sim.memory.vllm_first_start import MAX_DEFICIT_BYTES, PAIRS, WARM_ERROR, compile_cache_from_log
from sim.memory.vllm_profile import SORT, TRITON, accounting_for, triton_buffer_rows, vllm_memory_profile
from sim.memory.vllm_weights import mxfp4_expert_dims, replicated_weights, rope_cache_bytes, vllm_weight_bytes


@pytest.fixture(scope="module")
def checks():
    return [check(log) for log in load_logs()]


def test_every_row_is_sourced_and_maps_to_the_catalogs():
    logs = load_logs()
    assert len(logs) >= 16
    for log in logs:
        assert log.url.startswith("https://") and log.lines, log.id
        load_spec(log.model), get_gpu(log.gpu)  # raise on an unknown model or GPU
    assert len({log.gpu for log in logs}) >= 4 and len({log.vllm_version for log in logs}) >= 4
    assert {log.tp for log in logs} >= {1, 2, 4}


def test_errors_are_what_the_model_achieves_now(checks):
    s = summary(checks)
    assert s["rows_with_pool"] == 71 and s["excluded"] == 1
    # 0.12% (0.68% on the 45 rows before stop 32 added 22 llm-d H100 starts, counted the cuBLAS workspace, the
    # sampled rows' hidden states and a multimodal profile's dummy images, took 0.19's non-torch from 0.18 and
    # the H100's CUDA total as its recent logs print it; stop 33 added the two llm-d pipeline-parallel starts and
    # three held-out RTX PRO 6000 starts of Qwen3-32B at 0.27.1: TP1 refused, TP2 -28.5%, PP2 -2.1%)
    assert s["median_abs_error"] <= 0.0013
    assert s["worst_abs_error"] <= 0.90  # issue 27508: a 1.71 GiB pool at vLLM 0.11.0 (pinned by its core.py lines)
    assert s["median_abs_available_gib"] <= 0.052
    assert s["worst_abs_available_gib"] <= 2.85  # the Mistral-Small-3.2 start at 0.11.0: its activation peak
    held = summary(checks, held_out=True)
    # worst: the RTX PRO 6000 TP2 start of Qwen3-32B at 0.27.1, 2.35 GiB under (-28.5%, not explained); before it
    # the RTX 3090's 0.49 GiB pool, 0.07 GiB under (-12.5%; the source's repeated starts differ by 0.07-0.08)
    assert held["rows_with_pool"] == 56 and held["median_abs_error"] <= 0.0009 and held["worst_abs_error"] <= 0.29
    # issue 27's bounds (1% median, 5% worst, the shared run within 1%) do not hold for the point count: the
    # ranges do not change it. What they add: the measured pool inside kvsim's range on 61 of 71 rows.
    assert s["in_range"] == 61 and s["ranged_rows"] == 71
    assert s["compile_cache"] == {"cold": 35, "warm": 6, "unknown": 29, "eager": 1}


def test_held_out_rows_record_the_prediction_made_before_the_change():
    """Rows found after the model's last change carry kvsim's num_gpu_blocks from before it."""
    held = [log for log in load_logs() if log.held_out]
    assert len(held) >= 4
    for log in held:
        assert log.held_out["kvsim_blocks_before"] >= 0 and log.held_out["kvsim_commit_before"], log.id  # 0: no pool


def test_rows_independent_of_every_fitted_term(checks):
    """No term is fitted (the sampler is counted from the code): the L40S row (0.10.2, fp8 MoE, TP2),
    the held-out warm or eager starts within 0.75% but the eager A100 (-0.88%), the 0.10.1 refusal within 0.15 GiB; first
    starts run above vLLM (0.59 GiB on the 0.19 A100 gpt-oss-20b, 'What is not explained')."""
    by_id = {c.log.id: c for c in checks}
    assert abs(by_id["roethig-2xl40s-qwen3-30b-a3b-fp8"].error) < 0.005
    assert abs(by_id["tokenkaki-a100-40gb-qwen3-8b"].error) < 0.0075
    # the eager A100 start: weights now as logged (14.99 GiB with the RoPE cache), the pool 0.18 GiB under
    assert abs(by_id["vllmgce-a100-40gb-llama-3.1-8b-eager"].error) < 0.0096
    # 0.24.0 takes 0.19.0's measured non-torch (0.25 GiB at TP1) and Model Runner V2's CUDA-graph estimate, 0 there
    assert abs(by_id["distserving-5090-qwen3-8b-restart"].error) < 0.0075
    assert abs(by_id["issue23278-h100-gpt-oss-120b"].available_error_gib) < 0.15
    assert 0 < by_id["myoceane-a100-gpt-oss-20b"].available_error_gib < 0.6


def test_weights_term_matches_the_logged_model_loading(checks):
    """Within 0.15 GiB wherever logged, the multimodal checkpoints with their image encoders (models/vision.py)
    and every model with its RoPE caches (rope_cache_bytes: Llama-4-Scout's 10M positions take 2.5 GiB a rank),
    but for gpt-oss-20b at TP2 on 0.19.0 (0.29 GiB over half of TP1's
    count, which matches at 0.11.0: not traced) and Qwen3-8B quantised online to fp8 (--quantization fp8
    of the bf16 checkpoint: 9.06 GiB logged, 0.27 over fp8 layers with 16-bit embeddings: not traced)."""
    errs = {c.log.id: c.terms["weights"][1] - c.terms["weights"][0] for c in checks if "weights" in c.terms}
    assert len(errs) >= 8
    assert {k for k, e in errs.items() if abs(e) > 0.15} == {
        "gpt-oss-20b-h100-tp2-8k", "vf-l4-qwen3-8b-fp8online", "vf-l4-qwen3-8b-fp8-fp8kv"}
    assert all(e < 0 for k, e in errs.items() if abs(e) > 0.15)  # each under vLLM's: something not counted


def test_non_torch_term_matches_the_logged_increase(checks):
    """0.13 / 0.54 GiB at TP1 / TP2 on 0.11.0; 0.25 / 2.10 on 0.19.0 (its TP2 rows log 2.06-2.11, TP4 2.13-2.21)."""
    terms = {c.log.id: c.terms["non_torch"] for c in checks if "non_torch" in c.terms}
    assert len(terms) >= 20
    assert all(abs(a - b) <= 0.045 for k, (a, b) in terms.items() if "tp4" not in k), terms
    assert all(abs(a - b) <= 0.12 for a, b in terms.values())


# What no term counts, in bytes per logit element: at most 0.03 B (4 MiB at 1,024 rows of 128,256), the size of
# cuBLASLt's 1 MiB workspace and the dummy batch's small tensors (sampling parameters, indices, argmax outputs).
SMALL_TENSORS = 0.03


def _per_logit_left(log, buffer: bool) -> tuple[float, float]:
    """(bytes per logit element the row's logged peak leaves once the forward's hidden states, the two sampled-row
    copies, PyTorch's cuBLAS workspace and (Triton) the kernel's [SMs, vocab] fp32 buffer are taken off, the
    log's +-0.005 GiB rounding in those units)."""
    spec, gpu = load_spec(log.model), get_gpu(log.gpu)
    act = 4 if log.weight_dtype == "fp32" else 2
    rows = min(log.max_num_seqs, log.max_num_batched_tokens)
    live = (log.max_num_batched_tokens + 2 * rows) * spec.hidden_size * act + cublas_workspace_bytes(gpu)
    if buffer:
        live += triton_buffer_rows(rows, gpu.sm_count) * spec.vocab_size * 4
    elements = rows * spec.vocab_size
    return (log.measured["peak_activation_gib"] * GiB - live) / elements, 0.005 * GiB / elements


def _text_rows(path):
    for log in load_logs():
        if ("peak_activation_gib" not in log.measured or log.excluded or "multimodal" in log.notes or log.pp > 1
                or "ConditionalGeneration" in log.notes or accounting_for(log.vllm_version).sampler is not path):
            continue
        yield log


def test_sort_sampler_count_explains_the_logged_activation():
    """The sort path's 38 B per logit element, counted from the code (vllm_profile.SORT), against what
    the 0.11.0 text-model rows log: with the hidden states, the sampled rows and the cuBLAS workspace
    taken off, 38.02-38.04 B: each within its log's rounding and SMALL_TENSORS (before stop 32 counted the last two, 38.25-38.55)."""
    left = {log.id: _per_logit_left(log, buffer=False) for log in _text_rows(SORT)}
    assert len(left) >= 5 and accounting_for("0.11").sampler_bytes_per_logit == 38
    assert all(-tol <= e - 38 <= tol + SMALL_TENSORS for e, tol in left.values()), left


def test_triton_sampler_count_explains_the_logged_activation():
    """The Triton path's 14 B per logit element (vllm_profile.TRITON) against the 0.19.0 dense text-model
    rows, the same terms and the kernel's buffer taken off: 13.98-14.06 B on five models with three
    vocabularies, each within its log's rounding and SMALL_TENSORS; vLLM's fp32 start leaves 16.0 B (its logits are 4 B,
    not 2: sampler_peak_bytes counts the logits at the activation dtype)."""
    left, vocabularies = {}, set()
    for log in _text_rows(TRITON):
        if load_spec(log.model).moe:
            continue
        left[log.id] = _per_logit_left(log, buffer=True)
        vocabularies.add(load_spec(log.model).vocab_size)
    assert len(left) >= 10 and len(vocabularies) >= 3, left
    fp32 = left.pop("llama31-8b-h100-tp1-8k-fp32")
    assert -fp32[1] <= fp32[0] - 16 <= fp32[1] + SMALL_TENSORS
    assert all(-tol <= e - 14 <= tol + SMALL_TENSORS for e, tol in left.values()), left


def test_cublas_workspace_by_compute_capability():
    """PyTorch's default cuBLAS workspace (CublasHandlePool.cpp): 32 MiB on sm_90 only, 8.125 MiB elsewhere."""
    assert cublas_workspace_bytes(get_gpu("h100-sxm")) == cublas_workspace_bytes(get_gpu("h200")) == 32 << 20
    assert cublas_workspace_bytes(get_gpu("rtx-4090")) == 4096 * 1024 * 2 + 16 * 1024 * 8
    assert cublas_workspace_bytes(get_gpu("b200")) == 4096 * 1024 * 2 + 16 * 1024 * 8  # sm_100 is not Hopper


def test_measured_blocks_from_tokens_agree_with_the_available_memory(checks):
    """Where vLLM printed both, tokens // block_size and available // block differ by no more than the
    GiB figure's rounding (2 decimals, +-0.005 GiB: < 0.1% of every pool over 5 GiB)."""
    for c in checks:
        m = c.log.measured
        if "kv_cache_tokens" in m and "available_kv_gib" in m and m["available_kv_gib"] > 0:
            from_gib = m["available_kv_gib"] * GiB // c.profile.bytes_per_block
            assert abs(from_gib - c.measured_blocks) <= 0.005 * GiB / c.profile.bytes_per_block + 1, c.log.id
            if m["available_kv_gib"] >= 5:
                assert abs(from_gib / c.measured_blocks - 1) < 0.001, c.log.id


def test_v1_cuda_graph_estimate_against_the_logged_totals(checks):
    """kvsim's estimate (sim/memory/vllm_cudagraphs.py: FA3's fixed-split accumulators counted, the piecewise
    first capture and the per-piece / per-layer graph costs the medians of vLLM 0.19.0's H100 logs) against
    the totals the 33 H100 rows here log (0.57-1.92 GiB; the same logs the medians come from, so not held
    out): median |error| 0.09 GiB where the flat 0.84 GiB it replaces (256 MiB + 6 MiB a graph) erred by
    0.15; 80-layer models 0.10 where it erred by 0.8-1.0. The worst are Llama-3.1-8B and the W8A8
    Mistral-Small at TP2, whose logs read ~26 MiB a piecewise graph where TP1 and TP4 read 6 (Llama's own
    pool came to 0.76 GiB, not its 1.69).
    The A100 40GB start logs 2.35 GiB where this gives 0.69: both modes' second captures read one more 20 MiB
    allocator segment (tests/test_vllm_cudagraphs.py). None of these versions subtracts it (0.21 on do)."""
    by_id = {c.log.id: c for c in checks}
    rows = {c.log.id: c.terms["cudagraph_estimate"] for c in checks if "cudagraph_estimate" in c.terms
            and c.log.gpu == "h100-sxm" and c.log.pp == 1}  # a pipeline stage's: tests/test_vllm_pipeline.py
    assert len(rows) == 33
    errors = {k: abs(kv - logged) for k, (logged, kv) in rows.items()}
    flat = {k: abs(0.84 - logged) for k, (logged, _) in rows.items()}
    assert statistics.median(errors.values()) <= 0.095 < 0.14 < statistics.median(flat.values())
    jumps = ("llama31-8b-h100-tp2-8k", "mistral-small-31-w8a8-h100-tp2-8k")  # a 20 MiB segment a graph, read higher
    # Phi-4 (40 layers) and Gemma-2-9B (42) read 4-6 MiB a graph where the per-layer medians give 6.7-8.9: 0.25
    # and 0.19 GiB over in all (0.19 prints the estimate but does not subtract it; from 0.21 it would cost them)
    assert max(v for k, v in errors.items() if k not in jumps) <= 0.26
    assert errors["phi-4-h100-tp1-8k"] > 0.2 and errors["gemma-2-9b-h100-tp1-8k"] > 0.15
    big = ("qwen25-72b-h100-tp2-8k", "llama33-70b-fp8-h100-tp2-8k", "llama33-70b-fp8-h100-tp4-8k")
    assert all(errors[k] < 0.11 and flat[k] > 0.75 for k in big)
    c = by_id["tokenkaki-a100-40gb-qwen3-8b"]
    assert c.terms["cudagraph_estimate"][0] == 2.35 and 0.6 < c.terms["cudagraph_estimate"][1] < 0.8
    assert c.profile.cudagraph_bytes == 0 and abs(c.error) < 0.0075


def test_quantised_checkpoints_keep_16_bit_embeddings():
    """Llama-3.3-70B fp8 at TP2: all-fp8 parameters + the embedding and lm_head at 2 B (1 B extra)."""
    spec = load_spec("llama-3.3-70b")
    parts = spec.param_breakdown()
    extra = parts["embedding"] + parts["lm_head"]
    rope = rope_cache_bytes(spec)  # on every rank: 131,072 positions x 128 x 2 B
    assert rope == 131072 * 128 * 2
    assert vllm_weight_bytes(spec, "fp8", "fp8", 2, "h100-sxm", (0, 11)) == -(-(spec.weight_bytes("fp8") + extra) // 2) + rope
    assert vllm_weight_bytes(spec, "bf16", "bf16", 2, "h100-sxm", (0, 11)) == -(-spec.weight_bytes("bf16") // 2) + rope


def test_replicated_weights_are_whole_on_every_rank():
    """DeepSeek-V3 fp8 at TP8 (vLLM 0.32 deepseek_v2.py): the q_a + kv_a projections (61 layers x 7,168 x
    (1,536 + 512 + 64), fp8 as shipped) and the routers (58 MoE layers x 7,168 x 256, unquantised bf16)
    sit whole on every rank; the rest is split. gpt-oss-120b's routers (with biases) are bf16 either way."""
    spec = load_spec("deepseek-v3")
    a_proj, router = 61 * 7168 * (1536 + 512 + 64), 58 * (7168 * 256)
    assert replicated_weights(spec, "fp8") == (a_proj + router, a_proj + 2 * router)
    parts = spec.param_breakdown()
    embed = parts["embedding"] + parts["lm_head"]  # 16-bit in quantised checkpoints
    split = spec.weight_bytes("fp8") + embed - a_proj - router
    rope = rope_cache_bytes(spec)
    assert vllm_weight_bytes(spec, "fp8", "fp8", 8, "h200", (0, 32)) == -(-(split + 8 * (a_proj + 2 * router)) // 8) + rope
    gpt = load_spec("gpt-oss-120b")
    assert replicated_weights(gpt, "bf16") == (2 * 36 * (2880 * 128 + 128),) * 2


def test_mxfp4_experts_padded_to_the_kernel_tile():
    assert mxfp4_expert_dims(2880, 2880, "h100-sxm", (0, 11)) == (2880, 3072)  # Triton: width to 256
    assert mxfp4_expert_dims(2880, 2880, "h100-sxm", (0, 10)) == (3072, 2944)  # Marlin: 256 / 128
    assert mxfp4_expert_dims(2880, 2880, "a100-80gb", (0, 19)) == (3072, 2944)
    assert mxfp4_expert_dims(2880, 2880, "b200", (0, 19)) == (2880, 2880)
    # Marlin pads per rank: at TP2 1,440 up to 1,536 (not 2,944 / 2 = 1,472); the Triton path splits 3,072
    assert mxfp4_expert_dims(2880, 2880, "a100-80gb", (0, 19), tp=2) == (3072, 1536)
    assert mxfp4_expert_dims(2880, 2880, "h100-sxm", (0, 19), tp=2) == (2880, 1536)
    assert mxfp4_expert_dims(2880, 2880, "h100-sxm", (0, 19), tp=8) == (2880, 384)
    spec = load_spec("gpt-oss-120b")
    moe = spec.moe
    padded = vllm_weight_bytes(spec, "bf16", "mxfp4", 1, "h100-sxm", (0, 11))
    extra = 3 * spec.hidden_size * (3072 - 2880) * moe.num_experts * moe.moe_layers * 4.25 / 8
    rope = 4096 * 32 * 64 * 4  # YaRN: original 4,096 positions x factor 32, head_dim 64, fp32 (gpt_oss.py)
    assert rope_cache_bytes(spec) == rope
    assert abs(padded - (spec.weight_bytes("bf16", "mxfp4") + extra + rope)) <= 1
    assert round(padded / GiB, 2) == 64.53  # vLLM 0.11.0 and 0.14.1 log 64.38 GiB on an H100


def test_non_torch_adds_nccl_buffers_with_tp():
    spec, gpu = load_spec("qwen3-32b"), get_gpu("h100-sxm")
    one = vllm_memory_profile(spec, gpu, tp=1, vllm_version="0.11")
    two = vllm_memory_profile(spec, gpu, tp=2, vllm_version="0.11")
    assert round(one.non_torch_bytes / GiB, 2) == 0.13 and round(two.non_torch_bytes / GiB, 2) == 0.54
    one, two = (vllm_memory_profile(spec, gpu, tp=tp, vllm_version="0.19") for tp in (1, 2))
    assert round(one.non_torch_bytes / GiB, 2) == 0.25 and round(two.non_torch_bytes / GiB, 2) == 2.10
    pcie = vllm_memory_profile(spec, get_gpu("l40s"), tp=2, vllm_version="0.19")  # no NVLink: 0.10's total kept
    assert round(pcie.non_torch_bytes / GiB, 2) == 0.54
    # 0.18.0 already logs 0.19's 0.25 GiB at TP1 (the version sweep's Qwen3-14B); 0.17.0 still 0.13
    assert vllm_memory_profile(spec, gpu, tp=1, vllm_version="0.18").non_torch_bytes == round(0.25 * GiB)
    assert vllm_memory_profile(spec, gpu, tp=2, vllm_version="0.17").non_torch_bytes == round(0.54 * GiB)


def test_bad_rows_fail_with_one_line(tmp_path):
    f = tmp_path / "logs.jsonl"
    f.write_text('{"id": "x", "url": "https://a"}\n')
    with pytest.raises(StartupLogError, match=r"logs.jsonl line 1 \(x\): missing lines"):
        load_logs(f)
    f.write_text("{not json\n")
    with pytest.raises(StartupLogError, match="line 1: not JSON"):
        load_logs(f)
    row = json.loads(DATA.read_text().splitlines()[0])
    row["measured"] = {"weights_gib": 1.0}
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(StartupLogError, match="available_kv_gib or num_gpu_blocks"):
        load_logs(f)


def test_bench_prints_the_table_and_json():
    out = subprocess.run([sys.executable, "bench/vllm_pool_validation.py"], capture_output=True, text=True, check=True)
    assert "median |error|" in out.stdout and "llmservingsim-rtx4090-llama-3.1-8b" in out.stdout
    js = subprocess.run([sys.executable, "bench/vllm_pool_validation.py", "--json"], capture_output=True, text=True,
                        check=True)
    data = json.loads(js.stdout)
    assert data["summary"]["rows"] >= 16 and data["summary"]["in_range"] == 61
    shared = next(r for r in data["rows"] if r["id"] == "llmservingsim-rtx4090-llama-3.1-8b")
    assert shared["compile_cache"] == "unknown" and shared["num_gpu_blocks_range"] == [2253, 2806] and shared["in_range"]
    bad = subprocess.run([sys.executable, "bench/vllm_pool_validation.py", "--file", "/nonexistent.jsonl"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


def test_compile_cache_read_from_vllms_log_lines():
    """vLLM's own lines (compilation/backends.py, 0.10-0.32; decorators.py for AOT): any graph compiled in
    the start-up makes it cold; all graphs loaded from the cache, warm; neither shown, unknown."""
    cold = ["INFO 10-18 09:53:31 [backends.py:197] Cache the graph for dynamic shape for later use",
            "INFO 10-18 09:53:46 [backends.py:218] Compiling a graph for dynamic shape takes 15.65 s"]
    warm = ["[backends.py:161] Directly load the compiled graph(s) for dynamic shape from the cache, took 4.513 s",
            "[backends.py:292] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 5.958 s",
            "[decorators.py:311] Directly load AOT compilation from path ~/.cache/vllm/torch_compile_cache/x/model"]
    assert compile_cache_from_log(cold) == "cold" and compile_cache_from_log(warm) == "warm"
    assert compile_cache_from_log(["Compiling a graph for compile range (1, 2048) takes 20.10 s"]) == "cold"
    assert compile_cache_from_log(warm + cold[1:]) == "cold"  # a head compiled beside a loaded backbone
    assert compile_cache_from_log(["torch.compile takes 5.55 s in total", "Available KV cache memory: 1.71 GiB"]) == "unknown"
    by_id = {log.id: log for log in load_logs()}
    assert by_id["tokenkaki-a100-40gb-qwen3-8b"].compile_cache == "warm"  # from its 'Directly load' line
    assert by_id["distserving-5090-qwen3-8b-first-start"].compile_cache == "cold"  # the document's words
    assert by_id["llmservingsim-rtx4090-llama-3.1-8b"].compile_cache == "unknown"


def test_first_start_range_covers_cold_and_unknown_starts(checks):
    """A cold or unknown start's range runs from (available - 0.95 GiB) // block to the warm count, both
    +-WARM_ERROR (1.31%, the warm and eager held-out rows' worst); warm and eager starts get the +-1.31% only.
    The measured pool lies inside on every row but Mistral-Small-3.2 at 0.11.0 (its logged activation peak is
    2.84 GiB under the sampler's count at 1,024 rows, not traced), vllm#27508 (1.56 GiB short), the L4's bf16
    start at 0.27.1 (0.16 GiB under: the CUDA-graph estimate's per-graph cost is H100's here, and the card's
    seems smaller), and RTX 3090 and 4 x L40S starts that kvsim puts 0.06-0.10 GiB under vLLM (their weights
    where logged are within 0.03 GiB, the RoPE cache and the Triton buffer at the card's SM count counted; the
    rest is in terms measured on H100; the RTX 3090 source's own repeated starts differ by 0.07-0.08 GiB; in
    blocks that is -1.4% on a 5 GiB pool, -12.5% on a 0.49 GiB one). Stop 33's RTX PRO 6000 starts of Qwen3-32B at
    0.27.1 fall outside under vLLM: TP2 by 2.35 GiB (its logged overhead, 1.66 GiB, is less than the sampler's
    logits alone; not explained), PP2 by 0.14 GiB (the last stage's terms, the CUDA-graph estimate at H100's
    per-graph cost)."""
    outside = {c.log.id for c in checks if c.in_range is False and not c.log.excluded}
    small = {c.log.id for c in checks if c.in_range is False and -0.105 < c.available_error_gib < 0}
    assert outside - small == {"llmd-h100-mistral-small-24b", "issue27508-h100-gpt-oss-120b", "vf-l4-qwen3-8b-bf16",
                               "kubesimplify-pro6000-qwen3-32b-tp2", "kubesimplify-pro6000-qwen3-32b-pp2"}
    assert small == {"tb-3090-llama31-8b-g086", "tb-3090-llama31-8b-g075", "tb-3090-llama31-8b-g070-FAILED",
                     "tb-3090-qwen25-7b-g065", "qwen25-72b-4xL40S-tp4-v0190"}
    # the bar is the warm and eager held-out rows' worst: each of them lies inside it
    warm = [c for c in checks if c.log.held_out and c.profile.compile_cache in ("warm", "eager")]
    assert len(warm) >= 6 and all(c.in_range for c in warm)
    assert max(abs(c.measured_blocks - c.profile.num_gpu_blocks) / c.profile.num_gpu_blocks for c in warm) <= WARM_ERROR
    by_id = {c.log.id: c for c in checks}
    for row in ("llmservingsim-rtx4090-llama-3.1-8b", "distserving-5090-qwen3-8b-first-start",
                "myoceane-a100-gpt-oss-20b"):
        p = by_id[row].profile
        assert p.first_start_deficit_bytes == MAX_DEFICIT_BYTES and by_id[row].in_range, row
        low = ((p.available_kv_bytes - MAX_DEFICIT_BYTES) // p.bytes_per_block) * (1 - WARM_ERROR)
        assert p.num_gpu_blocks_range == (int(low), -int(-p.num_gpu_blocks * (1 + WARM_ERROR) // 1))
    for row in ("tokenkaki-a100-40gb-qwen3-8b", "distserving-5090-qwen3-8b-restart",
                "vllmgce-a100-40gb-llama-3.1-8b-eager"):
        p = by_id[row].profile
        assert p.first_start_deficit_bytes == 0 and by_id[row].in_range, row
        assert p.num_gpu_blocks_range[1] - p.num_gpu_blocks_range[0] <= 2 * WARM_ERROR * p.num_gpu_blocks + 2
    assert by_id["vllmgce-a100-40gb-llama-3.1-8b-eager"].profile.compile_cache == "eager"
    shared = by_id["llmservingsim-rtx4090-llama-3.1-8b"]
    assert shared.profile.num_gpu_blocks_range == (2253, 2806) and shared.measured_blocks == 2588


def test_first_start_deficit_is_set_by_public_pairs_not_by_the_rows():
    """0.95 GiB is the largest cold-minus-warm deficit of one shape in stock vLLM; without the RTX 5090 pair
    (which is also a row here) it is the same, and the shared run is not among the pairs."""
    assert round(0.95 * GiB) == MAX_DEFICIT_BYTES
    assert max(p.deficit_gib for p in PAIRS if p.gpu != "RTX 5090") == 0.95
    assert all("LLMServingSim" not in p.url for p in PAIRS) and min(p.deficit_gib for p in PAIRS) == 0.0
    five = next(p for p in PAIRS if p.gpu == "RTX 5090")  # 5,996 - 5,565 blocks of Qwen3-8B's 2.25 MiB
    assert round((5996 - 5565) * 2_359_296 / GiB, 2) == five.deficit_gib


def test_issue_27508_release_pinned_by_its_traceback():
    """Its 'Available KV cache memory' line (gpu_worker.py:298) fits 0.10.2 and 0.11.0; the traceback in the
    same comment logs the failure at core.py:708, which is 0.11.0's line (0.10.2: 718). vllm#23278's
    failure line (core.py:700) agrees with its own 0.10.1 banner."""
    by_id = {log.id: log for log in load_logs()}
    row = by_id["issue27508-h100-gpt-oss-120b"]
    assert release_from_traceback(row.lines) == "0.11.0" == row.vllm_version
    assert release_from_traceback(["ERROR 11-28 10:01:45 [core.py:718] EngineCore failed to start."]) == "0.10.2"
    assert release_from_traceback(["ERROR 08-20 18:04:22 [core.py:700] EngineCore failed to start."]) == "0.10.1"
    assert release_from_traceback(by_id["roethig-2xl40s-qwen3-30b-a3b-fp8"].lines) is None  # no failure line


def test_flashinfer_sampler_read_from_the_log(checks):
    """vLLM 0.10-0.11 sample with FlashInfer by default wherever it is installed, and log it. The A10G
    starts (0.11.0, 256 rows) say so and land within 0.08 GiB of vLLM; counted on the sort path (38 B per
    logit element, what the llm-d 0.11.0 starts without the line fit) they would be 0.87 GiB under."""
    import dataclasses

    by_id = {c.log.id: c for c in checks}
    row = by_id["iw-a10g-qwen25-7b-flash"]
    assert row.log.flashinfer_sampler and abs(row.available_error_gib) < 0.08
    assert not by_id["llmd-h100-llama-3.1-8b"].log.flashinfer_sampler
    plain = dataclasses.replace(row.log, lines=tuple(x for x in row.log.lines if "FlashInfer" not in x))
    spec = load_spec("qwen2.5-7b")
    missing = (check(plain).profile.available_kv_bytes - row.profile.available_kv_bytes) / GiB
    assert missing == pytest.approx(-256 * spec.vocab_size * (38 - 14) / GiB, abs=0.001)


def test_logged_token_line_of_grouped_models():
    """vLLM's 'GPU KV cache size: N tokens' from the pool it sized, where the model has several KV cache
    groups (the logs' own available memory sets the blocks, to +-0.005 GiB): Gemma-2/3, gpt-oss and
    Llama-4 at 0.19, num_gpu_blocks // groups x block size (sim/memory/vllm_pool.py)."""
    from sim.memory.vllm_pool import pool_layout
    from sim.memory.vllm_profile import parse_version, window_in_flight_tokens

    seen = 0
    for log in load_logs():
        m = log.measured
        if not m.get("kv_cache_tokens") or m.get("available_kv_gib", 0) <= 0 or log.pp > 1 or not log.max_model_len:
            continue
        spec = load_spec(log.model)
        layout = pool_layout(spec, log.kv_dtype, log.tp, log.block_size)
        if len(layout.groups) == 1:
            continue
        slack = int(0.005 * GiB // layout.bytes_per_block) + 1  # the 2-decimal GiB figure's blocks
        blocks = int(m["available_kv_gib"] * GiB // layout.bytes_per_block)
        in_flight = window_in_flight_tokens(log.vllm_version, log.max_num_batched_tokens, None, 1, spec)
        tokens = layout.logged_kv_cache_tokens(blocks, log.max_model_len, in_flight, parse_version(log.vllm_version))
        per_block = layout.block_size / len(layout.groups)
        assert abs(tokens - m["kv_cache_tokens"]) <= slack * per_block + layout.block_size, log.id
        seen += 1
    assert seen >= 4

"""The vLLM bridge without vLLM: requests from traces, kvsim's side of conform, the comparison, errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_backend.vllm_engine.conform import ConformError, compare, engine_config
from gpu_backend.vllm_engine.kvsim_side import replay_kvsim
from gpu_backend.vllm_engine.protocol import EngineConfig, StepRecord
from gpu_backend.vllm_engine.trace_requests import block_content_ids, engine_requests
from sim.scenario import Scenario
from sim.trace import load_trace, resolve_trace

TINY = "tests/data/tiny-llama/config.json"


def test_mooncake_hash_ids_become_shared_token_prefixes(samples_dir):
    trace = load_trace(samples_dir / "mooncake_small.jsonl")
    reqs = engine_requests(trace, step_s=1.0, vocab=1024, max_model_len=4096, scale=1 / 16, max_requests=40)
    hashes = trace.df["prefix_hashes"].tolist()
    # rows 1 and 3 of the sample both start with hash ids 6, 7, 8: 3 x 32 identical leading tokens
    assert list(hashes[1][:3]) == list(hashes[3][:3]) and hashes[1][3] != hashes[3][3]
    assert reqs[1].prompt[:96] == reqs[3].prompt[:96]
    assert reqs[1].prompt[96:128] != reqs[3].prompt[96:128]
    keys1, keys3 = block_content_ids(reqs[1], 32), block_content_ids(reqs[3], 32)
    assert keys1[:3] == keys3[:3] and keys1[3] != keys3[3]
    # generated tokens are never shared across requests
    assert len(keys1) == -(-(len(reqs[1].prompt) + reqs[1].max_tokens) // 32)
    assert not set(keys1[len(reqs[1].prompt) // 32:]) & set(keys3)


def test_lengths_scale_and_fit_max_model_len():
    trace = resolve_trace("synthetic:preset=sharegpt-like,n=50,rate=10,max_len=2000")
    reqs = engine_requests(trace, step_s=0.1, vocab=1024, max_model_len=300, scale=0.5)
    assert all(len(r.prompt) + r.max_tokens <= 300 and len(r.prompt) >= 1 and r.max_tokens >= 1 for r in reqs)
    assert [r.arrival_step for r in reqs] == [int(a // 0.1 + 1e-9) for a in trace.df["arrival_s"]]


def test_engine_config_refuses_what_vllm_cannot_do():
    base = Scenario(model=TINY, block_size=32)
    assert engine_config(base, 16, 4096).max_model_len == 16 * 32  # vLLM refuses a longer max_model_len
    for bad, word in ((base.replace(preemption="swap"), "recompute"), (base.replace(allocator="contiguous"), "paged"),
                      (base.replace(block_size=16), "multiple of 32")):
        with pytest.raises(ConformError, match=word):
            engine_config(bad, 16, 4096)


def _rec(step: int, **kw) -> StepRecord:
    base = dict(scheduled=[("r0", 1)], admitted=[], preempted=[], finished=[], running_ids=["r0"], waiting_ids=[],
                blocks_in_use=1)
    base.update(kw)
    return StepRecord(step=step, **base)


def test_compare_reports_the_first_field_that_differs():
    a = [_rec(0), _rec(1), _rec(2)]
    assert compare(a, [_rec(0), _rec(1), _rec(2)]) == (3, None)
    n, div = compare(a, [_rec(0), _rec(1, blocks_in_use=2), _rec(2, preempted=["r0"])])
    assert n == 1 and div == {"step": 1, "field": "blocks_in_use", "vllm": 1, "kvsim": 2}
    n, div = compare(a, a[:2])
    assert n == 2 and div["field"] == "steps"


def test_kvsim_side_replays_starved_config_with_preemptions():
    trace = resolve_trace("synthetic:preset=sharegpt-like,n=16,rate=20,max_len=400")
    cfg = EngineConfig(block_size=32, num_blocks=16, max_num_seqs=8, max_num_batched_tokens=256, chunked_prefill=True,
                       prefix_caching=False, max_model_len=512)
    reqs = engine_requests(trace, step_s=0.05, vocab=1024, max_model_len=512, scale=0.5)
    recs = replay_kvsim(reqs, cfg)
    assert sum(len(r.preempted) for r in recs) > 0
    assert max(r.blocks_in_use for r in recs) == 16
    assert all(sum(n for _, n in r.scheduled) <= 256 and len(r.running_ids) <= 8 for r in recs)
    done = [rid for r in recs for rid in r.finished]
    assert sorted(done) == sorted(q.id for q in reqs)
    assert replay_kvsim(reqs, cfg) == recs  # deterministic


def test_missing_vllm_is_one_line_with_the_install_hint(tmp_path, repo_root):
    env = {"KVSIM_VLLM_PYTHON": str(tmp_path / "no-such-python"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "gpu_backend", "conform", "--synthetic", "n=3,rate=1",
                           "--model", TINY, "--num-blocks", "16"], cwd=repo_root, capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "make vllm-env" in lines[0], proc.stderr


def test_cpu_rules_serve_any_scenario_and_size_the_pool_with_the_kv_heads_what_if():
    """What the GPU page asks of vLLM on CPU: a block size it takes, paged + recompute, and blocks
    from the budget with the model as deployed (kv-heads what-if: llama-3-8b at 4 heads stores half
    the K/V per token of its 8, so the same budget holds twice the blocks)."""
    from gpu_backend.vllm_engine import cpu_rules
    from gpu_backend.vllm_engine.model_dir import model_dir

    served = cpu_rules.served_scenario(Scenario(allocator="contiguous", block_size=16, preemption="swap",
                                                static_batch=8), tiny=False)
    assert (served.block_size, served.allocator, served.preemption, served.static_batch) == (32, "paged", "recompute", None)
    engine_config(served, 64, 4096)  # conform's checks accept it
    assert cpu_rules.num_blocks(Scenario()) == cpu_rules.DEFAULT_BLOCKS
    own = cpu_rules.num_blocks(Scenario(model="llama-3-8b", kv_budget_gib=1.0, block_size=32))
    what_if = cpu_rules.num_blocks(Scenario(model="llama-3-8b", kv_budget_gib=1.0, block_size=32, kv_heads=4))
    assert own == 2**30 // (32 * 2 * 32 * 8 * 128 * 4) == 128 and what_if == 2 * own
    path, spec = model_dir("llama-3-8b", 4)  # what vLLM loads holds the same heads
    assert spec.num_kv_heads == 4 and '"num_key_value_heads": 4' in (path / "config.json").read_text()


def test_gpu_page_device_dtypes_are_model_loader_dtypes():
    pytest.importorskip("torch")
    from gpu_backend.devices import MODEL_DTYPES, devices
    from gpu_backend.model_loader import TORCH_DTYPES

    assert all(set(names) <= set(TORCH_DTYPES) for names in MODEL_DTYPES.values())
    assert set(devices(True, False)) <= set(MODEL_DTYPES) and devices(True, True) == ("cpu",)

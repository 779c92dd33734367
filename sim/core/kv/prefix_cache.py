"""Prefix caching books for the paged allocator: chained block keys and an LRU of cached blocks.

A full KV block can be reused by a later request only if everything before it is identical too,
so each block's key chains its parent's key (vLLM's hash(parent, tokens of the block)). The
simulator has no token ids; a trace gives per-request `prefix_hashes`, one id per hash block of
`prefix_block_size` tokens (Mooncake: 512), which may differ from the KV block size. Mapping:
KV block k holds tokens [k*bs, (k+1)*bs) and overlaps hash blocks floor(k*bs/H) ..
floor(((k+1)*bs - 1)/H); its key is hash(key of block k-1, those hash ids). So a KV block hits
only when every hash block it overlaps matches AND the whole prefix before it matches. Only KV
blocks lying entirely inside the hashed range [0, len(prefix_hashes) * H) get a key.

(The last hash block of a trace row may be partial: it covers the prompt's tail only. A KV block
past the prompt's end but inside that hash block may get a key, but it can never be hit falsely:
a request with the same hash ids has the same prompt, and hits are capped below its prompt end.)

Freed blocks that carry a key stay cached (refcount 0) in an LRU; they count as free and are
evicted, least recently freed first, only when clean free blocks run out (vLLM V1's free queue:
blocks without a hash go to its front, hashed ones to its back).

Two blocks may hold the same key (a request computed a block while another was computing the same
one): both are cached, as in vLLM V1's BlockHashToBlockMap, and a lookup returns the one cached
first; when it is evicted the other serves the key.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from itertools import compress
from operator import not_
from typing import Protocol

from sim.core.kv.parked_lru import ParkedLRU

_ROOT_KEY = 0x5EED  # parent key of block 0; any fixed int
# Keys computed lately, by (id of the prefix_hashes, block size, hash block size), the hashes kept
# with them (so an id is never reused while its entry lives): a fleet's router reads every replica's
# cache for the arriving prompt, and its scheduler asks again at admission, after other prompts.
_RECENT_KEYS: OrderedDict[tuple[int, int, int], tuple[Sequence[int], list[int]]] = OrderedDict()
RECENT_KEYS_KEPT = 256  # prompts: more than a fleet's queues hold at once; a few MiB of long prompts


class TierHooks(Protocol):
    """What a KV tier stack below the pool hears (sim/core/tiers/stack.py)."""

    def on_registered(self, keys: Sequence[int], lo: int, hi: int) -> None: ...
    def on_gpu_evicted(self, keys: Sequence[int]) -> None: ...
    @property
    def wants_evictions(self) -> bool: ...


class PrefixCache:
    """Key <-> block maps plus the LRU of cached free blocks. Knows nothing about refcounts."""

    def __init__(self, block_size: int, prefix_block_size: int | None = None) -> None:
        self.block_size = block_size
        self.prefix_block_size = prefix_block_size or block_size
        self._key_to_block: dict[int, int] = {}  # the block a lookup returns (cached first)
        self._dups: dict[int, list[int]] = {}  # further blocks with the same key, in caching order
        self._block_to_key: dict[int, int] = {}
        self._lru = ParkedLRU()  # cached free blocks, LRU first
        self._memo_hashes: Sequence[int] | None = None
        self._memo_keys: list[int] = []
        self.evictions = 0
        self.on_evict: Callable[[list[int]], None] | None = None  # told the keys no block holds any more
        self.registrations = 0  # blocks given a key (a block keeps its key for life, so each counts once)
        self.lookup: Callable[[int], int | None] = self._key_to_block.get  # the cached block holding a key, or None

    # --- keys ----------------------------------------------------------------------------------
    def chain_keys(self, prefix_hashes: Sequence[int] | None) -> list[int]:
        """Chained keys of the KV blocks fully inside the hashed range (memoised on the last list,
        because the scheduler asks about the same waiting request step after step)."""
        if prefix_hashes is None or len(prefix_hashes) == 0:  # may be a numpy array: no truthiness
            return []
        if prefix_hashes is self._memo_hashes:
            return self._memo_keys
        bs, hb = self.block_size, self.prefix_block_size
        shared = _RECENT_KEYS.get((id(prefix_hashes), bs, hb))
        if shared is not None and shared[0] is prefix_hashes:
            self._memo_hashes, self._memo_keys = shared
            return shared[1]
        hashes = [int(h) for h in prefix_hashes]
        keys: list[int] = []
        parent = _ROOT_KEY
        if hb % bs == 0:  # common case: several KV blocks per hash block
            per = range(hb // bs)
            append = keys.append
            for h in hashes:
                for _ in per:
                    parent = hash((parent, h))
                    append(parent)
        else:
            for k in range(len(hashes) * hb // bs):
                first, last = k * bs // hb, ((k + 1) * bs - 1) // hb
                parent = hash((parent, *hashes[first : last + 1]))
                keys.append(parent)
        self._memo_hashes, self._memo_keys = prefix_hashes, keys
        _RECENT_KEYS[id(prefix_hashes), bs, hb] = (prefix_hashes, keys)
        if len(_RECENT_KEYS) > RECENT_KEYS_KEPT:
            _RECENT_KEYS.popitem(last=False)
        return keys

    # --- lookup and registration ---------------------------------------------------------------
    def match(self, keys: Sequence[int], max_blocks: int) -> list[int]:
        """Blocks holding the longest cached prefix of `keys`, at most `max_blocks` of them."""
        hits: list[int] = []
        get = self._key_to_block.get
        for key in keys[:max_blocks]:
            block = get(key)
            if block is None:
                break
            hits.append(block)
        return hits

    def register(self, key: int, block: int) -> bool:
        """Make a just-filled block findable by `key` (a block holds one key for life). A second
        block with a key already cached is cached too, behind the first."""
        if block in self._block_to_key:
            return False
        first = self._key_to_block.setdefault(key, block)
        if first != block:
            self._dups.setdefault(key, []).append(block)
        self._block_to_key[block] = key
        self.registrations += 1
        return True

    def register_many(self, keys: Sequence[int], blocks: Sequence[int]) -> None:
        """`register(key, block)` for each pair in order, for blocks that hold no key yet: the paged
        pool registers only blocks past a table's registered count, which came clean from its free
        list or an eviction. That is checked by the map's size after the update (a probe per block
        before it cost ~3% of a tiered replay); a block already keyed raises (register() says why)."""
        if len(keys) != len(blocks):
            raise ValueError(f"register_many: {len(keys)} keys for {len(blocks)} blocks")
        b2k, k2b = self._block_to_key, self._key_to_block
        before_b, before = len(b2k), len(k2b)
        b2k.update(zip(blocks, keys, strict=True))
        if len(b2k) - before_b != len(blocks):
            raise ValueError("register_many: a block already holds a key (or is given twice)")
        firsts = list(map(k2b.setdefault, keys, blocks))  # one probe a key: the block each key resolves to
        if len(k2b) - before != len(keys):  # rare: a key cached already (or twice here): a duplicate
            for key, block, first in zip(keys, blocks, firsts, strict=True):
                if first != block:
                    self._dups.setdefault(key, []).append(block)
        self.registrations += len(blocks)

    def _forget_duplicated(self, key: int, block: int) -> None:
        """Drop `block` from a key that has duplicates; the next one takes over if it was first."""
        dups = self._dups[key]
        if self._key_to_block[key] == block:
            self._key_to_block[key] = dups.pop(0)
        else:
            dups.remove(block)
        if not dups:
            del self._dups[key]

    def is_cached(self, block: int) -> bool:
        return block in self._block_to_key

    def cached_of(self, blocks: Sequence[int]) -> list[int]:
        """The blocks that hold a key, in the order given."""
        b2k = self._block_to_key
        return [b for b in blocks if b in b2k]

    # --- LRU of cached free blocks (a queue of runs: sim/core/kv/parked_lru.py) ---------------------
    def park(self, block: int) -> None:
        """A keyed block's last user left: keep it, most recently used at the end."""
        self._lru.park([block])

    def park_many(self, blocks: Sequence[int]) -> None:
        """`park(block)` for each block in order."""
        self._lru.park(list(dict.fromkeys(blocks)))

    def park_keyed(self, blocks: Sequence[int]) -> list[int]:
        """`park` the blocks that hold a key (distinct), in order, as one run; returns the others
        (clean), in order. The keyed test and both splits are C loops: no Python step per block."""
        keyed = list(map(self._block_to_key.__contains__, blocks))
        if all(keyed):
            self._lru.park(list(blocks))
            return []
        self._lru.park(list(compress(blocks, keyed)))
        return list(compress(blocks, map(not_, keyed)))

    def unpark(self, block: int) -> None:
        """A hit takes a parked block back into use."""
        self._lru.unpark(block)

    def is_parked(self, block: int) -> bool:
        return block in self._lru.contents

    def count_parked(self, blocks: Sequence[int]) -> int:
        """How many of `blocks` are parked (one C loop: admission asks this of every hit run)."""
        return sum(map(self._lru.contents.__contains__, blocks))

    def unpark_parked(self, blocks: Sequence[int]) -> list[int]:
        """`unpark` the parked ones of `blocks`; returns the others (in use), in order."""
        return self._lru.unpark_present(blocks)

    def evict(self, count: int) -> list[int]:
        """Forget the `count` least recently used parked blocks and hand them out as clean."""
        lru, b2k, k2b, dups = self._lru, self._block_to_key, self._key_to_block, self._dups
        out = lru.evict(count)
        keys = list(map(b2k.pop, out))
        if dups and not dups.keys().isdisjoint(keys):  # rare: another block may still hold a key
            gone = []
            for key, block in zip(keys, out, strict=True):
                if key in dups:
                    self._forget_duplicated(key, block)
                else:
                    del k2b[key]
                    gone.append(key)
        else:  # the common case: each key's only block
            deque(map(k2b.__delitem__, keys), maxlen=0)
            gone = keys
        self.evictions += count
        if gone and self.on_evict is not None:
            self.on_evict(gone)
        return out

    @property
    def num_parked(self) -> int:
        return len(self._lru)

    def lru_head(self, count: int) -> set[int]:
        """The `count` parked blocks `evict(count)` would take now (no side effects)."""
        return set(itertools.islice(self._lru.order(), count))

    def parked_blocks(self) -> list[int]:
        """Parked blocks, least recently used first (for tests and invariant checks)."""
        return list(self._lru.order())

"""One replica's KV tiers below the GPU pool: lookup, loads, stores, and the bytes each moves.

Clock-free: the scheduler tells the stack the time (`now`) before it asks anything; a load returns
when its KV is ready, computed on the shared links of its path (sim/core/link.py: transfers queue
FIFO for a link's bandwidth, so concurrent loads share it). Stores never delay a request (they are
asynchronous, as in vLLM's connector) but hold their links, which the utilisation metric shows.

Chunks and keys: a chunk is `k` consecutive engine blocks (the policy's chunk size); its key is the
chained prefix key of its last block (sim/core/kv/prefix_cache.py), so a chunk's key names the whole
prefix up to its end, as LMCache's and vLLM's chunk hashes do. A lookup walks the request's chunks
from where the GPU prefix cache's hit ends, each in the first tier that holds it (CPU, NVMe,
remote), and stops at the first chunk no tier holds.

Who moves what (the policy, sim/core/tiers/policy.py):
- write-through: a chunk is stored into every tier as soon as its last block is computed (bytes:
  GPU -> CPU over the host link, CPU -> NVMe at the drive's write rate, out over the NIC to the
  remote store); a hit copies the chunk into the GPU pool and promotes it into the tiers above the
  one that held it (vLLM's tiering: secondary tiers reach the GPU through the CPU tier).
- on-eviction: a block enters the CPU tier when the GPU prefix cache evicts it, a tier's LRU victim
  moves one tier down (dropped below the last), a hit moves it up into the GPU; a block computed
  again on the GPU leaves the lower tiers. One owner at a time.

Bytes are always blocks moved x bytes per block (a chunk partly covered by the GPU hit or past the
prompt's last cached token moves only the blocks used), counted per tier and direction:
`load` (tier -> GPU) and `store` (into the tier).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, takewhile
from typing import Any

from sim.core.link import SharedLink, schedule_over
from sim.core.tiers.kinds import TierKind
from sim.core.tiers.lru import TierContents
from sim.core.tiers.policy import TierPolicy


@dataclass
class TierLevel:
    """One lower tier as a replica sees it: its (maybe shared) contents and the links of its paths."""

    kind: TierKind
    lru: TierContents  # an LRUTier, or a WeightedLRUTier for a pool with several KV groups
    load_path: tuple[SharedLink, ...]  # tier -> GPU pool
    store_path: tuple[SharedLink, ...]  # into the tier (write-through: from the GPU; on-eviction: from above)


@dataclass
class TierHits:
    """A lookup's answer: engine blocks found in each lower tier, and the chunks to load as runs of
    consecutive chunks held by one tier (level index, their keys)."""

    blocks: dict[str, int]
    runs: list[tuple[int, list[int]]]

    @property
    def total_blocks(self) -> int:
        return sum(self.blocks.values())


@dataclass
class TierStack:
    policy: TierPolicy
    levels: list[TierLevel]
    block_size: int
    bytes_per_block: int
    now: float = 0.0
    k: int = field(init=False)
    hit_tokens: dict[str, int] = field(init=False)
    bytes_moved: dict[str, dict[str, int]] = field(init=False)
    load_delays: dict[int, float] = field(default_factory=dict)  # request -> seconds its last load took
    swap_chunks: int = 0  # CPU-tier room held by swapped-out requests' KV
    muted: bool = False  # blocks being registered were just loaded from here: nothing to store

    def __post_init__(self) -> None:
        self.k = self.policy.chunk_blocks(self.block_size)
        if self.policy.store == "eviction" and self.k != 1:
            raise ValueError(f"tier policy {self.policy.name!r}: stores on eviction move engine blocks; a chunk of "
                             f"{self.k} blocks is not supported")
        self.hit_tokens = {lv.kind.name: 0 for lv in self.levels}
        self.bytes_moved = {lv.kind.name: {"load": 0, "store": 0} for lv in self.levels}
        if self._cpu() is not None:
            self.bytes_moved["cpu"].update(swap_out=0, swap_in=0)

    # --- lookup (no side effects: the router's query too) ------------------------------------------
    def lookup(self, keys: Sequence[int], first_block: int, max_blocks: int) -> TierHits:
        """Blocks [first_block, ...) of a request found below the GPU, as a contiguous run of chunks
        (each in the first tier that holds it), capped at max_blocks (the last prompt token is
        always computed). Runs within one tier are found at C speed (takewhile, compress over the keys)."""
        k, levels = self.k, self.levels
        blocks = {lv.kind.name: 0 for lv in levels}
        runs: list[tuple[int, list[int]]] = []
        c0 = first_block // k
        c_end = min(len(keys) // k, -(-max_blocks // k)) if first_block < max_blocks else c0
        chunk_keys = list(keys[c0 * k + k - 1 : c_end * k : k])  # chunk c's key: its last block's
        contents = [lv.lru.contents for lv in levels]
        i, n = 0, len(chunk_keys)
        while i < n:
            key = chunk_keys[i]
            where = next((j for j, held in enumerate(contents) if key in held), -1)
            if where < 0:
                break
            rest = chunk_keys[i:]
            run = len(list(takewhile(contents[where].__contains__, rest)))
            for above in contents[:where]:  # a chunk an upper tier holds belongs to that tier
                run = next(compress(range(1, run), map(above.__contains__, rest[1:run])), run)
            runs.append((where, rest[:run]))
            lo, hi = (c0 + i) * k, (c0 + i + run) * k
            blocks[levels[where].kind.name] += min(hi, max_blocks) - max(lo, first_block)
            i += run
        return TierHits(blocks, runs)

    def hit_blocks(self, pool: Any, total: int, hashes: Sequence[int], gpu_tokens: int) -> dict[str, int]:
        """Blocks of a `total`-token request each lower tier would add past a GPU hit of `gpu_tokens`
        (no side effects): what a KV-aware router scores. `pool` is the replica's paged allocator."""
        return self.lookup(pool.cache.chain_keys(hashes), gpu_tokens // self.block_size, (total - 1) // self.block_size).blocks

    # --- loads ----------------------------------------------------------------------------------------
    def load(self, hits: TierHits, r: int = -1, *, count_hits: bool = True) -> float:
        """Bring the hit chunks into the GPU pool (its blocks are already reserved); returns when the
        last byte has landed. Loads from different tiers run at once; each holds its path's links.
        count_hits: add the tokens to `hit_tokens` (False for a re-admission after a preemption, which
        the hit rate leaves out as vLLM's stats do)."""
        for where, run_keys in hits.runs:
            held = self.levels[where].lru
            if self.policy.copies:  # a use: most recent now
                held.touch_many(run_keys)
            else:  # moved up into the GPU pool
                held.remove_many(run_keys)
        if self.policy.copies:  # then promotion through the tiers above (their LRU may drop another
            for i, above in enumerate(self.levels):  # chunk of this load: it has been read by then)
                promoted = [key for where, run_keys in hits.runs if where > i for key in run_keys]
                if promoted:  # the bytes came up the load path: counted, no second transfer
                    self._store(above, above.lru.insert_many(promoted)[0] * self.k, transfer=False)
        ready = self.now
        for lv in self.levels:
            nblocks = hits.blocks.get(lv.kind.name, 0)
            if not nblocks:
                continue
            nbytes = nblocks * self.bytes_per_block
            self.bytes_moved[lv.kind.name]["load"] += nbytes
            if count_hits:
                self.hit_tokens[lv.kind.name] += nblocks * self.block_size
            ready = max(ready, schedule_over(lv.load_path, self.now, nbytes).done)
        self.load_delays[r] = ready - self.now
        return ready

    # --- stores ---------------------------------------------------------------------------------------
    def on_registered(self, keys: Sequence[int], lo: int, hi: int) -> None:
        """Blocks lo..hi-1 of a request (chained keys `keys`) were just computed or loaded into the GPU."""
        if self.muted:
            return
        if not self.policy.copies:
            for key in keys[lo:hi]:  # the GPU copy is the block's one home now
                for lv in self.levels:
                    if key in lv.lru:
                        lv.lru.remove(key)
            return
        k = self.k
        first = lo + (-(lo + 1)) % k  # the first block at or after lo that ends a chunk
        chunk_keys = list(keys[first:hi:k])
        if chunk_keys:
            for lv in self.levels:  # write-through: every tier (victims dropped: the tiers below hold them)
                self._store(lv, lv.lru.insert_many(chunk_keys)[0] * k)

    @property
    def wants_evictions(self) -> bool:
        """Whether the GPU pool must report its evictions (on-eviction stores them)."""
        return not self.policy.copies and bool(self.levels)

    def on_gpu_evicted(self, keys: Sequence[int]) -> None:
        """Keys the GPU prefix cache just dropped (no GPU block holds them any more)."""
        if self.policy.copies or not self.levels:
            return
        pending = list(keys)
        for lv in self.levels:  # on-eviction: into the CPU tier, each tier's victims one tier down
            stored, pending = lv.lru.insert_many(pending)
            self._store(lv, stored)
            if not pending:
                return

    def _store(self, lv: TierLevel, nblocks: int, *, transfer: bool = True) -> None:
        """Book `nblocks` blocks written into `lv` (one transfer over its store path)."""
        if nblocks:
            self._store_bytes(lv, nblocks * self.bytes_per_block, transfer=transfer)

    def _store_bytes(self, lv: TierLevel, nbytes: int, *, transfer: bool = True) -> None:
        """Book `nbytes` written into `lv` (one transfer over its store path)."""
        if nbytes:
            self.bytes_moved[lv.kind.name]["store"] += nbytes
            if transfer:
                schedule_over(lv.store_path, self.now, nbytes)

    # --- swap preemption: swapped-out KV lives in the CPU tier -------------------------------------
    def swap_capacity_bytes(self) -> int | None:
        """The CPU tier's size, which is the swap space when there is one (None: no CPU tier)."""
        lv = self._cpu()
        return None if lv is None else (lv.lru.capacity_chunks + self.swap_chunks) * self.k * self.bytes_per_block

    def swap_out(self, nbytes: int) -> None:
        """A preempted request's KV moves into the CPU tier: it takes that room from the cached chunks
        (the LRU's victims are dropped, or move down a tier under on-eviction)."""
        lv = self._cpu()
        if lv is None or nbytes <= 0:
            return
        chunks = self._chunks(nbytes)
        self.swap_chunks += chunks
        victims = lv.lru.resize(lv.lru.capacity_chunks - chunks)
        if victims and not self.policy.copies and len(self.levels) > 1:
            lower = self.levels[1]
            self._store(lower, lower.lru.insert_many(victims)[0])
        self.bytes_moved["cpu"]["swap_out"] += nbytes
        schedule_over(lv.store_path, self.now, nbytes)

    def swap_in(self, nbytes: int) -> None:
        """A swapped request resumes: its room in the CPU tier is the cache's again."""
        lv = self._cpu()
        if lv is None or nbytes <= 0:
            return
        chunks = self._chunks(nbytes)
        self.swap_chunks -= chunks
        lv.lru.resize(lv.lru.capacity_chunks + chunks)
        self.bytes_moved["cpu"]["swap_in"] += nbytes
        schedule_over(lv.load_path, self.now, nbytes)

    def _chunks(self, nbytes: int) -> int:
        size = self.k * self.bytes_per_block
        return -(-nbytes // size)

    def _cpu(self) -> TierLevel | None:
        return self.levels[0] if self.levels and self.levels[0].kind.name == "cpu" else None

    # --- books ----------------------------------------------------------------------------------------
    def occupancy_bytes(self) -> dict[str, int]:
        """Bytes held in each tier now (a shared tier reports its whole contents)."""
        return {lv.kind.name: len(lv.lru) * self.k * self.bytes_per_block for lv in self.levels}

    def holders(self, key: int) -> list[str]:
        """The tiers holding `key` (property tests: one owner unless the policy copies)."""
        return [lv.kind.name for lv in self.levels if key in lv.lru]

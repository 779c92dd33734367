"""KV tiers below a pool with several KV groups (sliding window + full attention: gpt-oss, Gemma-3;
chunked local attention: Llama-4), as vLLM's OffloadingConnector does it with its hybrid KV cache
manager (docs/TIERS.md "Per KV group" has each rule with its source):

- every group's blocks are offloaded (vLLM offloads `prefix_cacheable_group_ids`: full, sliding,
  chunked, MLA and Mamba groups alike), each under its own key (`make_offload_key(hash, group)`)
  and at its own size: a block of group g is its `pages` pages of the GPU pool (its layers at its
  bytes per token), so bytes moved = blocks moved x bytes per block of their group, per group
  (`group_bytes`). A state block moves at its state's bytes, unpadded, as vLLM copies it
  (offloading/worker.py `unpadded_page_size_bytes`, kv_offload/cpu/gpu_worker.py); it holds
  its pool pages in a tier. Which state blocks exist is the GPU pool's align-mode rule (only
  retained states are keyed, so stored: vLLM's store applies the same `reachable_block_mask`);
- a block is stored as soon as the GPU pool keys it (write-through; every tier, inclusive);
- a lookup finds the longest prefix every group can serve from the GPU hit on, by the same fixed
  point as the GPU prefix cache (each group's manager `longest_hit`: full attention needs every
  block, a sliding window the blocks the next token attends to, a chunked layer its current chunk,
  a state group one block at the largest aligned end: vLLM's window of 1 chunk for MambaSpec),
  with blocks before the GPU hit's end counted as present and the rest looked up in the tiers;
- a load brings in, per group, only the blocks the request will hold: from the GPU hit's end, or
  for a window or chunk group from the first block it still attends to (vLLM pads the others with
  its null block), each from the first tier that holds it.

Hit tokens per tier (the summary's tier_hit_rate): each prompt position the load covers counts
once, for the lowest tier any group's block at that position came from; positions no group loads
(before a window, with no full-attention group) count with the next loaded position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sim.core.link import schedule_over
from sim.core.tiers.stack import TierStack


class GroupedPool(Protocol):
    """What the lookup reads of the per-group pool (sim.core.kv.hybrid_prefix.HybridPrefixAllocator)."""

    block_size: int

    @property
    def managers(self) -> Sequence[Any]: ...  # sim.core.kv.group_managers.GroupManager, one per group

    def group_keys(self, prefix_hashes: Sequence[int] | None) -> list[list[int]]: ...
    def prefix_hit_tokens(self, num_tokens: int, prefix_hashes: Sequence[int] | None = None) -> int: ...


@dataclass
class GroupHits:
    """A lookup's answer: the GPU hit's end and the load's end (blocks of the prompt), the blocks to
    load as (tier level, group, key), and the positions each tier is counted for."""

    gpu_end: int
    end: int
    loads: list[tuple[int, int, int]]
    blocks: dict[str, int]

    @property
    def total_blocks(self) -> int:
        return self.end - self.gpu_end


@dataclass
class GroupedTierStack(TierStack):
    """One replica's lower tiers for a per-group pool: units are pool pages (`bytes_per_block` is the
    page's bytes), `group_pages` the pages of one block of each group."""

    group_pages: tuple[int, ...] = ()
    group_bytes: tuple[int, ...] = ()  # bytes moved per block of each group (default: its pages' bytes)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.group_bytes:
            self.group_bytes = tuple(p * self.bytes_per_block for p in self.group_pages)

    # --- lookup (no side effects) ----------------------------------------------------------------
    def lookup_groups(self, pool: GroupedPool, total: int, hashes: Sequence[int]) -> GroupHits | None:
        """The longest prefix of a `total`-token request every group serves from the GPU and the
        tiers, past the GPU hit (None: the tiers add nothing). The last prompt token is computed."""
        gkeys = pool.group_keys(hashes)
        bs = pool.block_size
        if not gkeys or not self.levels:
            return None
        gpu_end = pool.prefix_hit_tokens(total, hashes) // bs
        length = min((total - 1) // bs, len(gkeys[0]))
        if length <= gpu_end:
            return None
        held = [lv.lru.contents for lv in self.levels]
        full = [g for g, m in enumerate(pool.managers) if m.kind == "full"]
        if full and not any(gkeys[full[0]][gpu_end] in h for h in held):
            return None  # full attention needs the block right after the GPU hit: no tier has it
        finders = [self._finder(set(keys[:gpu_end]), held) for keys in gkeys]
        while True:  # the GPU prefix cache's fixed point: each group accepts or shortens the length
            start = length
            for g, m in enumerate(pool.managers):
                length = min(length, m.longest_hit(finders[g], gkeys[g], length)[0])
            if length == start:
                break
        if length <= gpu_end:
            return None
        return self._plan(pool, gkeys, gpu_end, length, held)

    def hit_blocks(self, pool: Any, total: int, hashes: Sequence[int], gpu_tokens: int) -> dict[str, int]:
        """The router's query for a per-group pool: lookup_groups' positions per tier (its own GPU hit)."""
        hits = self.lookup_groups(pool, total, hashes)
        return {} if hits is None else hits.blocks

    @staticmethod
    def _finder(gpu: set[int], held: list[Any]) -> Any:
        """A manager's lookup: 1 for a key before the GPU hit's end or in a tier, else None."""
        if len(held) == 1:
            only = held[0]
            return lambda key: 1 if key in gpu or key in only else None
        return lambda key: 1 if key in gpu or any(key in h for h in held) else None

    def _plan(self, pool: GroupedPool, gkeys: list[list[int]], gpu_end: int, end: int, held: list[Any]) -> GroupHits:
        bs, n = pool.block_size, end - gpu_end
        loads: list[tuple[int, int, int]] = []
        deepest = [-1] * n  # per position: the lowest tier any group's block there comes from
        for g, m in enumerate(pool.managers):
            for j in range(max(gpu_end, int(m.skipped_blocks(end * bs))), end):
                key = gkeys[g][j]
                where = next(i for i, h in enumerate(held) if key in h)  # present: the lookup found it
                loads.append((where, g, key))
                deepest[j - gpu_end] = max(deepest[j - gpu_end], where)
        for i in range(n - 2, -1, -1):  # positions no group loads: as the next loaded one
            if deepest[i] < 0:
                deepest[i] = deepest[i + 1]
        blocks = {lv.kind.name: 0 for lv in self.levels}
        for where in deepest:
            blocks[self.levels[where].kind.name] += 1
        return GroupHits(gpu_end, end, loads, blocks)

    # --- loads -----------------------------------------------------------------------------------
    def load(self, hits: Any, r: int = -1, *, count_hits: bool = True) -> float:
        """Bring the planned blocks into the GPU pool (reserved already); returns when the last byte
        has landed. Each tier's blocks are one transfer over its load path; tiers load at once."""
        for where, _, key in hits.loads:  # a use: most recent now (the tiers keep their copies)
            self.levels[where].lru.touch(key)
        for i, above in enumerate(self.levels):  # promotion through the tiers above (counted, no second transfer)
            promoted = {key: g for where, g, key in hits.loads if where > i}
            if promoted:
                self._store_groups(above, promoted, transfer=False)
        ready = self.now
        for i, lv in enumerate(self.levels):
            nbytes = sum(self.group_bytes[g] for where, g, _ in hits.loads if where == i)
            if not nbytes:
                continue
            self.bytes_moved[lv.kind.name]["load"] += nbytes
            ready = max(ready, schedule_over(lv.load_path, self.now, nbytes).done)
        if count_hits:
            for name, count in hits.blocks.items():
                self.hit_tokens[name] += count * self.block_size
        self.load_delays[r] = ready - self.now
        return ready

    # --- stores ----------------------------------------------------------------------------------
    def on_group_blocks(self, keys: Sequence[int], groups: Sequence[int]) -> None:
        """Blocks the GPU pool just keyed (computed), with their groups: stored into every tier."""
        if self.muted or not self.levels:
            return
        items = dict(zip(keys, groups, strict=True))  # a key once: later copies were touches
        for lv in self.levels:
            self._store_groups(lv, items)

    def _store_groups(self, lv: Any, items: dict[int, int], *, transfer: bool = True) -> None:
        """Write blocks (key -> group) into tier `lv` (a WeightedLRUTier: key -> its pages), booking
        the bytes of those newly stored, each at its group's bytes (one transfer)."""
        pages, held = self.group_pages, lv.lru.contents
        fresh = [g for key, g in items.items() if key not in held and pages[g] <= lv.lru.capacity_chunks]
        lv.lru.insert_many({key: pages[g] for key, g in items.items()})
        self._store_bytes(lv, sum(map(self.group_bytes.__getitem__, fresh)), transfer=transfer)

    def on_registered(self, keys: Sequence[int], lo: int, hi: int) -> None:
        raise AssertionError("a per-group pool reports its blocks through on_group_blocks")

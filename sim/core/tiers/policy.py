"""Tier policies: when a KV block goes to a lower tier, in what chunk, and whether it is copied or moved.

Each is a real system's behaviour (docs/TIERS.md has the sources):
- `write-through` (vLLM's OffloadingConnector and its tiering manager, vllm/v1/kv_offload/): every
  newly computed full chunk is stored to the CPU tier at once and cascaded to every lower tier
  ("always offload to all tiers"); a lower-tier hit is a copy, the tiers keep theirs (inclusive);
  the chunk is the engine block (its `block_size` option may make it larger).
- `lmcache`: the same store-everything policy at LMCache's 256-token chunks (LMCache's default
  chunk_size): a hit counts whole chunks only.
- `on-eviction` (exclusive, as a victim cache: Dynamo KVBM's offload of blocks leaving G1): a block
  is stored in the CPU tier only when the GPU prefix cache evicts it; a tier's LRU victim moves to
  the next tier down; a hit moves the block up (it leaves the lower tier). A block lives in one
  tier at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.registry import Registry


@dataclass(frozen=True)
class TierPolicy:
    name: str
    store: str  # "write-through" (on compute, to every tier) or "eviction" (on leaving the tier above)
    chunk_tokens: int | None  # None: the engine's KV block
    description: str

    @property
    def copies(self) -> bool:
        """Lower tiers keep a block after it is loaded (inclusive); False: blocks move (exclusive)."""
        return self.store == "write-through"

    def chunk_blocks(self, block_size: int) -> int:
        """Engine blocks per chunk (a chunk must be a whole number of blocks)."""
        if self.chunk_tokens is None:
            return 1
        if self.chunk_tokens % block_size:
            raise ValueError(f"tier policy {self.name!r}: chunk of {self.chunk_tokens} tokens is not a multiple "
                             f"of the block size {block_size}")
        return self.chunk_tokens // block_size


TIER_POLICIES: Registry[TierPolicy] = Registry("tier policy", ((p.name, p) for p in (
    TierPolicy("write-through", "write-through", None,
               "vLLM OffloadingConnector: store each computed block to CPU at once, cascade to every lower tier; "
               "hits copy (inclusive)"),
    TierPolicy("lmcache", "write-through", 256,
               "LMCache: store every 256-token chunk to every tier as it is computed; hits count whole chunks"),
    TierPolicy("on-eviction", "eviction", None,
               "victim cache (Dynamo KVBM-style): a block goes down a tier when the tier above evicts it; "
               "hits move it up (exclusive)"),
)))

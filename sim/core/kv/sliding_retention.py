"""Which full blocks of a sliding-window group vLLM 0.32 keys in its prefix cache, as a pure rule of
one request (`prefix_cache_retention_interval`).

Read in vLLM 0.32.0's source (.venv-vllm, site-packages/vllm/), without EAGLE and with every group
at the pool's block size (the scheduler block is the block, the alignment of a hit):

- v1/core/single_type_kv_cache_manager.py `SingleTypeKVCacheManager.cache_blocks` hands
  `SlidingWindowManager.reachable_block_mask` the request's reachable boundaries, and
  v1/core/block_pool.py `cache_full_blocks(block_mask=...)` gives a masked block no hash; a block
  without a hash is freed to the front of the free queue, like a clean one (`free_blocks`).
- the boundaries (v1/core/kv_cache_coordinator.py `replay_boundaries`, kv_cache_manager.py
  `get_computed_blocks`): the replay boundary `prompt - 1` and the shared-prefix junction (where
  the longest single group's hit ends when it passes the reconciled hit; sim/core/kv/mamba_align.py
  `shared_prefix_junction`). Decode blocks lie past both, so they are masked too.
- the mask: a hit needs `need` = ceil((window - 1) / block) cached blocks before its end
  (`_contiguous_blocks_for_hit`); a block is kept when it is one of the `need` ending at a boundary
  (floored to the block); with a retention interval > 0 also the last `need` of every interval;
  interval None keeps every block (vLLM's dense rule, "a tail at every alignment boundary"), and
  so does an interval of `need` blocks or less (`need >= per_segment`).
- config/cache.py `prefix_cache_retention_interval`: default 0 (only the boundaries); it must be a
  multiple of the scheduler block (kv_cache_coordinator.py `_validate_prefix_cache_retention_interval`).
- vLLM's offloading connector (distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py
  `_build_store_jobs`) stores a sliding group's blocks through the same `reachable_block_mask`,
  with the same boundaries, so a lower KV tier holds what the GPU pool keys.

One model decision beyond vLLM (`hashed_boundary`): on a trace hashed per H > block tokens
(Mooncake: 512), a prompt's last hash block is partial and its id changes in the next turn, so the
replay boundary's blocks can never be found by a later turn there, while on the real token stream
the next turn finds them. The trace's stand-in is the last whole hash block's end
(prompt // H x H), kept as a further boundary when the prompt does not end on a hash block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Run = tuple[int, int]  # block indices [start, end)


def blocks_for_hit(window: int, block_size: int) -> int:
    """Cached blocks a sliding-window hit needs before its end (`_contiguous_blocks_for_hit`)."""
    return -(-(window - 1) // block_size)


def is_dense(interval: int | None, need: int, block_size: int) -> bool:
    """Whether the interval keeps every block (None, or an interval of `need` blocks or fewer)."""
    return interval is None or (interval > 0 and need >= interval // block_size)


def check_interval(interval: int | None, block_size: int) -> None:
    """vLLM's check: None, or a non-negative multiple of the scheduler block (ValueError, one line)."""
    if interval is not None and (interval < 0 or interval % block_size):
        raise ValueError(f"prefix_cache_retention_interval={interval} must be none or a non-negative "
                         f"multiple of the block size ({block_size})")


def hashed_boundary(prompt_tokens: int, hash_block: int, block_size: int) -> int:
    """The stand-in boundary on a trace hashed per `hash_block` > block tokens: the end of the
    prompt's last whole hash block when the prompt ends inside a hash block, else 0 (none)."""
    if hash_block <= block_size or prompt_tokens % hash_block == 0:
        return 0
    return prompt_tokens // hash_block * hash_block


@dataclass(frozen=True)
class SlidingKeep:
    """The blocks one request keys in one sliding group under a sparse interval: its hit blocks
    (below `hit_end`, keyed already), the `need` blocks ending at each boundary, and with an
    interval > 0 the last `need` of every `per_segment` blocks."""

    need: int
    hit_end: int  # blocks of the request's prefix-cache hit
    tails: tuple[Run, ...]  # the boundary tails, sorted
    per_segment: int = 0  # blocks per retention interval (0: none)
    top: int = field(init=False, repr=False, compare=False)  # no block at or past it is keyed (see __post_init__)

    def __post_init__(self) -> None:
        """`top`: without an interval, one past the last keyed block (a decode run's drops lie past
        it: `runs` is empty there); with one, every segment keys blocks, so no such bound."""
        top = max([self.hit_end, *(b for _, b in self.tails)]) if not self.per_segment else 1 << 62
        object.__setattr__(self, "top", top)

    @classmethod
    def of(cls, need: int, block_size: int, boundaries: tuple[int, ...], hit_end: int,
           interval: int) -> SlidingKeep:
        """The keep of a request whose reachable boundaries (tokens) are `boundaries`."""
        tails = sorted({(max(b // block_size - need, 0), b // block_size) for b in boundaries if b > 0})
        return cls(need, hit_end, tuple(t for t in tails if t[1] > t[0]), interval // block_size if interval else 0)

    def runs(self, lo: int, hi: int) -> list[Run]:
        """The keyed sub-runs of blocks [lo, hi), ascending and disjoint."""
        if not self.per_segment:
            return self._runs_unsorted(lo, hi)
        spans: list[Run] = [(lo, min(hi, self.hit_end))] if lo < self.hit_end else []
        spans += [(max(a, lo), min(b, hi)) for a, b in self.tails]
        if self.per_segment:
            p, n = self.per_segment, self.need
            first = lo // p * p
            spans += [(max(s + p - n, lo), min(s + p, hi)) for s in range(first, hi, p)]
        out: list[Run] = []
        for a, b in sorted(s for s in spans if s[1] > s[0]):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    def _runs_unsorted(self, lo: int, hi: int) -> list[Run]:
        """runs() without an interval (the default): the hit's run starts at lo and the clipped
        tails keep their sorted order, so they merge in one pass, no sort (the pool asks this for
        every row of a sliding group, every step)."""
        top = min(hi, self.hit_end)
        out: list[Run] = [(lo, top)] if top > lo else []
        for a, b in self.tails:
            a, b = max(a, lo), min(b, hi)
            if b <= a:
                continue
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

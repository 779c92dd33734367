"""vLLM 0.32's prefix caching of linear-attention (Mamba / Gated DeltaNet) states in 'align' mode
(`--mamba-cache-mode align`), as pure rules of one request and one state group.

Read in vLLM 0.32.0's source (.venv-vllm, site-packages/vllm/), without speculative decoding,
prefill checkpoint blocks, partial-block hits or the exact (unfloored) junction checkpoint (all
off by default):

- `aligned_chunk`: v1/core/sched/scheduler.py `Scheduler._mamba_block_aligned_split`. A prefill
  chunk that does not reach the prompt's end is cut down to a block boundary (when that leaves
  tokens, or when a block fits the token budget), a chunk starting inside a block stops at the
  next boundary, no chunk runs past the last cacheable boundary
  (v1/kv_cache_interface.py `get_mamba_prefill_checkpoint_position`: (tokens - 1) // block x block),
  and none past the shared-prefix junction floored to whole blocks from the chunk's start.
- `state_blocks_held`: v1/core/single_type_kv_cache_manager.py `MambaManager`. A step starting at
  `computed` tokens first frees every block before the running state (`get_num_skipped_tokens` =
  computed - 1, and `remove_skipped_blocks` frees `last_state_block_idx`), so the request keeps
  block cdiv(computed, block) - 1; `allocate_new_blocks` then takes one block, the one the step's
  last token falls in (cdiv(end, block) - 1), leaving nulls between. At most 2 blocks: the budget
  sim/memory/vllm_pool.py books (`MambaSpec.max_memory_usage_bytes`, 2 pages per layer in align).
- `state_block_keyed`: `MambaManager.cache_blocks` -> v1/core/block_pool.py `cache_full_blocks`
  keys the request's full blocks below end // block and skips null ones, so of a state group only
  the step's last block can be newly keyed, when the step ends on its boundary (the running block
  below it had its chance when its own step ended). And only if retained (`state_block_retained`,
  `MambaManager.reachable_block_mask`): vLLM's default `prefix_cache_retention_interval` = 0
  (config/cache.py) keeps only the replay boundary (v1/core/kv_cache_coordinator.py
  `replay_boundaries`: prompt - 1, floored to the block) and the shared-prefix junction
  (v1/core/kv_cache_manager.py `get_computed_blocks`: the longest single-group hit when it is
  longer than the reconciled one, `shared_prefix_boundary`); an interval > 0 also keeps one block
  per interval; None keeps all.
- `longest_state_hit`: `MambaManager.find_longest_cache_hit`. From the right, the largest block i
  below the hit limit whose key is cached: the hit is i + 1 blocks and the request takes only that
  block (nulls before it). Same contract as `GroupManager.longest_hit`
  (sim/core/kv/group_managers.py), so the hybrid coordinator's fixed point
  (sim/core/kv/hybrid_prefix.py `_find_hit`) intersects it with the attention groups' hits.

Used by the simulator: the scheduler's cut (sim/core/scheduler.py `aligned_chunk`), the state
group's books and keying (sim/core/kv/group_managers.py AlignStateManager, sim/core/kv/hybrid_prefix.py
`state_block_keyed`, `shared_prefix_junction`) and its hit (StateManager.longest_hit); docs/TIERS.md
"Mamba `align` mode".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Lookup = Callable[[int], "int | None"]  # a block key -> the cached block holding it, or None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def checkpoint_position(num_tokens: int, block_size: int) -> int:
    """The last block boundary whose state may be cached for a request of `num_tokens` tokens
    (`get_mamba_prefill_checkpoint_position` without EAGLE: the last token is always recomputed)."""
    return max((num_tokens - 1) // block_size * block_size, 0)


def aligned_chunk(start: int, num_new: int, num_prompt: int, num_tokens: int, block_size: int,
                  max_prefill_tokens: int, junction: int = 0) -> int:
    """Tokens the scheduler runs in this step for a request at `start` computed tokens offered
    `num_new` (`_mamba_block_aligned_split`); `num_tokens` = prompt + outputs so far,
    `max_prefill_tokens` = the step's token budget (or long_prefill_token_threshold if lower),
    `junction` = the request's shared-prefix boundary (`shared_prefix_junction`, 0: none)."""
    prefill_end = max(num_prompt, num_tokens - 1)
    if start >= prefill_end:  # decode: no cut
        return num_new
    end = start + num_new
    if end < prefill_end:
        aligned_end = end // block_size * block_size
        if aligned_end > start or block_size <= max_prefill_tokens:
            end = aligned_end
    stops = (
        (start // block_size + 1) * block_size if start % block_size else 0,  # re-align a mid-block start
        checkpoint_position(num_tokens, block_size),  # never past the last cacheable boundary
        start + (junction - start) // block_size * block_size if start < junction < end else 0,
    )
    end = min((s for s in stops if start < s < end), default=end)
    return max(end - start, 0)


def state_blocks_held(computed: int, new: int, block_size: int) -> tuple[int, ...]:
    """Block indices of the state group a request holds while a step computes tokens
    computed .. computed + new - 1: the running state's block and the step's last block."""
    last = _cdiv(computed + new, block_size) - 1
    if computed <= 0:
        return (last,)
    running = (computed - 1) // block_size
    return (running,) if running == last else (running, last)


def shared_prefix_junction(hit_tokens: int, longest_group_hit: int) -> int:
    """`shared_prefix_boundary` (kv_cache_manager.py `get_computed_blocks`): where the longest
    single group's hit ends when it outruns the reconciled hit (a state the request should keep
    for siblings that share the prefix), else 0."""
    return longest_group_hit if longest_group_hit > hit_tokens else 0


def state_block_retained(index: int, block_size: int, num_prompt: int, junction: int = 0,
                         retention_interval: int | None = 0) -> bool:
    """Whether `MambaManager.reachable_block_mask` lets block `index` be keyed (see the module
    docstring; alignment = the scheduler's block, as without partial hash hits)."""
    if retention_interval is None:
        return True
    if retention_interval > 0:
        per_segment = retention_interval // block_size
        if per_segment <= 1 or (index + 1) % per_segment == 0:
            return True
    boundaries = (num_prompt - 1, junction) if junction else (num_prompt - 1,)
    return any(b // block_size - 1 == index for b in boundaries)


def state_block_keyed(computed: int, new: int, block_size: int, hashed_blocks: int, num_prompt: int,
                      junction: int = 0, retention_interval: int | None = 0) -> int | None:
    """The state block index this step keys (None: none): the step's last block, when the step ends
    on its boundary, the block has a hash (a full block of the request's hashed tokens) and the
    retention rule keeps it (vLLM's default: only the replay boundary and the junction)."""
    end = computed + new
    if new <= 0 or end % block_size or end // block_size > hashed_blocks:
        return None
    index = end // block_size - 1
    return index if state_block_retained(index, block_size, num_prompt, junction, retention_interval) else None


def longest_state_hit(lookup: Lookup, keys: Sequence[int], max_blocks: int) -> tuple[int, int, list[int]]:
    """(hit blocks n, first block index the request needs, its cached blocks): the largest i <
    max_blocks with keys[i] cached gives n = i + 1, first = i and that one block."""
    for i in range(min(max_blocks, len(keys)) - 1, -1, -1):
        block = lookup(keys[i])
        if block is not None:
            return i + 1, i, [block]
    return 0, 0, []

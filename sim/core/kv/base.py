"""The one allocator interface shared by the simulator and the GPU backend.

An allocator hands out KV block ids and keeps the books; it never touches tensors. The simulator
uses only the counts; the GPU backend turns block tables into index tensors into its KV pool.
Both allocators count in blocks of `block_size` token slots, so a contiguous reservation is a run
of consecutive block ids and contiguous vs paged can be measured on one pool.

Lengths handed in are token counts of one request:
- `num_tokens`: tokens whose K/V are (or are about to be) written: the token states;
- `final_tokens`: the request's true final length (prompt + true output), known to the simulator
  from the trace and to the GPU backend because output lengths are forced; used for accounting
  (reserved vs internal fragmentation) and by the contiguous `oracle` / `pow2` reservations;
- `reserve_tokens`: what a contiguous policy holds up front (ignored by the paged allocator).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from sim.core.step_types import Ids, KVBreakdown, Retention

if TYPE_CHECKING:
    from sim.core.interfaces import Allocator


@mypyc_attr(native_class=False)  # an exception: mypyc compiles it as a plain Python class
class AllocationError(RuntimeError):
    """Raised for misuse (unknown request, double allocate); running out of space is not an error."""


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (sim/native); contiguous.py subclasses it
class KVAllocator(ABC):
    """The base class of the allocators: the `sim.core.interfaces.Allocator` protocol with its
    defaults (one KV group, no prefix cache, growth by the same k built on grow_many)."""

    block_size: int
    num_blocks: int
    bytes_per_token: int  # whole deployment, K and V, every layer, scales included
    keys_sparsely = False  # True: allocate keys a sliding or state group only at the request's Retention

    # --- admission ---------------------------------------------------------------------------
    @abstractmethod
    def can_allocate(self, num_tokens: int, reserve_tokens: int, prefix_hashes: Sequence[int] | None = None,
                     *, computed_tokens: int = 0, chunk_tokens: int | None = None) -> bool:
        """Would `allocate` with these arguments succeed now (prefix-cache hits counted)?
        `chunk_tokens`: a whole-sequence admission (sim/core/interfaces.py Allocator.can_allocate)."""

    @abstractmethod
    def allocate(
        self,
        req_id: int,
        num_tokens: int,
        final_tokens: int,
        reserve_tokens: int,
        prefix_hashes: Sequence[int] | None = None,
        *,
        retention: Retention | None = None,
        computed_tokens: int = 0,
    ) -> int:
        """Give `req_id` room for its first `num_tokens`; return how many leading tokens were
        already cached (prefix-cache hit tokens, 0 without prefix caching). Raises AllocationError
        if it does not fit: callers ask can_allocate first. `computed_tokens`: leading tokens
        loaded from elsewhere (sim/core/interfaces.py Allocator.allocate); only per-group pools
        with a window or chunk use it."""

    # --- growth --------------------------------------------------------------------------------
    @abstractmethod
    def append(self, req_id: int, num_new_tokens: int) -> bool:
        """Grow `req_id` by `num_new_tokens` written tokens; False (and no change) if it cannot fit."""

    @abstractmethod
    def blocks_to_grow(self, req_ids: Ids, new_num_tokens: Ids) -> int:
        """Total new blocks needed for each request to reach its new length (vectorised helper
        for the engine's skip-ahead over runs of decode steps)."""

    @abstractmethod
    def grow_many(self, req_ids: Ids, new_num_tokens: Ids) -> None:
        """Bring every request to its new length at once; caller checked blocks_to_grow fits."""

    @abstractmethod
    def fits_growth(self, req_ids: Ids, num_new_tokens: int) -> bool:
        """Would `grow_by(req_ids, num_new_tokens)` fit now (blocks_to_grow <= num_free_blocks)?
        Allocators answer it without the exact count where a bound proves it (the decode path)."""

    def grow_by(self, req_ids: Ids, num_new_tokens: int) -> None:
        """Every request grows by the same `num_new_tokens` (a decode step or a run of them):
        grow_many's common case, which allocators may serve faster."""
        self.grow_many(req_ids, [self.num_tokens(int(r)) + num_new_tokens for r in req_ids])

    def track_batch(self, run: Ids, joined: Sequence[int] | None) -> None:  # noqa: B027 (a hint: the default ignores it)
        """A hint that `run` is the decode batch grow_by will be given (Allocator.track_batch):
        ignored here; the paged pool grows a tracked batch lazily."""

    def group_breakdown(self) -> dict[str, dict[str, int]]:
        """Per KV group {label: {"token_states", "internal_frag", "held"}} in bytes, for allocators
        that keep several groups (sim/core/kv/hybrid.py); empty for one group (see breakdown())."""
        return {}

    def prefix_hit_tokens(self, num_tokens: int, prefix_hashes: Sequence[int] | None = None) -> int:
        """Leading tokens of a new request already in the prefix cache (0: this allocator keeps none)."""
        return 0

    def prefix_junction(self, num_tokens: int, prefix_hashes: Sequence[int] | None) -> int:
        """The shared-prefix junction a sparsely keying pool retains (0: this allocator keys densely)."""
        return 0

    def steps_until_free_rises(self, req_ids: Ids) -> int:
        """Decode steps these requests can take (one token each) before one of them gives blocks
        back while still running: the scheduler ends a skip-ahead run there, because a waiting
        request may fit afterwards. Full-attention allocators never do: a very large number."""
        return 1 << 62

    # --- release -------------------------------------------------------------------------------
    @abstractmethod
    def free(self, req_id: int) -> None:
        """Release everything `req_id` holds (cached prefix blocks stay cached, refcount 0)."""

    # --- books ------------------------------------------------------------------------------------
    @abstractmethod
    def block_table(self, req_id: int) -> list[int]:
        """Block ids of `req_id` in token order (a contiguous run for the contiguous allocator)."""

    @abstractmethod
    def num_tokens(self, req_id: int) -> int:
        """Token states written for `req_id`."""

    @property
    @abstractmethod
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (evictable cached blocks included)."""

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def capacity_bytes(self) -> int:
        return self.num_blocks * self.block_size * self.bytes_per_token

    @abstractmethod
    def breakdown(self, waiting_reserve_tokens: Sequence[int] = ()) -> KVBreakdown:
        """Five-way split of capacity now. `waiting_reserve_tokens` are the space needs (in
        tokens) of the waiting requests, for external fragmentation."""


if TYPE_CHECKING:  # mypy checks the protocol here (a class compiled by sim/native cannot subclass a Protocol)
    def _implements(allocator: KVAllocator) -> Allocator:
        return allocator

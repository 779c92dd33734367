"""The three interfaces of a serving step, as Protocols (mypy checks them in `make test`).

- `Allocator`: KV blocks and their books. Implementations: sim/core/kv/ (paged, contiguous, the
  per-group hybrids); `sim.core.kv.base.KVAllocator` is their base class, with the defaults.
- `Scheduler`: what runs in the next step. Implementations: sim/core/scheduler.py (continuous
  batching) and sim/core/static_batch.py (the static-batching baseline). It also answers the
  decode fast path (`SkipAhead`, sim/core/step_types.py; its machinery is sim/core/decode_run.py):
  0 steps when it cannot say.
- `Executor`: carries out a step's plan and says when it ended. Implementations:
  sim/run/modelled_step.py (the simulator: the cost model's time on a SimPy clock) and
  gpu_backend/executor.py (a real model on a wall clock).

One step, whoever drives it (the engine, the GPU executor):

    plan = scheduler.schedule(now)               # None: nothing to run
    t_end = executor.execute(plan, now)
    finished = scheduler.complete_step(plan, t_end)

Implementations subclass the Protocol they implement or, where sim/native compiles them, are checked
against it under TYPE_CHECKING at the end of their file, so mypy checks every signature where it is
written. Callers type against these names, never against a concrete class; the one exception is the
allocator, typed as its compiled abstract base KVAllocator where the compiled scheduler calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sim.core.step_types import Ids, KVBreakdown, Retention, SkipAhead, StepPlan


class Allocator(Protocol):
    """Block-granular KV books; requests are non-negative int ids. Lengths are token counts:
    `num_tokens` written (or about to be), `final_tokens` the request's true final length,
    `reserve_tokens` what a contiguous policy holds up front (sim/core/kv/base.py says more)."""

    block_size: int  # token slots per block
    num_blocks: int  # blocks in the pool (pages for the per-group allocators)
    bytes_per_token: int  # whole deployment, K and V, every layer, scales included
    keys_sparsely: bool  # True: `allocate` wants the request's Retention (a sliding or state group keyed sparsely)

    # --- admission
    def can_allocate(self, num_tokens: int, reserve_tokens: int, prefix_hashes: Sequence[int] | None = None,
                     *, computed_tokens: int = 0, chunk_tokens: int | None = None) -> bool:
        """Would `allocate` with these arguments succeed now (prefix-cache hits counted)?
        `chunk_tokens`: vLLM's admission with full_sequence_must_fit (its default
        scheduler_reserve_full_isl): num_tokens is the request's whole known sequence, counted with
        vLLM's per-request admission cap of sliding-window and chunked groups, and the first
        chunk_tokens, which `allocate` then takes, must fit too (0: only the whole-sequence check).
        A pool without such groups ignores it: its whole-sequence need covers the chunk's."""
        ...

    def allocate(self, req_id: int, num_tokens: int, final_tokens: int, reserve_tokens: int,
                 prefix_hashes: Sequence[int] | None = None, *, retention: Retention | None = None,
                 computed_tokens: int = 0) -> int:
        """Room for the first `num_tokens`; returns the leading tokens already cached (prefix hits).
        `retention`: where the request's blocks may be keyed, when `keys_sparsely` (None: everywhere).
        `computed_tokens`: leading tokens whose KV arrives from elsewhere (a KV tier's load, a P/D
        handoff) and counts as computed: a sliding-window or chunked group holds only the blocks the
        next token attends to (vLLM's allocate_slots with num_external_computed_tokens gives the
        skipped ones its null block); one full-attention group holds them all, so it ignores it."""
        ...

    def prefix_junction(self, num_tokens: int, prefix_hashes: Sequence[int] | None) -> int:
        """vLLM's shared-prefix junction of a new request now (tokens; 0: none, or a pool that
        keys densely): where the longest single group's hit ends when it outruns the common hit."""
        ...

    def prefix_hit_tokens(self, num_tokens: int, prefix_hashes: Sequence[int] | None = None) -> int:
        """Leading tokens of a new request already cached (no side effects; 0 without a cache)."""
        ...

    # --- growth
    def append(self, req_id: int, num_new_tokens: int) -> bool:
        """Grow one request; False (and no change) if it cannot fit: the scheduler then preempts."""
        ...

    def blocks_to_grow(self, req_ids: Ids, new_num_tokens: Ids) -> int:
        """New blocks needed for every request to reach its new length (more than the pool: never)."""
        ...

    def fits_growth(self, req_ids: Ids, num_new_tokens: int) -> bool:
        """Would `grow_by(req_ids, num_new_tokens)` fit now?"""
        ...

    def grow_many(self, req_ids: Ids, new_num_tokens: Ids) -> None:
        """Every request to its new length at once (the caller checked blocks_to_grow)."""
        ...

    def grow_by(self, req_ids: Ids, num_new_tokens: int) -> None:
        """Every request grows by the same number of tokens (a decode step or a run of them)."""
        ...

    def track_batch(self, run: Ids, joined: Sequence[int] | None) -> None:
        """`run` (an array the caller keeps unchanged) is the decode batch that later grow_by calls
        will pass: `joined` its members new since the last tracked batch (None: all of them; the
        members that left were freed). An allocator may then grow it in O(block crossings)."""
        ...

    def steps_until_free_rises(self, req_ids: Ids) -> int:
        """Decode steps before one of these requests gives blocks back while running (a very
        large number for full attention): a decode run stops there when a request waits."""
        ...

    # --- release and books
    def free(self, req_id: int) -> None:
        """Release everything `req_id` holds (cached prefix blocks stay cached)."""
        ...

    def block_table(self, req_id: int) -> list[int]:
        """Block ids of `req_id` in token order (what the GPU backend indexes its pool with)."""
        ...

    def num_tokens(self, req_id: int) -> int:
        """Token states written for `req_id`."""
        ...

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (evictable cached blocks included)."""
        ...

    @property
    def num_used_blocks(self) -> int: ...

    @property
    def capacity_bytes(self) -> int: ...

    def breakdown(self, waiting_reserve_tokens: Sequence[int] = ()) -> KVBreakdown:
        """Five-way split of the capacity now (waiting needs: for external fragmentation)."""
        ...

    def group_breakdown(self) -> dict[str, dict[str, int]]:
        """Per KV layer group parts in bytes; {} for an allocator of one group."""
        ...


class Scheduler(SkipAhead, Protocol):
    """Clock-free step policy over one allocator; requests are row ids of the run's RequestTable."""

    peak_used_blocks: int  # most blocks in use after any step
    num_preemptions: int
    prefix_queries: int  # prompt tokens looked up in the prefix cache
    prefix_hits: int  # of which found there

    @property
    def has_work(self) -> bool:
        """Anything running, waiting or swapped out."""
        ...

    def add_request(self, r: int) -> None:
        """Request `r` has arrived: it waits for admission."""
        ...

    def waiting_needs(self) -> list[int]:
        """Token slots the next waiting requests need (the allocator's external-fragmentation input)."""
        ...

    def schedule(self, now: float) -> StepPlan | None:
        """The next step (its KV already booked in the allocator), or None: nothing can run."""
        ...

    def complete_step(self, plan: StepPlan, t_end: float) -> list[int]:
        """Apply a step that ended at `t_end`; returns the requests that finished."""
        ...


class Executor(Protocol):
    """Carries out one planned step."""

    def execute(self, plan: StepPlan, t_start: float) -> float:
        """Run `plan`, which starts at `t_start` on this executor's clock; return when it ended
        (the simulator: t_start + the modelled step time; the GPU backend: its wall clock, which
        runs by itself)."""
        ...

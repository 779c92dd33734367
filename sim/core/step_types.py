"""The policy core's shared types: what a step plans, where KV memory is, the decode fast path's
protocol. A leaf, like vLLM's core/sched/output.py: it imports nothing from the project, and the
interfaces, allocators, schedulers, the engine and the GPU backend all import it, so none of them
needs another for a type (the import contracts count type-only imports too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["BREAKDOWN_FIELDS", "PEAK_GRID_LIMIT", "Ids", "KVBreakdown", "Retention", "SkipAhead", "StepPlan"]

Ids = Sequence[int] | np.ndarray  # request ids or token counts: a list or an int array

BREAKDOWN_FIELDS: tuple[str, ...] = ("token_states", "reserved", "internal_frag", "external_frag", "free")


@dataclass(frozen=True)
class Retention:
    """Where a new request's cache may later be resumed (vLLM's reachable boundaries), for a pool
    that keys a sliding-window or state group's blocks only there (`Allocator.keys_sparsely`):
    the replay boundary `prompt_tokens - 1` and the shared-prefix junction (tokens, 0: none;
    `Allocator.prefix_junction`)."""

    prompt_tokens: int
    junction: int = 0


@dataclass(init=False, unsafe_hash=True)  # __init__ written out: compiled (a dataclass's generated one, or a
class KVBreakdown:                        # frozen one's setattr, runs as Python: ~9k instructions a gauge sample)
    """Where the KV capacity is, in bytes. The five parts add up to `capacity` exactly.

    token_states:  K/V actually written (scale bytes of quantised KV included).
    reserved:      slots held for tokens a running request has yet to generate.
    internal_frag: slots held that will never be written (over-reservation, last-block slack).
    external_frag: free slots no waiting request can use (no hole large enough).
    free:          the rest.
    A value: nothing changes one after it is built (hashable, compared by its parts).
    """

    token_states: int
    reserved: int
    internal_frag: int
    external_frag: int
    free: int

    def __init__(self, token_states: int, reserved: int, internal_frag: int, external_frag: int, free: int) -> None:
        self.token_states, self.reserved, self.internal_frag = token_states, reserved, internal_frag
        self.external_frag, self.free = external_frag, free

    @property
    def capacity(self) -> int:
        return self.token_states + self.reserved + self.internal_frag + self.external_frag + self.free

    def fractions(self) -> dict[str, float]:
        cap = self.capacity or 1
        return {name: getattr(self, name) / cap for name in BREAKDOWN_FIELDS}

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in BREAKDOWN_FIELDS}


class StepPlan:
    """What one step computes. Token counts are per request; arrays are aligned.

    decode_ids: requests computing one token (their last sampled one) and sampling the next;
    decode_context: their K/V tokens before the step.
    prefill_ids / prefill_context / prefill_tokens: prompt (or recompute) chunks: tokens already
    in K/V (cached or computed) and tokens computed now; prefill_end: K/V tokens after the step.

    One is built per general step, so it is a plain class with its own __init__ (compiled by
    sim/native, a dataclass's generated __init__ would run as Python), and `decode_context` may be
    given as a gather plus an offset that is added when it is first read (`set_decoders`): the
    simulator's executor reads `decode_kv` only, and numpy's in-place add on a small array costs
    more than the rest of a decode batch's step.
    """

    def __init__(self, now: float, decode_ids: np.ndarray, decode_context: np.ndarray,
                 prefill_ids: list[int] | None = None, prefill_context: list[int] | None = None,
                 prefill_tokens: list[int] | None = None, prefill_end: list[int] | None = None,
                 preempted: list[int] | None = None, swap_out_bytes: int = 0, swap_in_bytes: int = 0,
                 decode_kv: int | None = None) -> None:
        self.now = now
        self.decode_ids = decode_ids
        self._context = decode_context
        self._context_offset = 0  # added to every entry of _context when decode_context is read
        self.prefill_ids: list[int] = [] if prefill_ids is None else prefill_ids
        self.prefill_context: list[int] = [] if prefill_context is None else prefill_context
        self.prefill_tokens: list[int] = [] if prefill_tokens is None else prefill_tokens
        self.prefill_end: list[int] = [] if prefill_end is None else prefill_end
        self.preempted: list[int] = [] if preempted is None else preempted
        self.swap_out_bytes = swap_out_bytes
        self.swap_in_bytes = swap_in_bytes
        self.decode_kv = decode_kv  # sum of decode_context when the scheduler already knows it

    @property
    def decode_context(self) -> np.ndarray:
        if self._context_offset:
            self._context = self._context + self._context_offset
            self._context_offset = 0
        return self._context

    @decode_context.setter
    def decode_context(self, value: np.ndarray) -> None:
        self._context, self._context_offset = value, 0

    def set_decoders(self, ids: np.ndarray, context: np.ndarray, offset: int, kv: int | None) -> None:
        """The decoders of the step: their ids, their K/V tokens as `context` + `offset` (added
        when decode_context is first read) and the sum of those (None: unknown)."""
        self.decode_ids, self._context, self._context_offset, self.decode_kv = ids, context, offset, kv

    def __repr__(self) -> str:
        return (f"StepPlan(now={self.now!r}, decode_ids={self.decode_ids!r}, decode_context={self.decode_context!r}, "
                f"prefill_ids={self.prefill_ids!r}, prefill_context={self.prefill_context!r}, "
                f"prefill_tokens={self.prefill_tokens!r}, prefill_end={self.prefill_end!r}, "
                f"preempted={self.preempted!r}, swap_out_bytes={self.swap_out_bytes!r}, "
                f"swap_in_bytes={self.swap_in_bytes!r}, decode_kv={self.decode_kv!r})")

    @property
    def num_decode_tokens(self) -> int:
        return int(self.decode_ids.size)

    @property
    def num_prefill_tokens(self) -> int:
        return int(sum(self.prefill_tokens))

    @property
    def num_new_tokens(self) -> int:
        return self.num_decode_tokens + self.num_prefill_tokens

    @property
    def batch_size(self) -> int:
        return int(self.decode_ids.size) + len(self.prefill_ids)

    @property
    def is_pure_decode(self) -> bool:
        return not self.prefill_ids and not self.swap_in_bytes and not self.swap_out_bytes

    def step_shape(self, with_pairs: bool = True) -> tuple[int, int, int, int, int, int]:
        """(decode_seqs, decode_kv, prefill_tokens, prefill_kv, prefill_pairs, prefill_seqs) for
        CostModel.step_time (sim/timing/cost_model.py defines them). with_pairs=False: prefill_pairs
        left 0 (for a cost model that reads no pairs: `reads_prefill_pairs`)."""
        kd = int(self.decode_context.sum()) if self.decode_kv is None else self.decode_kv
        ctx, tokens = self.prefill_context, self.prefill_tokens
        if len(ctx) != len(tokens):
            raise ValueError(f"step plan: {len(ctx)} prefill contexts but {len(tokens)} prefill token counts")
        kp = pairs = p = 0
        for i in range(len(ctx)):  # indexed: compiled, zip(.., strict=True) and sum() are calls through Python
            s, q = ctx[i], tokens[i]
            kp += s
            p += q
            if with_pairs:
                pairs += q * s + q * (q + 1) // 2
        return int(self.decode_ids.size), kd, p, kp, pairs, len(self.prefill_ids)

    def cost_args(self) -> tuple[int, int, int]:
        """(new_tokens, kv_read_tokens, attn_pairs) for CostModel.step_time."""
        kv = int(self.decode_context.sum()) if self.decode_kv is None else self.decode_kv
        pairs = kv
        for s, q in zip(self.prefill_context, self.prefill_tokens, strict=True):
            kv += s
            pairs += q * s + q * (q + 1) // 2
        return self.num_new_tokens, kv, pairs


# --- the decode fast path (sim/core/decode_run.py says when a run may be taken and what it books)
class SkipAhead(Protocol):
    """What the engine needs from a scheduler to take decode runs (Scheduler, StaticBatchScheduler)."""

    @property
    def num_running(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...

    def decode_run_limit(self) -> int: ...

    def decode_context_tokens(self) -> int: ...

    def advance_decode(self, k: int, t_end: float) -> list[int]: ...


# What the fast path asks of allocators that give blocks back while requests run (sliding or
# chunked groups, sim/core/kv/hybrid.py): blocks_to_grow is the peak over the steps, exactly for
# up to this many (steps x requests); longer runs are grown in pieces of at most this size.
PEAK_GRID_LIMIT = 1 << 20

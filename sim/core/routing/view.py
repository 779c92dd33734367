"""What a router sees: the request, and each candidate replica through a small read-only view.

Clock-free and engine-free: the fleet (sim/fleet/live_view.py) implements `ReplicaView` over live
replicas, a test over plain numbers. Views are asked lazily (methods, not fields) because the
precise prefix lookup costs a hash-chain walk per replica and most routers never ask for it.

A replica's state is the state a router of a real fleet would read at the request's arrival:
requests routed there and not yet running (`waiting`), running ones, KV blocks in use (the step in
progress included), and how many of this prompt's leading tokens its prefix cache holds now.
`cached_prompt_tokens` is the GPU tier's hit; `tier_hit_tokens` the lower KV tiers' hits from where
it ends (sim/core/tiers/stack.py TierStack.lookup), which kv-precise counts cheaper than recompute
and dearer than a GPU hit (each tier kind's `hit_cost`, sim/core/tiers/kinds.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(init=False, slots=True, unsafe_hash=True)  # __init__ written out: compiled (a frozen dataclass's
class RoutedRequest:                                  # generated one runs as Python: ~7k instructions an arrival)
    """One arriving request as a router sees it. A value: nothing changes one after it is built."""

    id: int
    arrival_s: float
    prompt_tokens: int
    prefix_hashes: Sequence[int] | None  # the trace's prompt block hashes (None: none)
    session: str | None  # a conversation id when the trace has one

    def __init__(self, id: int, arrival_s: float, prompt_tokens: int, prefix_hashes: Sequence[int] | None,
                 session: str | None) -> None:
        self.id, self.arrival_s, self.prompt_tokens = id, arrival_s, prompt_tokens
        self.prefix_hashes, self.session = prefix_hashes, session


class ReplicaView(Protocol):
    """One candidate replica's live state (read-only)."""

    index: int
    num_blocks: int  # KV blocks in its pool
    block_size: int  # tokens per block

    def waiting(self) -> int:
        """Requests routed here that are not running yet (queued, or arrived but not yet admitted)."""
        ...

    def running(self) -> int:
        """Requests in its running batch (loading remote KV included)."""
        ...

    def used_blocks(self) -> int:
        """KV blocks held by requests now (cached-but-free blocks excluded)."""
        ...

    def pending_prefill_tokens(self) -> int:
        """Prompt tokens still to compute of the requests routed here that have no first token yet
        (queued or part-way through a chunked prefill): its prefill backlog."""
        ...

    def cached_prompt_tokens(self, req: RoutedRequest) -> int:
        """Leading prompt tokens of `req` its GPU prefix cache holds now (0 without prefix caching)."""
        ...

    def tier_hit_tokens(self, req: RoutedRequest) -> dict[str, int]:
        """Leading prompt tokens of `req` found in lower KV tiers, by tier name ({}: no tiers)."""
        ...

    def prefilling(self) -> Sequence[int]:
        """Ids of the requests routed here that have no first token yet (a router's book of
        prefill work drops the others: sim/core/routing/prefill_book.py). The same object is only
        ever appended to; when requests leave it, a new one is returned (the book sums on)."""
        ...

    def held_prompt_blocks(self, req: RoutedRequest) -> int:
        """Leading full blocks of `req`'s prompt that its requests hold now (cached and in use, so
        routing it here adds no block for them: Dynamo's active-block dedup)."""
        ...


def outstanding(view: ReplicaView) -> int:
    """Requests routed to a replica and not finished: what 'least outstanding requests' balances."""
    return view.waiting() + view.running()


def prompt_blocks(req: RoutedRequest, block_size: int) -> int:
    return -(-req.prompt_tokens // block_size)

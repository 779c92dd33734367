"""A KV-aware router's own book of the prefill work it sent to each replica, as NVIDIA Dynamo keeps
it (lib/llm/src/kv_router/sequence.rs, ActiveSequences: `add_request` books new_tokens(isl, overlap)
= the prompt tokens the replica lacked at routing, `mark_prefill_completed` drops them at the first
token). A replica's booked backlog is the sum over its requests still without a first token; the
view says which those are (`ReplicaView.prefilling`), so a request that got its first token, or
left, falls out of the book at the next look.
"""

from __future__ import annotations

from sim.core.routing.view import ReplicaView


class PrefillBook:
    """Per replica: request id -> prompt tokens it had to compute there when it was routed."""

    def __init__(self) -> None:
        self._by_replica: dict[int, dict[int, float]] = {}

    def add(self, replica: int, request: int, tokens: float) -> None:
        self._by_replica.setdefault(replica, {})[request] = tokens

    def backlog(self, v: ReplicaView) -> float:
        """Booked prompt tokens of the replica's requests that have no first token yet."""
        book = self._by_replica.get(v.index)
        if not book:
            return 0.0
        kept = {r: book[r] for r in v.prefilling() if r in book}
        self._by_replica[v.index] = kept
        return sum(kept.values())

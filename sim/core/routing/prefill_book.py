"""A KV-aware router's own book of the prefill work it sent to each replica, as NVIDIA Dynamo keeps
it (lib/llm/src/kv_router/sequence.rs, ActiveSequences: `add_request` books new_tokens(isl, overlap)
= the prompt tokens the replica lacked at routing, `mark_prefill_completed` drops them at the first
token). A replica's booked backlog is the sum over its requests still without a first token; the
view says which those are (`ReplicaView.prefilling`), so a request that got its first token, or
left, falls out of the book at the next look.

The sum is kept between looks: while the view's list is the same object it has only grown at its
end (the protocol's contract), so the new requests are added on in the list's order, the same
additions as summing the whole list again. An overloaded replica holds thousands of queued
requests, and the router looks at every replica at every arrival: summing them all each time was
most of a KV-aware fleet run's CPU time (docs/PERFORMANCE.md, "The dashboard's fleet runs").
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.core.routing.view import ReplicaView


class PrefillBook:
    """Per replica: request id -> prompt tokens it had to compute there when it was routed."""

    def __init__(self) -> None:
        self._by_replica: dict[int, dict[int, float]] = {}
        self._summed: dict[int, tuple[Sequence[int], int, float]] = {}  # (view's list, how many summed, sum)

    def add(self, replica: int, request: int, tokens: float) -> None:
        self._by_replica.setdefault(replica, {})[request] = tokens

    def backlog(self, v: ReplicaView) -> float:
        """Booked prompt tokens of the replica's requests that have no first token yet."""
        book = self._by_replica.get(v.index)
        if not book:
            return 0.0
        ids = v.prefilling()
        last = self._summed.get(v.index)
        if last is not None and last[0] is ids:  # the same list, grown at its end since
            total = last[2]
            for r in ids[last[1]:]:
                if r in book:
                    total += book[r]
        else:  # a new list: some requests left it
            kept = {r: book[r] for r in ids if r in book}
            self._by_replica[v.index] = kept
            total = sum(kept.values())
        self._summed[v.index] = (ids, len(ids), total)
        return total

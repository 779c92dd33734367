"""The routing policies. Each says in its docstring where it comes from; registry.py lists them.

A router is built for a fleet of n replicas and asked `choose(req, views)` once per arriving
request, in arrival order, at its arrival time; it returns the index of the replica that serves it.
`state_free` routers decide from the request and their own past choices only (never a view), so the
fleet may assign every request before the clock starts (the trace pre-split of sim/run/engine.py);
the others read the views, which the fleet computes at the arrival time.
Ties always go to the lowest index, so every router is deterministic for a given seed.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
from mypy_extensions import mypyc_attr

from sim.core.routing.prefill_book import PrefillBook
from sim.core.routing.view import ReplicaView, RoutedRequest, outstanding
from sim.core.tiers.kinds import TIERS


@dataclass(frozen=True)
class RouterParams:
    """What every router may be built from."""

    replicas: int
    seed: int = 0
    kv_weight: float = 1.0  # KV-aware: weight of one uncached prompt block against one block of load


class Router(Protocol):
    state_free: bool  # a ClassVar in each router: the registry reads it from the class (compiled by
    # mypyc, a plain class attribute would be an instance attribute's default, absent from the class)

    def choose(self, req: RoutedRequest, views: Sequence[ReplicaView]) -> int: ...


class RoundRobin:
    """Replica i mod n for the i-th request (vLLM's and Dynamo's default; today's --replicas split)."""

    state_free: ClassVar[bool] = True

    def __init__(self, p: RouterParams) -> None:
        self.n, self.next = p.replicas, 0

    def choose(self, req: RoutedRequest, views: Sequence[ReplicaView]) -> int:
        i = self.next
        self.next = (i + 1) % self.n
        return i


class Random:
    """A uniform draw per request (seeded numpy generator: Dynamo's `--router-mode random`)."""

    state_free: ClassVar[bool] = True

    def __init__(self, p: RouterParams) -> None:
        self.n, self.rng = p.replicas, np.random.default_rng(p.seed)

    def choose(self, req: RoutedRequest, views: Sequence[ReplicaView]) -> int:
        return int(self.rng.integers(self.n))


class SessionAffinity:
    """Same key, same replica: the conversation id when the trace has one, else the first prompt
    block's hash; the key's CRC32 (strings) or value (integers) mod n. Requests without a key go
    round-robin. Sticky-session routing as in llm-d's session-affinity scorer and the vLLM
    production-stack router's session routing; it ignores load entirely."""

    state_free: ClassVar[bool] = True

    def __init__(self, p: RouterParams) -> None:
        self.n, self.fallback = p.replicas, RoundRobin(p)

    def choose(self, req: RoutedRequest, views: Sequence[ReplicaView]) -> int:
        if req.session:
            return zlib.crc32(req.session.encode()) % self.n
        if req.prefix_hashes is not None and len(req.prefix_hashes):
            return int(req.prefix_hashes[0]) % self.n
        return self.fallback.choose(req, views)


class LeastOutstanding:
    """Fewest requests routed and not finished (waiting + running): Envoy's LEAST_REQUEST and
    llm-d's queue scorer, without their randomisation."""

    state_free: ClassVar[bool] = False

    def __init__(self, p: RouterParams) -> None:
        pass

    def choose(self, req: RoutedRequest, views: Sequence[ReplicaView]) -> int:
        return min(views, key=lambda v: (outstanding(v), v.index)).index


class LeastKVLoad:
    """Lowest KV load: blocks in use plus the blocks its prefill backlog will take, as a share of
    the pool (llm-d's kv-cache-utilization scorer; vLLM's production-stack KV-usage routing)."""

    state_free: ClassVar[bool] = False

    def __init__(self, p: RouterParams) -> None:
        pass

    def choose(self, req: RoutedRequest, views: Sequence[ReplicaView]) -> int:
        return min(views, key=lambda v: (kv_load_blocks(v) / v.num_blocks, outstanding(v), v.index)).index


class PowerOfTwo:
    """Two distinct replicas drawn at random, the one with fewer outstanding requests wins (ties:
    the first drawn). Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing" (2001)."""

    state_free: ClassVar[bool] = False

    def __init__(self, p: RouterParams) -> None:
        self.n, self.rng = p.replicas, np.random.default_rng(p.seed)

    def choose(self, req: RoutedRequest, views: Sequence[ReplicaView]) -> int:
        if self.n == 1:
            return 0
        a, b = (int(x) for x in self.rng.choice(self.n, size=2, replace=False))
        return b if outstanding(views[b]) < outstanding(views[a]) else a


@mypyc_attr(allow_interpreted_subclasses=True)  # routers registered from outside may build on it
class KVAwarePrecise:
    """Lowest cost = w x prefill blocks + decode blocks, NVIDIA Dynamo's KV router cost in its units
    (lib/llm/src/kv_router/scheduler.rs: logit = overlap_score_weight x potential_prefill_block +
    decode_block; w is `--kv-overlap-score-weight`, default 1). Prefill blocks: the prompt tokens this
    replica would compute for the request (those its prefix cache lacks) plus the prefill tokens
    booked to it and not yet done (the router's own book, as Dynamo's: each request's uncached tokens
    at routing, dropped at its first token), over the block size (a fraction, as Dynamo's). Decode
    blocks: Dynamo's potential active blocks, the blocks the replica's outstanding requests hold (in
    use now plus what its backlog will take) plus this prompt's full blocks that no request there
    holds (its `new_blocks`: blocks shared with a running request are counted once). The cache is
    read from the replica's real prefix cache at arrival, evictions included (Dynamo's KV events;
    llm-d's precise prefix-cache scorer). A block found in a lower KV tier counts as its TIERS
    entry's hit_cost of a recomputed block."""

    state_free: ClassVar[bool] = False
    uses_kv_weight: ClassVar[bool] = True  # w: the registry entry's kv_weighted, the forms' "KV-aware weight w"

    def __init__(self, p: RouterParams) -> None:
        self.w = p.kv_weight
        self.book = PrefillBook()
        self._uncached: dict[int, float] = {}  # this request's prefill blocks per replica (choose)

    def uncached_blocks(self, req: RoutedRequest, v: ReplicaView) -> float:
        """Prompt blocks to compute on this replica, a lower-tier hit counting its tier's hit_cost of one."""
        missing = req.prompt_tokens - v.cached_prompt_tokens(req)
        lower = v.tier_hit_tokens(req)
        if not lower:
            return missing / v.block_size
        missing -= sum(lower.values())
        tiers = 0.0  # sum()'s additions in its order, typed float for the compiled code (sim/native)
        for n, t in lower.items():
            tiers += TIERS.lookup(n).hit_cost * t
        return (missing + tiers) / v.block_size

    def decode_blocks(self, req: RoutedRequest, v: ReplicaView) -> int:
        """Blocks its outstanding requests hold or will hold, with this prompt's (Dynamo's
        potential active blocks: active_blocks + new_blocks)."""
        new = req.prompt_tokens // v.block_size - v.held_prompt_blocks(req)
        return v.used_blocks() + -(-v.pending_prefill_tokens() // v.block_size) + new

    def cost(self, req: RoutedRequest, v: ReplicaView) -> float:
        uncached = self._uncached[v.index] = self.uncached_blocks(req, v)
        prefill = uncached + self.book.backlog(v) / v.block_size
        return self.w * prefill + self.decode_blocks(req, v)

    def choose(self, req: RoutedRequest, views: Sequence[ReplicaView]) -> int:
        """min over (cost, index) without a key function and a tuple per replica (asked for every
        replica at every arrival)."""
        cost = self.cost
        best, best_cost = views[0], cost(req, views[0])
        for v in views[1:]:
            c = cost(req, v)
            if c < best_cost or (c == best_cost and v.index < best.index):
                best, best_cost = v, c
        self.book.add(best.index, req.id, self._uncached[best.index] * best.block_size)
        return best.index


class KVAwareApprox(KVAwarePrecise):
    """KV-aware with the router's own index of what it sent where (no view of the caches): per
    replica an LRU of prompt-block chain keys, as many as its pool holds; a request's leading keys
    found there count as cached. Dynamo's ApproxKvIndexer (`--no-kv-events`, it expires entries
    after 120 s instead) and llm-d's approximate prefix-cache scorer (an LRU per pod)."""

    def __init__(self, p: RouterParams) -> None:
        super().__init__(p)
        self.index: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(p.replicas)]
        self._keys: list[int] = []

    def choose(self, req: RoutedRequest, views: Sequence[ReplicaView]) -> int:
        self._keys = chain_keys(req.prefix_hashes)
        i = super().choose(req, views)
        self._remember(i, views[i], req)
        return i

    def uncached_blocks(self, req: RoutedRequest, v: ReplicaView) -> float:
        return (req.prompt_tokens - self._cached_tokens(v.index, req)) / v.block_size

    def _cached_tokens(self, i: int, req: RoutedRequest) -> int:
        seen, matched = self.index[i], 0
        for key in self._keys:
            if key not in seen:
                break
            matched += 1
        if not matched:
            return 0
        per_block = req.prompt_tokens / len(self._keys)  # the trace's prefix block size
        return min(req.prompt_tokens - 1, int(matched * per_block))

    def _remember(self, i: int, v: ReplicaView, req: RoutedRequest) -> None:
        if not self._keys:
            return
        seen = self.index[i]
        for key in self._keys:
            seen[key] = None
            seen.move_to_end(key)
        per_block = max(1, req.prompt_tokens // len(self._keys))
        capacity = max(1, v.num_blocks * v.block_size // per_block)
        while len(seen) > capacity:
            seen.popitem(last=False)


def kv_load_blocks(v: ReplicaView) -> int:
    """Blocks in use plus the blocks its prefill backlog will need."""
    return v.used_blocks() + -(-v.pending_prefill_tokens() // v.block_size)


def chain_keys(hashes: Sequence[int] | None) -> list[int]:
    """One key per prompt block that depends on every block before it (a block matches only with
    its whole prefix, as in a prefix cache)."""
    if hashes is None:
        return []
    out, prev = [], 0
    for h in hashes:
        prev = hash((prev, int(h)))
        out.append(prev)
    return out

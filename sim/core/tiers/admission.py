"""Admission through the KV tiers: the scheduler's one question to them, and the load it starts.

At a waiting request's admission the scheduler has its GPU prefix-cache hit; the lower tiers are
looked up from where that hit ends (sim/core/tiers/stack.py). If they hold more of the prompt, the
request takes vLLM's remote-KV path (sim/core/remote_kv.py, WAITING_FOR_REMOTE_KVS): blocks for
the GPU hit plus the lower-tier hit are reserved now, the load starts now over the tiers' links,
and the request joins the running batch at the first step from the load's end, with those tokens
counted as computed; the rest of its prompt is then prefilled as usual. That is vLLM's
OffloadingConnector flow: get_num_new_matched_tokens -> allocate -> async load -> schedulable.

One simplification, said here: the reserved blocks get their prefix keys at the reservation, so a
request arriving during the load may share them before the bytes have landed (vLLM caches them
when the load completes). Loads last milliseconds; requests with the same prefix that close are rare.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from sim.core.request import LOADING, RequestTable
from sim.core.step_types import Retention
from sim.core.tiers.grouped import GroupedTierStack, GroupHits
from sim.core.tiers.stack import TierHits, TierStack

if TYPE_CHECKING:
    from collections import deque

    from sim.core.interfaces import Allocator
    from sim.core.remote_kv import RemoteKV


class _Admission(Protocol):
    @property
    def admit_whole_prompt(self) -> bool: ...


class TierHost(Protocol):
    """The scheduler state tier admission reads and books (sim.core.scheduler.Scheduler), named
    here so that this module needs no import of the scheduler, which imports it."""

    prefix_queries: int
    prefix_hits: int

    @property
    def t(self) -> RequestTable: ...

    @property
    def alloc(self) -> Allocator: ...

    @property
    def cfg(self) -> _Admission: ...

    @property
    def tiers(self) -> TierStack | None: ...

    @property
    def remote(self) -> RemoteKV: ...

    @property
    def waiting(self) -> deque[int]: ...

    def retention(self, r: int, hashes: Sequence[int] | None) -> Retention | None: ...


def lower_hits(sched: TierHost, r: int, hashes: Sequence[int]) -> tuple[int, TierHits | GroupHits] | None:
    """(GPU hit tokens, lower-tier hits) for waiting request r, or None when no lower tier adds any."""
    stack, alloc, t = sched.tiers, sched.alloc, sched.t
    assert stack is not None
    total = int(t.prompt[r] + t.generated[r])
    if isinstance(stack, GroupedTierStack):  # a pool with several KV groups (sim/core/tiers/grouped.py)
        found = stack.lookup_groups(alloc, total, hashes)  # type: ignore[arg-type]  # the per-group pool (checked at build)
        return None if found is None else (found.gpu_end * alloc.block_size, found)
    gpu_tokens = alloc.prefix_hit_tokens(total, hashes)
    keys = alloc.cache.chain_keys(hashes)  # type: ignore[attr-defined]  # the paged allocator (checked at build)
    bs = alloc.block_size
    hits = stack.lookup(keys, gpu_tokens // bs, (total - 1) // bs)
    return (gpu_tokens, hits) if hits.total_blocks else None


def admit_loading(sched: TierHost, r: int, hashes: Sequence[int], gpu_tokens: int, hits: TierHits | GroupHits,
                  now: float) -> bool:
    """Reserve r's blocks for its GPU and lower-tier hits and start the load (False: they do not fit
    now; the queue waits, as for any head request)."""
    t, alloc, stack = sched.t, sched.alloc, sched.tiers
    assert stack is not None
    total = int(t.prompt[r] + t.generated[r])
    hold = gpu_tokens + hits.total_blocks * alloc.block_size
    # the loaded tokens count as computed: a per-group pool takes no blocks for what its windows skip;
    # with admit_whole_prompt the whole sequence (capped per group) and the loaded part must fit
    whole = sched.cfg.admit_whole_prompt
    retention = sched.retention(r, hashes)  # a sparsely keyed sliding or state group
    if not alloc.can_allocate(total if whole else hold, int(t.reserve[r]), hashes, computed_tokens=hold,
                              chunk_tokens=hold if whole else None):
        return False
    stack.now = now
    ready = stack.load(hits, r, count_hits=not t.preemptions[r])  # type: ignore[arg-type]  # before the allocation: an exclusive tier gives its blocks up first
    stack.muted = True  # the loaded blocks came from the tiers: load() touched or moved them there
    try:
        hit = alloc.allocate(r, hold, t.final_tokens(r), int(t.reserve[r]), hashes, retention=retention,
                             computed_tokens=hold)
    finally:
        stack.muted = False
    sched.waiting.popleft()
    if not t.preemptions[r]:
        sched.prefix_queries += total
        sched.prefix_hits += hit
    if hit:
        t.prefix_hit[r] += hit
    if t.admitted_s[r] != t.admitted_s[r]:  # NaN: first admission
        t.admitted_s[r] = now
    t.status[r] = LOADING
    heapq.heappush(sched.remote.loading, (max(ready, now), r, hold))
    return True

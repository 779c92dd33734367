"""KV that arrives from elsewhere: blocks reserved first, the request held until its KV is ready.

One mechanism for every source of KV that is not this replica's own compute: a prefill replica's
handoff in disaggregated serving (sim/fleet/), a lower KV tier's load (CPU DRAM, NVMe, a remote
store). It follows vLLM's KV connector flow (vllm/v1/core/sched/scheduler.py with the NIXL
connector): the scheduler asks the connector how many leading tokens are available remotely
(`get_num_new_matched_tokens`), allocates blocks for them, starts the load and parks the request
in WAITING_FOR_REMOTE_KVS; only when the connector reports the receive finished does the request
become schedulable, with those tokens counted as computed. When every known token came from
elsewhere, the last one is recomputed so that a token can be sampled (vLLM: "num_computed_tokens
== num_tokens: -1"); here its slot is not reserved at the hold, the recompute step appends it.

The receiving replica's own prefix cache is asked first, as vLLM's scheduler does (get_computed_blocks
before the connector's get_num_new_matched_tokens(request, num_local_computed_tokens)): its local hit
is shared, and only the rest comes from elsewhere (NixlConnector: "Partial prefix cache hit: just
read uncomputed blocks", the blocks allocated without a hash). `source(r, tokens, now)` is told the
tokens that move, and the reserved blocks get their prefix keys, so later requests hit them here.

On the sending side vLLM's `request_finished` returns delay_free_blocks: the prefill replica keeps
a finished request's blocks until the send completes. `hold` / `release_at` are that.

Clock-free: `source(r, tokens, now)` (set by the caller) starts the load when the blocks are
reserved and returns when it completes; the scheduler applies what is due at each step's start
(`apply_due`) and says when the next thing is due (`next_event_s`), so an engine never takes a
step across it (decode runs are cut there, an idle engine wakes there).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sim.core.request import LOADING, RUNNING, RequestTable

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Collection, Sequence

    from sim.core.interfaces import Allocator
    from sim.core.step_types import Retention

KVSource = Callable[[int, int, float], float]  # (request, tokens, now) -> when its KV is ready


@dataclass
class RemoteKV:
    """The books of one scheduler's remote KV: who expects it, who is loading, who is held."""

    expected: dict[int, int] = field(default_factory=dict)  # request -> leading tokens from elsewhere
    loading: list[tuple[float, int, int]] = field(default_factory=list)  # heap (ready time, request, tokens held)
    releases: list[tuple[float, int]] = field(default_factory=list)  # heap (release time, request)
    held: set[int] = field(default_factory=set)  # finished requests still holding their blocks
    source: KVSource | None = None  # None: the KV is ready the moment the blocks are reserved
    loads: int = 0
    loaded_tokens: int = 0  # tokens that came from elsewhere
    local_hit_tokens: int = 0  # tokens of remote requests found in this replica's own prefix cache
    blocked: set[int] = field(default_factory=set)  # requests whose blocks did not fit at their first try

    @property
    def pending(self) -> bool:
        """Something is due at a known time (a load completing, a release)."""
        return bool(self.loading or self.releases)

    def expect(self, r: int, tokens: int) -> None:
        if tokens < 0:
            raise ValueError(f"request {r}: remote tokens must be >= 0, got {tokens}")
        self.expected[r] = tokens

    def hold(self, r: int) -> None:
        self.held.add(r)

    def release_at(self, r: int, t: float) -> None:
        if r not in self.held:
            raise ValueError(f"request {r} holds no finished KV to release")
        heapq.heappush(self.releases, (t, r))

    def next_event_s(self) -> float | None:
        """The earliest load completion or release (None: none). Asked at every step of a fleet's
        engines, where both heaps are nearly always empty: no list is built for that."""
        loading, releases = self.loading, self.releases
        if not loading:
            return releases[0][0] if releases else None
        if not releases:
            return loading[0][0]
        return min(loading[0][0], releases[0][0])


class _SeqLimit(Protocol):
    @property
    def max_num_seqs(self) -> int: ...


class RemoteHost(Protocol):
    """The scheduler state this module reads and books (sim.core.scheduler.Scheduler), named here
    so that it needs no import of the scheduler, which imports it."""

    @property
    def t(self) -> RequestTable: ...

    @property
    def alloc(self) -> Allocator: ...

    @property
    def cfg(self) -> _SeqLimit: ...

    @property
    def remote(self) -> RemoteKV: ...

    @property
    def prefix_hashes(self) -> Callable[[int], Sequence[int] | None]: ...

    @property
    def running(self) -> Collection[int]: ...

    @property
    def waiting(self) -> deque[int]: ...

    prefix_queries: int  # prompt tokens looked up in the prefix cache, and of them found (vLLM's counters)
    prefix_hits: int

    def _start_running(self, r: int) -> None: ...

    def retention(self, r: int, hashes: Sequence[int] | None) -> Retention | None: ...


def held_tokens(sched: RemoteHost, r: int, tokens: int) -> int:
    """Token states reserved and counted as computed: all remote ones, less the last known token
    when every known token is remote (it is recomputed to sample the next)."""
    t = sched.t
    return min(tokens, int(t.prompt[r] + t.generated[r]) - 1)


def head_fits(sched: RemoteHost, r: int) -> bool:
    """Could the remote request at the head be given its blocks now? Blocks for all its known
    tokens must be free (vLLM reserves the whole prompt for a remote prefill; a window or chunk
    group up to its admission cap), less what a window or chunk group skips of the loaded tokens
    (vLLM's null blocks: the window is all that moves), and the loaded tokens' own blocks too."""
    t = sched.t
    loaded = held_tokens(sched, r, sched.remote.expected[r])
    return sched.alloc.can_allocate(int(t.prompt[r] + t.generated[r]), int(t.reserve[r]), sched.prefix_hashes(r),
                                    computed_tokens=loaded, chunk_tokens=loaded)


def reserve_head(sched: RemoteHost, r: int, now: float) -> bool:
    """Reserve the head's blocks and start its load (False: it does not fit; the queue waits)."""
    if not head_fits(sched, r):
        sched.remote.blocked.add(r)
        return False
    t, books = sched.t, sched.remote
    known = books.expected.pop(r)
    hold = held_tokens(sched, r, known)
    sched.waiting.popleft()
    hashes = sched.prefix_hashes(r)
    local = sched.alloc.allocate(r, hold, t.final_tokens(r), int(t.reserve[r]), hashes, computed_tokens=hold,
                                 retention=sched.retention(r, hashes))  # keyed as vLLM's cache_blocks would
    tokens = known - local  # what the local prefix cache lacks moves (the hit is whole blocks < hold)
    if hashes is not None:  # vLLM's PrefixCacheStats: the decode side asks its own cache first (the whole request)
        sched.prefix_queries += int(t.prompt[r] + t.generated[r])
        sched.prefix_hits += local
    if t.admitted_s[r] != t.admitted_s[r]:  # NaN: first admission
        t.admitted_s[r] = now
    t.status[r] = LOADING
    ready = books.source(r, tokens, now) if books.source is not None else now
    heapq.heappush(books.loading, (max(ready, now), r, hold))
    books.loads += 1
    books.loaded_tokens += tokens
    books.local_hit_tokens += local
    return True


def apply_due(sched: RemoteHost, now: float) -> None:
    """At a step starting at `now`: free the held requests whose release time has come, and let
    loaded requests join the running batch (oldest ready first, while max_num_seqs allows)."""
    books, t = sched.remote, sched.t
    while books.releases and books.releases[0][0] <= now:
        _, r = heapq.heappop(books.releases)
        books.held.discard(r)
        sched.alloc.free(r)
    while books.loading and books.loading[0][0] <= now and len(sched.running) < sched.cfg.max_num_seqs:
        _, r, hold = heapq.heappop(books.loading)
        t.computed[r] = hold
        t.status[r] = RUNNING
        sched._start_running(r)

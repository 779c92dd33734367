"""A decode run's peak pages over its steps, from each request's block events (no steps x requests grid).

sim/core/kv/hybrid.py `blocks_to_grow` asks: while every request decodes one token a step from n
to its new length N, what is the most pages the batch holds at once, against now? Over the steps
j = 1, 2, ... a group's held blocks move only at a few steps per request: it takes a block when
the token n + j opens one past `end` (every block_size steps), and a sliding or chunked group drops
its leading blocks when the step's computed tokens (n + j - 1) pass the manager's
`first_drop_computed`. So the per-step total is the running sum of those events, one list of
k + 1 ints, and the peak its largest prefix sum: a request costs a handful of Python int
operations instead of the grid's ~25 numpy calls per group (the grid stays for state groups).

It is the grid's answer exactly: taken blocks max(end, blocks_for(n + j)) - end, dropped blocks
max(first, skipped_blocks(n + j - 1)) - first (the grid's cap at end + taken never binds for these
kinds: a step's skipped blocks never pass the blocks its tokens fill), both flat once the request
reaches N; tests/test_run_peak.py checks the two against each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from sim.core.kv.group_managers import (
    ChunkedLocalAttentionManager,
    FullAttentionManager,
    GroupManager,
    SlidingWindowManager,
)

EVENT_KINDS = (GroupManager, FullAttentionManager, SlidingWindowManager, ChunkedLocalAttentionManager)


def handles(managers: Sequence[GroupManager]) -> bool:
    """Whether every group is one whose held blocks are the run [first, end) (no state groups)."""
    return all(type(m) in EVENT_KINDS for m in managers)


def peak_pages(managers: Sequence[GroupManager], n: list[int], new: list[int],
               firsts: Sequence[list[int]], ends: Sequence[list[int]], k: int) -> int:
    """Most pages over steps 1 .. k (k = the longest request's steps) above what the requests hold
    now (0 if never above): n, new per request; firsts, ends per group, per request."""
    diff = [0] * (k + 1)  # diff[j]: pages taken minus pages dropped at step j
    _check_lengths(len(managers), len(n), new, firsts, ends)
    for g in range(len(managers)):  # indexed (compiled, zip(.., strict=True) is a call through Python)
        m, first, end = managers[g], firsts[g], ends[g]
        bs, pages, drops = m.block_size, m.pages, m.first_drop_computed(0) is not None
        window = m.window if type(m) is SlidingWindowManager else 0
        for i in range(len(n)):
            n0, n1, f0, e0 = n[i], new[i], first[i], end[i]
            if n1 <= n0:  # no step: nothing taken, nothing dropped
                continue
            steps = n1 - n0
            for j in range(max(e0 * bs + 1 - n0, 1), steps + 1, bs):  # token n0 + j opens a block past end
                diff[j] += pages
            if window:  # a sliding window: one block a block_size steps after a catch-up at step 1
                j0 = (f0 + 1) * bs + window - n0  # the step whose computed tokens drop block f0
                if j0 < 1:
                    cur = max(f0, (n0 - window + 1) // bs)  # skipped_blocks(n0) > f0
                    diff[1] -= pages * (cur - f0)
                    j0 = (cur + 1) * bs + window - n0
                for j in range(j0, steps + 1, bs):
                    diff[j] -= pages
            elif drops:
                _chunk_drops(m, diff, n0, n1, f0)
    return max(0, max(accumulate(diff)))


def _check_lengths(groups: int, requests: int, new: list[int], firsts: Sequence[list[int]],
                   ends: Sequence[list[int]]) -> None:
    """What zip(.., strict=True) would check: one list per group, one entry per request."""
    if len(new) != requests or len(firsts) != groups or len(ends) != groups:
        raise ValueError("run peak: one first and end list per group, one entry per request")
    for g in range(groups):
        if len(firsts[g]) != requests or len(ends[g]) != requests:
            raise ValueError("run peak: one first and end list per group, one entry per request")


def _chunk_drops(m: GroupManager, diff: list[int], n0: int, n1: int, f0: int) -> None:
    """A dropping group's events by its manager's own rules (chunked local attention)."""
    pages, cur, c = m.pages, f0, m.first_drop_computed(f0)
    while c < n1:  # the last step starts at n1 - 1 computed tokens
        c = max(c, n0)  # the first step starts at n0
        nxt = max(cur, m.skipped_blocks(c))
        if nxt == cur:
            raise AssertionError(f"run peak: group {m.label} drops nothing at its first_drop_computed {c}")
        diff[c - n0 + 1] -= pages * (nxt - cur)
        cur, c = nxt, m.first_drop_computed(nxt)

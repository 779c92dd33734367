"""Clock-free continuous batching, like vLLM v1's scheduler.

The scheduler is told the time, never keeps one: `schedule(now)` says what runs in the next step
(and books the KV for it in the allocator), `complete_step(plan, t_end)` applies the step's
outcome. The simulator calls these with a SimPy clock, the GPU backend with a wall clock.

Each step (vLLM v1 order):
1. running requests, oldest admission first, get their next tokens (1 for a decode, a chunk for a
   prefill still in progress) within the `max_batched_tokens` budget. When the allocator cannot
   grow one, the most recently admitted running request is preempted (recompute: free, requeue at
   the head of the waiting queue; swap: copy its KV to host memory, bounded by `swap_space_bytes`,
   charged at the host-link bandwidth; only requests past their prompt are swapped, one still in
   chunked prefill is recomputed) until it fits or the request itself was the victim;
2. if nothing was preempted: swapped-out requests come back first, then waiting requests in FCFS
   order while `max_num_seqs`, the token budget and the allocator allow. The head blocks the queue
   (no skipping). Without chunked prefill a prompt is scheduled whole or not at all. With
   `admit_whole_prompt` (vLLM's scheduler_reserve_full_isl) a request is admitted only when blocks
   for its whole prompt (+ generated tokens) are free, though only the first chunk is allocated
   (a sliding-window or chunked group counts at most vLLM's per-request admission cap, and the
   first chunk must fit on its own too: `Allocator.can_allocate`'s chunk_tokens).

A pool with a linear-attention state group in vLLM's align mode (prefix caching on; the pool's
`state_align_block` is its block size) has its prefill chunks cut as vLLM's
`_mamba_block_aligned_split` cuts them (sim/core/kv/mamba_align.py `aligned_chunk`): to a block
boundary, never past the last cacheable boundary, stopping at the request's shared-prefix
junction; a chunk cut to nothing waits for the next step. Once a step is scheduled the pool hears
it (`end_step`): the states cached in that step become hits for the next (vLLM's
`cached_blocks_this_step`; sim/core/kv/hybrid_state.py).

Prefix-cache hit tokens (from the allocator) are not computed; the budget is charged for the
tokens computed only. If a whole prompt is cached, its last token is still computed (a token must
be sampled), as vLLM does.

The engine's fast path over runs of pure-decode steps (`decode_run_limit` / `advance_decode`)
is sim/core/decode_run.py: its contract says when a run may be taken in one go and what it books,
so that it gives exactly what as many `schedule` + `complete_step` calls would (tests prove it).
That module's `DecodeBatch` is also how this scheduler keeps its all-decoding batch across steps.

KV that arrives from elsewhere (a prefill replica's handoff, a lower KV tier's load) is one
mechanism, vLLM's WAITING_FOR_REMOTE_KVS (sim/core/remote_kv.py): `add_remote_request(r, tokens)`
queues r FCFS like any request; when it reaches the head and its blocks fit, they are reserved for
its `tokens` leading token states, the caller's `kv_source(r, tokens, now)` starts the transfer and
says when the KV is ready; r waits LOADING (not running, no budget) and joins the running batch at
the first step that starts at or after that time. With `hold_kv_on_finish` a finished request keeps
its blocks until the caller's `release_at(r, t)` time (a prefill replica frees on transfer
completion). `next_event_s()` is the earliest such time: the engine must take a step then.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from mypy_extensions import mypyc_attr

from sim.core import decode_run, interfaces, remote_kv
from sim.core.decode_run import DecodeBatch
from sim.core.kv.base import KVAllocator
from sim.core.kv.mamba_align import aligned_chunk
from sim.core.remote_kv import RemoteKV
from sim.core.request import FINISHED, RUNNING, SWAPPED, WAITING, RequestTable, cell_view
from sim.core.step_types import Retention, StepPlan
from sim.core.tiers import admission as tier_admission
from sim.core.tiers.stack import TierStack

_count = np.count_nonzero  # cheap on small batches
_INT64 = np.dtype(np.int64)  # a dtype object: numpy need not convert the type on every call
_NO_IDS = np.zeros(0, dtype=np.int64)  # a plan's empty decode ids and context (replaced, never written)
_NO_IDS.flags.writeable = False
SHORT_TAIL = 4  # running_ids sets up to this many admitted ids one by one, more through a memoryview
EXTERNAL_FRAG_LOOKAHEAD = 16  # waiting requests whose needs define external fragmentation


def _no_hashes(r: int) -> Sequence[int] | None:
    """A scheduler's prefix hashes when none are given: no request has any."""
    return None


@mypyc_attr(native_class=False)  # a plain class when compiled: copy.deepcopy restores frozen fields
@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill: bool = True
    preemption: str = "recompute"  # or "swap"
    swap_space_bytes: int = 4 << 30
    contiguous: bool = False  # admission needs the whole reservation (table.reserve)
    # vLLM V1's `scheduler_reserve_full_isl` (default on since 0.2x): a waiting request is admitted
    # only if blocks for ALL its known tokens (prompt + generated) are free now, even when chunked
    # prefill gives it a first chunk only. False: the first chunk must fit (older vLLM).
    admit_whole_prompt: bool = True
    # A finished request keeps its blocks until `release_at` frees them (a prefill replica whose KV
    # is being sent: vLLM's delay_free_blocks, freed when the connector reports the send done).
    hold_kv_on_finish: bool = False


class Scheduler:
    """Continuous batching over one allocator. Requests are row ids of `table`. It implements
    sim.core.interfaces.Scheduler structurally (a class compiled by sim/native cannot subclass a Protocol).

    API: add_request(r) when a request arrives; schedule(now) -> StepPlan | None (None: nothing to
    run); complete_step(plan, t_end) -> finished ids. has_work / num_running / num_waiting for
    the caller's loop. `prefix_hashes(r)` (optional) gives a request's prefix block hashes.

    The policy, in the order a step applies it (module docstring): the running requests get their
    tokens (`_schedule_running_slow`, preempting the newest with `_preempt` when the pool is full;
    a batch that is all decoding takes one vectorised path), then swapped-out requests come back
    (`_resume_swapped`), then waiting ones are admitted FCFS (`_admit_waiting`); `complete_step`
    writes the step's outcome and frees who finished (`_finish_done`). The simulator's skip-ahead
    (`decode_run_limit` / `advance_decode`) is sim/core/decode_run.py, which asks this policy one
    question: `head_admissible`.
    """

    def __init__(self, table: RequestTable, allocator: KVAllocator, config: SchedulerConfig,
                 prefix_hashes: Callable[[int], Sequence[int] | None] | None = None) -> None:
        self.t = table
        self.alloc = allocator
        self._cfg = config
        self._hold_kv = config.hold_kv_on_finish  # read on every finish: kept natively (the cfg setter)
        self.prefix_hashes = prefix_hashes or _no_hashes
        self._keyed = prefix_hashes is not None  # else every request's hashes are None (no call per admission)
        self.waiting: deque[int] = deque()
        self.swapped: deque[int] = deque()
        self.running: list[int] = []  # admission order; the victim is the last
        self._run_arr: np.ndarray | None = None
        self._run_prev: np.ndarray | None = None  # while _run_arr is None: a prefix of `running` (appends only since)
        self.swap_used_bytes = 0
        self.num_preemptions = 0
        self.prefix_queries = 0  # prompt tokens looked up in the prefix cache (whole prompts, first admissions)
        self.prefix_hits = 0
        self.peak_used_blocks = 0
        self._decode_batch: DecodeBatch | None = None
        # Decode batches keep `computed` lazily too (DecodeBatch.lazy): only where nothing outside
        # this scheduler reads the table mid-run but knows the lag (the single-replica replay and the
        # aggregated fleet set it, the fleet's live views add DecodeBatch.offset; settle() at the end).
        self.lazy_computed = False
        self.remote = RemoteKV()  # requests whose KV arrives from elsewhere (sim/core/remote_kv.py)
        self.tiers: TierStack | None = None  # KV tiers below the GPU pool (sim/core/tiers/)
        self.align_block = int(getattr(allocator, "state_align_block", 0))  # vLLM's Mamba align-mode cut (0: none)
        self.sparse_keys = allocator.keys_sparsely  # allocate wants each request's Retention

    # --- queue state ----------------------------------------------------------------------------
    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.swapped or self.remote.pending)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.swapped)

    def running_ids(self) -> np.ndarray:
        arr = self._run_arr
        if arr is None:
            run, prev = self.running, self._run_prev
            n = len(run)
            if prev is None or prev.size > n:  # fromiter is ~25% cheaper than np.array here
                arr = np.fromiter(run, _INT64, n)
            else:  # admissions only since `prev`: it is copied, the tail set (no per-member conversion)
                m = prev.size
                arr = np.empty(n, _INT64)
                arr[:m] = prev
                if n - m <= SHORT_TAIL:  # a step's few joiners: a view costs more than it saves
                    for i in range(m, n):
                        arr[i] = run[i]
                else:
                    cells = cell_view(arr)
                    for i in range(m, n):
                        cells[i] = run[i]
            self._run_arr, self._run_prev = arr, None
        return arr

    def decode_batch(self) -> DecodeBatch | None:
        """The running batch if every member is decoding, else None (cached: see DecodeBatch)."""
        run = self.running_ids()
        batch = self._decode_batch
        if batch is not None and batch.run is run:
            return batch
        self._drop_batch()
        self._decode_batch = DecodeBatch.from_table(self.t, run, self.lazy_computed)
        if self._decode_batch is not None:
            self._track(run, None)
        return self._decode_batch

    @property
    def cfg(self) -> SchedulerConfig:
        return self._cfg

    @cfg.setter
    def cfg(self, config: SchedulerConfig) -> None:
        """A new config (sim/fleet/pd.py's prefill pool holds KV on finish): its flag kept with it."""
        self._cfg = config
        self._hold_kv = config.hold_kv_on_finish

    def _track(self, run: np.ndarray, joined: list[int] | None) -> None:
        """Tell the allocator the decode batch it will be asked to grow (Allocator.track_batch):
        the lazy replays only (lazy_computed), whose finished requests are freed."""
        if self.lazy_computed and not self._hold_kv:
            self.alloc.track_batch(run, joined)

    def sync_generated(self) -> None:
        """Write `generated` of the decode batch's members into the table. While a batch is
        tracked its steps add to `computed` only: a decoding member has computed = prompt +
        generated - 1, so generated is written from it when the batch stops being tracked (and here,
        for a reader of the table mid-run). Idempotent."""
        batch = self._decode_batch
        if batch is not None and batch.run is self._run_arr:
            batch.write_generated(self.t)

    def _drop_batch(self) -> None:
        """Stop tracking the decode batch: its members' `generated` (and a lazy batch's
        `computed`) written first (DecodeBatch.release)."""
        batch = self._decode_batch
        if batch is not None:
            batch.release(self.t)
            self._decode_batch = None

    def settle(self) -> None:
        """Make the table's `computed` and `generated` true for every request (the decode batch is
        released; the next step rebuilds it from the table): for readers after a lazy run."""
        self._drop_batch()

    def add_request(self, r: int) -> None:
        self.t.cells.status[r] = WAITING
        self.waiting.append(r)

    def add_remote_request(self, r: int, tokens: int) -> None:
        """Request r arrives with its first `tokens` token states to be loaded from elsewhere (a
        request of one known token has nothing to load: it is computed here)."""
        if tokens > 0 and self.t.prompt[r] + self.t.generated[r] > 1:
            self.remote.expect(r, tokens)
        self.add_request(r)

    def next_event_s(self) -> float | None:
        """Earliest time a loading request's KV is ready or a held request is released (None: none)."""
        return self.remote.next_event_s()

    def release_at(self, r: int, t: float) -> None:
        """Free the blocks finished request r holds (hold_kv_on_finish) at the first step from time t."""
        self.remote.release_at(r, t)

    def waiting_needs(self) -> list[int]:
        """Token slots the next waiting requests need (allocator external-fragmentation input)."""
        t = self.t
        out: list[int] = []
        for q in (self.swapped, self.waiting):
            for r in q:
                if len(out) >= EXTERNAL_FRAG_LOOKAHEAD:
                    return out
                out.append(int(t.reserve[r]) if self.cfg.contiguous else int(t.prompt[r] + t.generated[r]))
        return out

    # --- one step -------------------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan | None:
        if not self.has_work:
            return None
        remote = self.remote
        if remote.loading or remote.releases:
            remote_kv.apply_due(self, now)
        if self.tiers is not None:
            self.tiers.now = now
        t, cfg = self.t, self.cfg
        budget = cfg.max_batched_tokens
        run = self.running_ids()
        plan = StepPlan(now, _NO_IDS, _NO_IDS)
        if run.size:
            batch = self.decode_batch() if run.size <= budget else None
            if batch is not None and self.alloc.fits_growth(run, 1):
                self.alloc.grow_by(run, 1)  # (a gather of computed, its lazy offset added when read)
                plan.set_decoders(run, t.computed[run], batch.clock if batch.lazy else 0, batch.context)
                budget -= run.size
            else:
                self._drop_batch()  # the per-request path reads (and preempts) every member
                budget = self._schedule_running_slow(plan, budget)
        if not plan.preempted:
            self._admit(plan, budget, now)
        self.peak_used_blocks = max(self.peak_used_blocks, self.alloc.num_used_blocks)
        if self.align_block:  # states cached in this step become hits for the next (vLLM's cached_blocks_this_step)
            self.alloc.end_step()  # type: ignore[attr-defined]  # an align-mode pool
        if not plan.decode_ids.size and not plan.prefill_ids and not plan.preempted:
            return None
        return plan

    def _admit(self, plan: StepPlan, budget: int, now: float) -> None:
        """Swapped-out requests come back first, then waiting ones (none while any stays out)."""
        if self.swapped:
            budget = self._resume_swapped(plan, budget)
        if not self.swapped and self.waiting:
            self._admit_waiting(plan, budget, now)

    def _schedule_running_slow(self, plan: StepPlan, budget: int) -> int:
        """Per-request path: budget-limited chunks and preemption when the allocator is full."""
        t = self.t
        dec_ids: list[int] = []
        dec_ctx: list[int] = []
        i = 0
        while i < len(self.running):
            r = self.running[i]
            c = int(t.computed[r])
            n = min(int(t.prompt[r] + t.generated[r]) - c, budget)
            if n > 0 and self.align_block:
                n = self._aligned(r, c, n, self.alloc.state_junction(r))  # type: ignore[attr-defined]  # align pool
            if n <= 0:
                i += 1
                continue
            while not self.alloc.append(r, n):
                victim = self.running.pop()
                self._preempt(victim, plan)
                if victim == r:
                    break
            else:
                budget -= n
                if n == 1 and t.generated[r] >= 1:
                    dec_ids.append(r)
                    dec_ctx.append(c)
                else:
                    plan.prefill_ids.append(r)
                    plan.prefill_context.append(c)
                    plan.prefill_tokens.append(n)
                    plan.prefill_end.append(c + n)
            i += 1
        self._run_arr = self._run_prev = None
        plan.decode_ids = np.array(dec_ids, dtype=np.int64)
        plan.decode_context = np.array(dec_ctx, dtype=np.int64)
        return budget

    def _preempt(self, r: int, plan: StepPlan) -> None:
        t = self.t
        t.preemptions[r] += 1
        self.num_preemptions += 1
        plan.preempted.append(r)
        kv_bytes = int(t.computed[r]) * self.alloc.bytes_per_token
        self.alloc.free(r)
        # Only a request whose prompt is all in K/V is swapped: it resumes as a decode. One caught
        # mid-prefill (chunked) is recomputed, as is any victim when host swap space is full.
        prompt_done = t.generated[r] >= 1
        if (self.cfg.preemption == "swap" and prompt_done
                and self.swap_used_bytes + kv_bytes <= self.cfg.swap_space_bytes):
            self.swap_used_bytes += kv_bytes
            plan.swap_out_bytes += kv_bytes
            if self.tiers is not None:  # the swap space is the CPU tier's room (sim/core/tiers/stack.py)
                self.tiers.swap_out(kv_bytes)
            t.status[r] = SWAPPED
            self.swapped.append(r)
        else:  # recompute (also the fallback when host swap space is full)
            t.computed[r] = 0
            t.status[r] = WAITING
            self.waiting.appendleft(r)

    def _resume_swapped(self, plan: StepPlan, budget: int) -> int:
        t = self.t
        while self.swapped and budget >= 1 and len(self.running) < self.cfg.max_num_seqs:
            r = self.swapped[0]
            c = int(t.computed[r])
            if not self.alloc.can_allocate(c + 1, int(t.reserve[r])):
                break
            self.alloc.allocate(r, c + 1, t.final_tokens(r), int(t.reserve[r]))
            self.swapped.popleft()
            kv_bytes = c * self.alloc.bytes_per_token
            self.swap_used_bytes -= kv_bytes
            plan.swap_in_bytes += kv_bytes
            if self.tiers is not None:
                self.tiers.swap_in(kv_bytes)
            t.status[r] = RUNNING
            self._start_running(r)
            plan.decode_ids = np.append(plan.decode_ids, r)
            plan.decode_context = np.append(plan.decode_context, c)
            plan.decode_kv = None
            budget -= 1
        return budget

    def _admission_chunk(self, r: int, budget: int, hashes: Sequence[int] | None = None, total: int = -1) -> int:
        """Tokens the head request would be given now (0: it cannot start this step). Cached
        prefix tokens cost no budget, so the first chunk is sized as hits + budget. `total`: its
        known tokens (prompt + generated) when the caller has them."""
        if total < 0:
            total = self.t.cells.prompt[r] + self.t.cells.generated[r]
        hits = self.alloc.prefix_hit_tokens(total, hashes) if hashes is not None and budget > 0 else 0
        n = min(total, budget + hits)
        if n <= 0 or (not self.cfg.chunked_prefill and n < total):
            return 0
        if self.align_block and n > hits:
            cut = self._aligned(r, hits, n - hits, self._junction(r, hashes))
            return hits + cut if cut > 0 else 0
        return n

    def _aligned(self, r: int, start: int, n: int, junction: int) -> int:
        """vLLM's Mamba block-aligned split of an n-token chunk of r from `start` computed tokens."""
        t = self.t
        return aligned_chunk(start, n, int(t.prompt[r]), int(t.prompt[r] + t.generated[r]), self.align_block,
                             self.cfg.max_batched_tokens, junction)

    def _junction(self, r: int, hashes: Sequence[int] | None) -> int:
        """The shared-prefix junction of waiting request r (a sparsely keying pool's lookup; 0: none)."""
        total = int(self.t.prompt[r] + self.t.generated[r])
        return self.alloc.prefix_junction(total, hashes) if hashes is not None else 0

    def retention(self, r: int, hashes: Sequence[int] | None) -> Retention | None:
        """Where a sparsely keying pool may key waiting request r's blocks (None: the pool keys densely)."""
        if not self.sparse_keys:
            return None
        return Retention(int(self.t.prompt[r]), self._junction(r, hashes))

    def _can_admit(self, r: int, n: int, hashes: Sequence[int] | None, total: int = -1) -> bool:
        """Would the allocator take the head request with a first chunk of n tokens now? With
        admit_whole_prompt its whole known sequence must fit (window and chunk groups counted up to
        vLLM's admission cap) and so must the chunk (vLLM's allocate_slots with full_sequence_must_fit)."""
        cells = self.t.cells
        if not self.cfg.admit_whole_prompt:
            return self.alloc.can_allocate(n, cells.reserve[r], hashes)
        if total < 0:
            total = cells.prompt[r] + cells.generated[r]
        return self.alloc.can_allocate(total, cells.reserve[r], hashes, chunk_tokens=n)

    def _admit_waiting(self, plan: StepPlan, budget: int, now: float) -> None:
        cells = self.t.cells
        expected, max_seqs = self.remote.expected, self.cfg.max_num_seqs
        while self.waiting and budget > 0 and len(self.running) < max_seqs:
            r = self.waiting[0]
            hashes = self.prefix_hashes(r) if self._keyed else None
            if (expected and r in expected) or (self.tiers is not None and hashes is not None):
                loaded = self._admit_loading(r, hashes, now)
                if loaded is not None:  # its KV comes from elsewhere: reserved, or the queue waits
                    if not loaded:
                        break
                    continue
            prompt = cells.prompt[r]
            total = prompt + cells.generated[r]
            n = self._admission_chunk(r, budget, hashes, total)
            reserve = cells.reserve[r]
            if n == 0 or not self._can_admit(r, n, hashes, total):
                break
            hit = self._allocate_head(r, n, prompt + cells.output[r], reserve, hashes)
            self.waiting.popleft()
            compute = n - hit
            if n == total and compute < 1:
                compute = 1  # a token must be computed to sample the next one
            hit = n - compute
            if hashes is not None and not cells.preemptions[r]:
                # vLLM's PrefixCacheStats: the whole request is looked up (request.num_tokens), once
                # per admission; re-admissions after a preemption are counted apart, not here.
                self.prefix_queries += total
                self.prefix_hits += hit
            if hit:
                cells.prefix_hit[r] += hit
            admitted = cells.admitted_s[r]
            if admitted != admitted:  # NaN: first admission (cheaper than np.isnan on a scalar)
                cells.admitted_s[r] = now
            cells.status[r] = RUNNING
            self._start_running(r)
            plan.prefill_ids.append(r)
            plan.prefill_context.append(hit)
            plan.prefill_tokens.append(compute)
            plan.prefill_end.append(n)
            budget -= compute

    def _allocate_head(self, r: int, n: int, final: int, reserve: int, hashes: Sequence[int] | None) -> int:
        """The allocator's `allocate` for the admitted head (a sparsely keying pool gets its Retention
        too); `final` is RequestTable.final_tokens(r). Returns the hit tokens."""
        if self.sparse_keys:
            return self.alloc.allocate(r, n, final, reserve, hashes, retention=self.retention(r, hashes))
        return self.alloc.allocate(r, n, final, reserve, hashes)

    def _admit_loading(self, r: int, hashes: Sequence[int] | None, now: float) -> bool | None:
        """Admit head request r on the remote-KV path if its KV comes from elsewhere: a handoff
        (sim/core/remote_kv.py) or lower KV tiers (sim/core/tiers/admission.py). None: it does not;
        False: it does but its blocks do not fit now."""
        if r in self.remote.expected:
            return remote_kv.reserve_head(self, r, now)
        if self.tiers is None or hashes is None:
            return None
        if self.cfg.admit_whole_prompt and not self.alloc.can_allocate(
                int(self.t.prompt[r] + self.t.generated[r]), int(self.t.reserve[r]), hashes, chunk_tokens=0):
            return False  # blocked whatever the tiers hold (the plain path's whole-sequence test): skip the lookup
        found = tier_admission.lower_hits(self, r, hashes)
        return None if found is None else tier_admission.admit_loading(self, r, hashes, *found, now)

    def _start_running(self, r: int) -> None:
        self.running.append(r)
        if self._run_arr is not None:  # `running` now extends it (running_ids copies it, then the tail)
            self._run_prev, self._run_arr = self._run_arr, None

    def complete_step(self, plan: StepPlan, t_end: float) -> list[int]:
        """Apply a finished step: K/V written, tokens sampled, finished requests freed."""
        t = self.t
        d = plan.decode_ids
        batch = self._decode_batch if self._decode_batch is not None and d is self._decode_batch.run else None
        self._step_decoders(d, batch)
        all_done = not plan.preempted and (batch is not None or len(self.running) == len(plan.prefill_ids))
        cells = t.cells
        status, computed, prompt, generated, first = cells.status, cells.computed, cells.prompt, cells.generated, cells.first_token_s
        ids, ends = plan.prefill_ids, plan.prefill_end
        if len(ids) != len(ends):
            raise ValueError(f"step plan: {len(ids)} prefill ids but {len(ends)} prefill ends")
        for i in range(len(ids)):  # indexed (compiled, zip(.., strict=True) is a call through Python)
            r, end = ids[i], ends[i]
            if status[r] != RUNNING:  # preempted later in the same step (not possible today)
                all_done = False
                continue
            computed[r] = end
            g = generated[r]
            if end == prompt[r] + g:
                generated[r] = g + 1
                sampled = first[r]
                if sampled != sampled:  # NaN: not sampled before a recompute
                    first[r] = t_end
            else:
                all_done = False
        if plan.prefill_ids:
            if all_done and batch is not None:  # the prefills join the batch; its ids are built once, after any finishes
                grown = decode_run.joined(batch, t, batch.run, plan.prefill_ids, plan.prefill_end, self.lazy_computed)
                self._decode_batch = grown
                return self._finish_batch(grown, t_end, plan.prefill_ids)
            if all_done:
                run = self.running_ids()
                self._decode_batch = decode_run.joined(None, t, run, plan.prefill_ids, plan.prefill_end,
                                                       self.lazy_computed)
                self._track(run, None)
            else:
                self._drop_batch()
        return self._finish_done(t_end)

    def _step_decoders(self, d: np.ndarray, batch: DecodeBatch | None) -> None:
        """The decoders of a step computed one token and sampled the next: in the table, or on the
        tracked batch's clock (its members' generated, and a lazy batch's computed, follow it)."""
        t = self.t
        if batch is None:
            self._drop_batch()  # e.g. swapped-out requests resumed beside it: every decoder stepped alike below
            if d.size:
                t.computed[d] += 1
                t.generated[d] += 1
            return
        if d.size:
            if not batch.lazy:
                t.computed[d] += 1
            batch.advance(1)

    def _finish_done(self, t_end: float) -> list[int]:
        t = self.t
        run = self.running_ids()
        batch = self._decode_batch
        if batch is not None and batch.run is run:
            return self._finish_batch(batch, t_end)
        self._drop_batch()
        if not run.size:
            return []
        rem = t.output[run] - t.generated[run]
        done_mask = rem <= 0
        if not _count(done_mask):
            return []
        done = run[done_mask]
        t.finish_s[done] = t_end
        t.status[done] = FINISHED
        for r in done.tolist():
            self._free_finished(r)
        keep = run[~done_mask]
        self.running = keep.tolist()
        self._run_arr, self._run_prev = keep, None
        return done.tolist()

    def _free_finished(self, r: int) -> None:
        if self._hold_kv:
            self.remote.hold(r)
        else:
            self.alloc.free(r)

    def _finish_batch(self, batch: DecodeBatch, t_end: float, joiners: list[int] | None = None) -> list[int]:
        """_finish_done for an all-decoding batch: its heap says who is done (no scan of the
        batch); the rest are carried into the next batch. `joiners`: the batch is the one the
        step's prefills just joined (decode_run.joined), its ids not built yet: they are built here
        once, after the leavers are out, and the allocator told of the joiners that stay."""
        done = batch.leave(self.running)
        if not done:
            if joiners is not None:
                batch.run = run = self.running_ids()
                self._track(run, joiners)
            return []
        context, off = batch.context, batch.offset()
        cells = self.t.cells
        computed, generated, output, finish_s, status = cells.computed, cells.generated, cells.output, cells.finish_s, cells.status
        for r in done:  # running order: frees happen in this order
            generated[r] = output[r]  # its last token (the batch's steps add to computed only)
            c = computed[r]
            if off:
                c += off  # a lazy batch's member leaves: its true count
                computed[r] = c
            finish_s[r] = t_end
            status[r] = FINISHED
            context -= c
            self._free_finished(r)
        self._run_arr = self._run_prev = None
        # the rest are carried; with nobody left it is dropped (each leaver's generated is written)
        if self.running:
            i = batch.left_at
            if i >= 0:  # one left, at i: `running` was batch.run then the joiners (if any): cut out, no rebuild
                old = batch.run
                if i < old.size:  # (else the leaver was a joiner: old stands)
                    cut = old.copy()  # one copy and one shift: cheaper than concatenating two slices
                    cut[i:-1] = old[i + 1:]
                    old = cut[:-1]
                if joiners is None:
                    self._run_arr = old
                else:  # running_ids copies it and sets the joiners that stay behind it
                    self._run_prev = old
            run = self.running_ids()
            if joiners is None:
                self._decode_batch = batch.carried(run, context)
                self._track(run, [])
            else:  # the joined batch is new: completed in place
                batch.run, batch.context = run, context
                self._track(run, [r for r in joiners if r not in done])
        else:
            self._decode_batch = None
        return done

    # --- admission test for the decode fast path ---------------------------------------------------
    def head_admissible(self, batch_size: int) -> bool:
        """Could the head of the waiting queue be admitted next to a decode batch of this size?"""
        r = self.waiting[0]
        if r in self.remote.expected:
            return remote_kv.head_fits(self, r)
        hashes = self.prefix_hashes(r) if self._keyed else None
        total = self.t.prompt.item(r) + self.t.generated.item(r)
        n = self._admission_chunk(r, self.cfg.max_batched_tokens - batch_size, hashes, total)
        return bool(n) and self._can_admit(r, n, hashes, total)

    # --- skip-ahead over runs of decode steps: the machinery and its contract are in decode_run --
    # (bound as methods, not wrapped: the engine asks for the limit before every step)
    def decode_run_limit(self) -> int:
        """How many next steps may be taken in one go (0: none)."""
        return decode_run.run_limit(self)

    def decode_context_tokens(self) -> int:
        """Summed K/V tokens of the running batch."""
        return decode_run.context_tokens(self)

    def advance_decode(self, k: int, t_end: float) -> list[int]:
        """Apply k pure-decode steps at once (k <= decode_run_limit()); returns finished ids."""
        decode_run.grow(self, k)
        return self._finish_done(t_end)


if TYPE_CHECKING:  # mypy checks the protocol here, where the class is written (it cannot subclass it: sim/native)
    _implements: type[interfaces.Scheduler] = Scheduler

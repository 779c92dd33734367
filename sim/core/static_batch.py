"""Static-batching baseline: what a plain `model.generate()` loop does, for contrast.

A batch of up to B waiting requests (FCFS) is padded to its longest prompt and runs until its
longest output is done: every step computes a token for every member, finished or not, and nobody
joins until the whole batch ends. A member's own finish time is the step that produced its last
real token (that is what its user sees), but its K/V stays held until the batch ends.

Same API as sim.core.scheduler.Scheduler (schedule / complete_step, and the skip-ahead side
decode_run_limit / decode_context_tokens / advance_decode of sim.core.decode_run.SkipAhead), so the
engine and the GPU backend drive either one unchanged. Its decode run limit is simpler than the
continuous scheduler's: nobody joins a static batch, so a run ends only at a member's last token. No preemption:
the batch is admitted only if its padded K/V (longest prompt + longest output) fits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from sim.core import interfaces
from sim.core.request import FINISHED, RUNNING, WAITING, RequestTable
from sim.core.step_types import StepPlan


class StaticBatchScheduler:
    """Implements sim.core.interfaces.Scheduler structurally: its SkipAhead part is a compiled trait
    (sim/native), which an interpreted class cannot subclass."""

    def __init__(self, table: RequestTable, allocator: interfaces.Allocator, batch_size: int,
                 prefix_hashes: Callable[[int], Sequence[int] | None] | None = None) -> None:
        self.t = table
        self.alloc = allocator
        self.batch_size = batch_size
        self.waiting: deque[int] = deque()
        self.batch = np.zeros(0, dtype=np.int64)
        self.pad_prompt = 0
        self.pad_output = 0
        self.batch_generated = 0  # tokens sampled by every member so far (padded)
        self.num_preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.peak_used_blocks = 0

    @property
    def has_work(self) -> bool:
        return bool(self.batch.size or self.waiting)

    @property
    def num_running(self) -> int:
        return int(self.batch.size)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def running_ids(self) -> np.ndarray:
        return self.batch

    def add_request(self, r: int) -> None:
        self.t.status[r] = WAITING
        self.waiting.append(r)

    def waiting_needs(self) -> list[int]:
        t = self.t
        return [int(t.prompt[r] + t.output[r]) for r in list(self.waiting)[: self.batch_size]]

    def _form_batch(self, now: float) -> None:
        """Take up to B waiting requests whose padded K/V fits; shrink the batch until it does."""
        t, alloc = self.t, self.alloc
        n = min(self.batch_size, len(self.waiting))
        while n > 0:
            cand = [self.waiting[i] for i in range(n)]
            pp, po = int(t.prompt[cand].max()), int(t.output[cand].max())
            members = []
            for r in cand:
                if not alloc.can_allocate(pp, pp + po):
                    break
                alloc.allocate(r, pp, pp + po, pp + po)
                members.append(r)
            if len(members) == n and alloc.blocks_to_grow(members, [pp + po - 1] * n) <= alloc.num_free_blocks:
                break
            for r in members:
                alloc.free(r)
            n = min(len(members), n - 1)
        if n == 0:
            return
        for _ in range(n):
            self.waiting.popleft()
        self.batch = np.array(cand, dtype=np.int64)
        self.pad_prompt, self.pad_output, self.batch_generated = pp, po, 0
        t.admitted_s[self.batch] = now
        t.status[self.batch] = RUNNING

    def schedule(self, now: float) -> StepPlan | None:
        if not self.batch.size:
            if not self.waiting:
                return None
            self._form_batch(now)
            if not self.batch.size:
                return None
            n = self.batch.size
            plan = StepPlan(now, self.batch[:0], self.batch[:0])
            plan.prefill_ids = self.batch.tolist()
            plan.prefill_context = [0] * n
            plan.prefill_tokens = [self.pad_prompt] * n
            plan.prefill_end = [self.pad_prompt] * n
        else:
            new_len = self.t.computed[self.batch] + 1
            self.alloc.grow_many(self.batch, new_len)
            plan = StepPlan(now, self.batch, self.t.computed[self.batch])
        self.peak_used_blocks = max(self.peak_used_blocks, self.alloc.num_used_blocks)
        return plan

    def complete_step(self, plan: StepPlan, t_end: float) -> list[int]:
        t, b = self.t, self.batch
        if plan.prefill_ids:
            t.computed[b] = self.pad_prompt
            t.first_token_s[b] = t_end
        else:
            t.computed[b] += 1
        return self._sampled(1, t_end)

    def _sampled(self, k: int, t_end: float) -> list[int]:
        t, b = self.t, self.batch
        before = self.batch_generated
        self.batch_generated += k
        t.generated[b] = np.minimum(self.batch_generated, t.output[b])
        newly = b[(t.output[b] > before) & (t.output[b] <= self.batch_generated)]
        t.finish_s[newly] = t_end
        if self.batch_generated >= self.pad_output:
            for r in b.tolist():
                self.alloc.free(r)
            t.status[b] = FINISHED
            self.batch = b[:0]
        return newly.tolist()

    def decode_run_limit(self) -> int:
        """Decode steps until the next member's last token (or the batch end)."""
        t, b = self.t, self.batch
        if not b.size or self.batch_generated == 0:
            return 0
        left = t.output[b] - self.batch_generated
        left = left[left > 0]
        return int(left.min()) if left.size else self.pad_output - self.batch_generated

    def decode_context_tokens(self) -> int:
        return int(self.t.computed[self.batch].sum())

    def advance_decode(self, k: int, t_end: float) -> list[int]:
        t, b = self.t, self.batch
        new_len = t.computed[b] + k
        self.alloc.grow_many(b, new_len)
        self.peak_used_blocks = max(self.peak_used_blocks, self.alloc.num_used_blocks)
        t.computed[b] = new_len
        return self._sampled(k, t_end)


if TYPE_CHECKING:  # mypy checks the protocol here, where the class is written (it cannot subclass it: sim/native)
    _implements: type[interfaces.Scheduler] = StaticBatchScheduler

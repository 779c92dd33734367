"""Per-request state as numpy columns (one row per trace request), shared by scheduler and engine.

Why arrays and not one object per request: a million-request replay must stay flat in memory and
let the engine update a whole running batch with one vectorised operation per step.

Token bookkeeping follows vLLM v1: a request "knows" prompt + generated tokens; `computed` of
them have their K/V written. A step computes `prompt + generated - computed` tokens (capped by
the budget); when computed reaches prompt + generated, one new token is sampled. So a prefill
finishes with the first output token, every decode step writes one token's K/V and samples the
next, and the request ends holding prompt + output - 1 token states. A recompute preemption sets
`computed` back to 0 and keeps `generated`: re-admission prefills prompt + generated tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# status codes
WAITING, RUNNING, SWAPPED, FINISHED, REJECTED, PENDING = 0, 1, 2, 3, 4, 5
LOADING = 6  # blocks reserved, its KV arriving from elsewhere (vLLM's WAITING_FOR_REMOTE_KVS)


@dataclass
class RequestTable:
    """Columns indexed by request id (0..n-1, trace order). Times are seconds; NaN = not yet."""

    arrival_s: np.ndarray  # float64
    prompt: np.ndarray  # int64, input tokens
    output: np.ndarray  # int64, output tokens to generate (after max_model_len clamping)
    computed: np.ndarray  # int64, tokens with K/V written
    generated: np.ndarray  # int64, output tokens sampled so far (a running decoder's may lag: Scheduler.sync_generated)
    status: np.ndarray  # int8, codes above
    admitted_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray  # int32
    prefix_hit: np.ndarray  # int64, prefix-cache hit tokens (summed over admissions)
    reserve: np.ndarray  # int64, contiguous reservation in tokens (0 for paged)
    cells: Cells = field(init=False, repr=False, compare=False)  # one request's cells (Cells)

    def __post_init__(self) -> None:
        self.cells = Cells(self)

    @classmethod
    def create(cls, arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> RequestTable:
        n = len(arrival_s)
        nan = np.full(n, np.nan)
        return cls(
            arrival_s=np.asarray(arrival_s, dtype=np.float64),
            prompt=np.asarray(prompt, dtype=np.int64).copy(),
            output=np.asarray(output, dtype=np.int64).copy(),
            computed=np.zeros(n, dtype=np.int64),
            generated=np.zeros(n, dtype=np.int64),
            status=np.full(n, PENDING, dtype=np.int8),
            admitted_s=nan,
            first_token_s=nan.copy(),
            finish_s=nan.copy(),
            preemptions=np.zeros(n, dtype=np.int32),
            prefix_hit=np.zeros(n, dtype=np.int64),
            reserve=np.zeros(n, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.arrival_s)

    def final_tokens(self, r: int) -> int:
        """True final length (prompt + output), what allocators use for reservation accounting."""
        return int(self.prompt[r] + self.output[r])


class Cells:
    """The hot columns of a RequestTable as memoryviews, for code that reads or writes one request
    at a time (the scheduler's admissions and finishes): compiled, `cells.computed[r]` costs about a
    quarter of numpy's scalar indexing (`t.computed[r]`, `t.computed.item(r)`: an index parse and a
    numpy scalar each). The numpy columns stay the one store (never reassigned: these view them);
    whole-batch work keeps using them."""

    def __init__(self, t: RequestTable) -> None:
        self.prompt: memoryview[int] = cell_view(t.prompt)
        self.output: memoryview[int] = cell_view(t.output)
        self.computed: memoryview[int] = cell_view(t.computed)
        self.generated: memoryview[int] = cell_view(t.generated)
        self.status: memoryview[int] = cell_view(t.status)
        self.reserve: memoryview[int] = cell_view(t.reserve)
        self.prefix_hit: memoryview[int] = cell_view(t.prefix_hit)
        self.preemptions: memoryview[int] = cell_view(t.preemptions)
        self.admitted_s: memoryview[float] = cell_view(t.admitted_s)
        self.first_token_s: memoryview[float] = cell_view(t.first_token_s)
        self.finish_s: memoryview[float] = cell_view(t.finish_s)


def cell_view(column: np.ndarray) -> memoryview[Any]:
    """A memoryview of a numpy column: `view[i]` reads or writes one cell as a Python int, float or
    bool, about a quarter of the cost of numpy's scalar indexing from compiled code."""
    return memoryview(column)  # type: ignore[arg-type]  # numpy's stubs omit the buffer protocol it has

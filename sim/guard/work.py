"""The work a run will take, estimated before it starts: requests x steps.

A request lives through one engine step per output token (decode) plus one per chunk of
max_batched_tokens of its prompt (prefill), so the sum over requests of those steps is the number
of request-steps the engine books; the simulator's time grows with it (sim.guard.limits has the
measured rate and the page budget). Cheap: two vector sums over the trace's columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def work_estimate(trace: Any, scenario: Any) -> int:
    """Request-steps of running `scenario` on `trace` (anything with arrays() and max_batched_tokens)."""
    _, inp, out = trace.arrays()
    chunk = max(int(scenario.max_batched_tokens), 1)
    prefill = (np.asarray(inp, dtype=np.int64) + chunk - 1) // chunk
    return int(np.asarray(out, dtype=np.int64).sum() + prefill.sum())

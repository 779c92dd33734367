"""Who may start GPU runs from the dashboard: switchable off by configuration, one run at a time on
the whole server (every browser session shares the lock), and bounded in size. A shared dashboard
must not let any visitor queue unbounded work on the GPU."""

from __future__ import annotations

import os
import threading

from sim.guard.limits import MAX_PAGE_GPU_REQUESTS

ENV = "KVSIM_GPU_RUNS"  # "off" (or 0/false/no): the GPU page shows status only, no run buttons
MAX_REQUESTS = MAX_PAGE_GPU_REQUESTS
_RUNNING = threading.Lock()  # module state: one per server process, shared by all sessions


def enabled() -> bool:
    return os.environ.get(ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def try_start() -> bool:
    """Claim the server's one GPU slot; False when another run holds it."""
    return _RUNNING.acquire(blocking=False)


def finish() -> None:
    if _RUNNING.locked():
        _RUNNING.release()


def busy() -> bool:
    return _RUNNING.locked()

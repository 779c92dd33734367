"""An LRU kept as a queue of runs: the book shared by the KV tiers' LRUTier (sim/core/tiers/lru.py)
and the paged prefix cache's ParkedLRU (sim/core/kv/parked_lru.py).

Each batch of keys entered together is one run (a list of distinct keys), and a dict maps each
live key to the serial of the run holding its live entry. A key entered again, or taken out, leaves
a stale entry behind, passed over when the queue's head reaches it. A batch costs one dict
operation per key and an eviction one more, both in C loops; an OrderedDict took a linked-list node
per key, made at each insertion and freed at each pop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from itertools import repeat
from typing import Any


class RunQueue:
    """The queue's book and its three moves. The owner creates `_where`, `_runs`, `_serial` and
    `_entries` (a dataclass's fields or __init__) and enters keys in `_where` itself."""

    _where: dict[int, int]  # live key -> serial of the run holding its live entry
    _runs: deque[list[Any]]  # [serial, keys, first entry not yet passed]
    _serial: int  # serial of the next run
    _entries: int  # entries in the queue not yet passed (live and stale)

    def _run(self, keys: list[int]) -> int:
        """Queue `keys` (distinct; the list is kept) as the newest run; returns its serial."""
        serial = self._serial
        self._serial += 1
        self._runs.append([serial, keys, 0])
        self._entries += len(keys)
        return serial

    def _evict(self, n: int) -> list[int]:
        """Take the `n` oldest live keys out of the dict and the queue (oldest first)."""
        where, runs, out = self._where, self._runs, []
        pop = where.pop
        while n > 0:
            run = runs[0]
            serial, keys, i = run
            part = keys[i : i + n]
            at = list(map(pop, part, repeat(None)))
            if at.count(serial) == len(part):  # every entry live (the common case)
                live = part
            else:  # stale entries: keys entered again or taken out since (put back any live elsewhere)
                live = [k for k, a in zip(part, at, strict=True) if a == serial]
                where.update((k, a) for k, a in zip(part, at, strict=True) if a is not None and a != serial)
            out += live
            n -= len(live)
            self._entries -= len(part)
            if i + len(part) == len(keys):
                runs.popleft()
            else:
                run[2] = i + len(part)
        return out

    def _live(self) -> Iterator[int]:
        """Live keys, oldest first."""
        where = self._where
        return (k for serial, keys, i in self._runs for k in keys[i:] if where.get(k) == serial)

    def _compact_if_stale(self) -> None:
        """Rewrite the queue as one run of the live keys once stale entries outnumber live ones
        twice over (an owner that never evicts would otherwise keep every stale entry)."""
        if self._entries <= 2 * len(self._where) + 4096:
            return
        live = list(self._live())
        self._runs.clear()
        self._entries = 0
        self._where.update(zip(live, repeat(self._run(live))))

"""The largest load level that passes a test, by bracketing then bisection.

`passes(level)` is a probe (one simulated run, same seed every time); the search assumes it is
monotone (more load never helps) and keeps the invariant lo passes, hi fails. Bracketing doubles
(or halves) from the start level; bisection works on the geometric mean until hi / lo <= 1 + tol.
Every level probed is rounded to 4 significant digits, so the answer is a level that was actually
run and reproduces exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sim.plan.workload import round_level

P = TypeVar("P")
MAX_DOUBLINGS = 14  # x16384 above the start: past that the objective is called unbounded
MAX_HALVINGS = 30


@dataclass
class Bracket(Generic[P]):
    """Outcome: `lo` the largest passing level (None: even the lowest probed failed), `hi` the
    smallest failing one (None: never failed up to the cap), and every probe made."""

    lo: float | None = None
    hi: float | None = None
    lo_probe: P | None = None
    hi_probe: P | None = None
    probes: list[tuple[float, bool]] = field(default_factory=list)

    def record(self, level: float, result: P, ok: bool) -> None:
        """One probe made: its level and verdict; it becomes `lo` if it passed, else `hi`."""
        self.probes.append((level, ok))
        if ok:
            self.lo, self.lo_probe = level, result
        else:
            self.hi, self.hi_probe = level, result

    @property
    def capped(self) -> bool:
        return self.lo is not None and self.hi is None


def largest_passing(probe: Callable[[float], P], passed: Callable[[P], bool], start: float,
                    tol: float = 0.02, floor: float = 0.0, near: bool = False) -> Bracket[P]:
    """`floor`: the lowest level the workload can take; halving stops above it (lo stays None).
    `near`: the start is an estimate that may be close to the answer (a similar configuration's):
    the first bracketing step is 1 + tol, then doubling (or halving) as usual, so an estimate within
    tol costs two probes and a poor one one probe more than starting there without the hint."""
    out: Bracket[P] = Bracket()

    def run(level: float) -> bool:
        result = probe(level)
        ok = passed(result)
        out.record(level, result, ok)
        return ok

    level = round_level(start)
    factor = 1 + tol if near else 2.0
    if run(level):
        for _ in range(MAX_DOUBLINGS + near):
            level, factor = _step(level, factor, up=True), 2.0
            if not run(level):
                break
        else:
            return out
    else:
        for _ in range(MAX_HALVINGS + near):
            level, factor = _step(level, factor, up=False), 2.0
            if level < floor:
                return out
            if run(level):
                break
        else:
            return out
    assert out.lo is not None and out.hi is not None
    while out.hi / out.lo > 1 + tol:
        mid = round_level(math.sqrt(out.lo * out.hi))
        if not out.lo < mid < out.hi:
            break
        run(mid)
    return out


def _step(level: float, factor: float, up: bool) -> float:
    """The next bracketing level (rounded; at least one unit of the 4th digit away, so a small
    factor never rounds back onto the level just probed)."""
    nxt = round_level(level * factor if up else level / factor)
    if nxt == level:
        unit = 10 ** (math.floor(math.log10(level)) - 3)
        nxt = round_level(level + unit if up else level - unit)
    return nxt

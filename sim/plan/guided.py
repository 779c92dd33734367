"""The largest passing level in fewer probes: the next level is read off the measured margin curve
instead of halving the bracket (sim.plan.bracket: the invariant, the stopping rule and the caps).

A probe that meets the SLO gives its margin g: the tightest latency objective's value / limit (misses
give none: they may have stopped early, and the levels probed must not depend on that). Near
capacity the inverse margin 1 / g falls about linearly with the load level, as a queue's
1 / latency does (1 - rho): measured on the Azure conversation trace, llama-3.1-70b TP4 and TP8, a
line through two passes put the edge within ~1.5% of the bisection's. So:
- the edge estimate is where the line through the two passes nearest 1 / g = 1 crosses it (one
  pass: a line of the usual slope through it, SLOPE);
- the next level sits one tolerance step below the estimate (expected to pass), or one step above
  the largest pass when the estimate lies within 1.5 steps of it (expected to fail: the bracket
  closes), or one step below the smallest failure when the estimate lies that close to it;
- when the bracket is within two tolerance steps, one probe placed between hi / (1 + tol) and
  lo x (1 + tol) closes it whichever way it goes;
- without an estimate, or once probes went the other way than the estimate said (twice in a row;
  once for a one-pass estimate), the step is the classic one: double, halve or bisect (the first
  step down from a failing start is / 1.5: a trace's x1 is often just over the edge, and misses
  stop early, so they are cheap).
The answer is a bracket of probes that ran (lo passed, hi failed, hi / lo <= 1 + tol), as the
bisection's: only the levels probed differ, so the rate agrees with the bisection's within tol.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from sim.plan.bracket import MAX_DOUBLINGS, MAX_HALVINGS, Bracket
from sim.plan.workload import round_level

P = TypeVar("P")
# The inverse margin's slope in units of the edge, -d(1 / g) / d(x / T): 3.3-5.4 measured through
# a point 0.3-0.6 of the edge and the edge (Azure conversation trace, llama-3.1-70b TP4 and TP8 on
# h100-sxm and h200). One point is read with SLOPE; a two-point line outside SLOPES is taken for
# noise. The constants below were chosen on those eight configurations' measured margins
# (docs/PERFORMANCE.md, "Plan search"); any values give a true bracket, only the probe count moves.
SLOPE = 5.0
SLOPES = (2.0, 10.0)
AIM = 1.0  # the guided probe sits AIM tolerance steps below the estimate (estimates were within ~1.5%)
CLOSE = 1.5  # an estimate within CLOSE steps of lo (hi) sends the closing probe lo x up (hi / up)
STEP = 2.0  # the classic bracketing factor up
DOWN = 1.5  # the first step down from a failing start (a trace's x1 is often just over the edge; misses stop early)


def guided_largest_passing(probe: Callable[[float], P], passed: Callable[[P], bool],
                           margin: Callable[[P], float | None], start: float, tol: float = 0.02,
                           floor: float = 0.0, near: bool = False) -> Bracket[P]:
    """As sim.plan.bracket.largest_passing, the next level chosen from the margins (module doc).
    `margin(result)`: value / limit of the tightest objective, None where unknown (a probe stopped early)."""
    out: Bracket[P] = Bracket()
    inverse: list[tuple[float, float]] = []  # (level, 1 / margin) of the probes that ran out
    up = 1 + tol
    surprises = 0  # guided probes in a row that went the other way than the estimate said

    def run(level: float) -> None:
        result = probe(level)
        ok = passed(result)
        out.record(level, result, ok)
        g = margin(result)
        if g is not None and g > 0 and math.isfinite(g):
            inverse.append((level, 1.0 / g))

    first = round_level(start)
    run(first)
    for _ in range(MAX_DOUBLINGS + MAX_HALVINGS + 64):
        lo, hi = out.lo, out.hi
        if lo is not None and hi is not None and hi / lo <= up:
            break
        if hi is None and lo is not None and lo >= round_level(first * 2 ** MAX_DOUBLINGS):
            break  # capped: passes at every level tried
        est = edge_estimate(inverse) if surprises < (2 if len(inverse) > 1 else 1) else None
        level = next_level(lo, hi, est, up, near and len(out.probes) == 1, len(out.probes) == 1)
        if (lo is None and level < floor) or not (lo or 0.0) < level < (hi or math.inf):
            break
        run(level)
        surprised = est is not None and out.probes[-1][1] == (level > est)
        surprises = surprises + 1 if surprised else 0
    return out


def edge_estimate(inverse: list[tuple[float, float]]) -> float | None:
    """Where 1 / g crosses 1 (module doc): on the line through the two points nearest it (one each
    side when there are both), or with one point, or a line whose slope is implausible, on a line
    of the usual slope (SLOPE) through the nearest point; None without a usable point."""
    below = sorted((p for p in inverse if p[1] >= 1), key=lambda p: p[1])  # passing side: 1 / g >= 1
    above = sorted((p for p in inverse if p[1] < 1), key=lambda p: -p[1])
    pair = [below[0], above[0]] if below and above else (below or above)[:2]
    if not pair:
        return None
    x0, y0 = pair[0]
    if len(pair) == 2 and pair[1][0] != x0:
        x1, y1 = pair[1]
        slope = (y1 - y0) / (x1 - x0)
        if slope < 0:
            est = x0 + (1 - y0) / slope
            if est > 0 and SLOPES[0] <= -slope * est <= SLOPES[1]:
                return est
    # 1 / g = 1 + SLOPE (1 - x / T) through (x0, y0)
    share = 1 - (y0 - 1) / SLOPE
    return x0 / share if share > 0 else None


def next_level(lo: float | None, hi: float | None, est: float | None, up: float, near_first: bool,
               first: bool = False) -> float:
    """The next level to probe (module doc); the caller checks it lies strictly inside the bracket."""
    if lo is not None and hi is not None and hi / lo <= up * up:
        # one probe closes it either way: a level in [hi / up, lo x up], as near the estimate as allowed
        x = math.sqrt(lo * hi) if est is None else est / up ** AIM
        return _inside(x, hi / up, lo * up, lo, hi, up)
    if est is None:
        if hi is None:
            assert lo is not None
            x = lo * (up if near_first else STEP)
            return _inside(x, x, x, lo, hi, up)
        if lo is None:
            x = hi / (up if near_first else DOWN if first else STEP)
            return _inside(x, x, x, lo, hi, up)
        return _inside(math.sqrt(lo * hi), lo * up, hi / up, lo, hi, up)
    if lo is not None and est <= lo * up ** CLOSE:
        x = lo * up  # expected to fail: closes the bracket
    elif hi is not None and est >= hi / up ** CLOSE:
        x = hi / up  # expected to pass: closes the bracket
    else:
        x = est / up ** AIM  # just below the edge: expected to pass, then lo x up closes
    low = lo * up if lo is not None else hi / 2  # type: ignore[operator]
    high = hi / up if hi is not None else lo * 2  # type: ignore[operator]
    return _inside(x, low, high, lo, hi, up)


def _inside(x: float, low: float, high: float, lo: float | None, hi: float | None, up: float) -> float:
    """x clamped to [low, high], then rounded to 4 digits so that it keeps what the exact level had:
    strictly inside (lo, hi), and within one step (up) of lo or of hi where it was (a closing probe
    rounded to just over lo x up would not close the bracket)."""
    x = min(max(x, low), high)
    keep_lo = lo is not None and x / lo <= up
    keep_hi = hi is not None and hi / x <= up
    near = round_level(x)
    unit = 10 ** (math.floor(math.log10(near)) - 3)
    for cand in (near, round_level(near - unit), round_level(near + unit)):
        if ((lo is None or cand > lo) and (hi is None or cand < hi)
                and (not keep_lo or cand / lo <= up) and (not keep_hi or hi / cand <= up)):  # type: ignore[operator]
            return cand
    return near

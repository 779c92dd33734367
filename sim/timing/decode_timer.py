"""A pure-decode step's time as a function of the batch's K/V tokens alone, for one batch size.

A decode run (sim/core/decode_run.py) takes many steps of one batch: step j reads kv + j x b K/V
tokens. `CostModel.decode_timer(b)` gives one of these per batch size, built once:
- `TableDecodeTimer`: the measured-table source, the scalar branch of CostModel._table_decode with
  the per-batch parts (the batch's row of decode-attention times as Python floats, the base time)
  looked up once; `ends` sums a run's step times in one loop that keeps the context grid segment
  while the mean context stays inside it, so a step costs a division, a compare and the
  interpolation, with no call and no bisection;
- `FormulaDecodeTimer`: any other source, through CostModel.decode_time.
Both give the very floats that decode_time gives, step for step (tests/test_cost_model.py,
tests/test_decode_run.py check it bit for bit): the interpolation is written operation for
operation as there, and the ends are summed one after another as stepping adds them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Final, Protocol

INF: Final = float("inf")


class DecodeTimer(Protocol):
    """A decode step's time for one batch size, as a function of its K/V tokens."""

    def __call__(self, kv: int) -> float: ...

    def ends(self, t: float, kv: int, k: int, horizon: float) -> list[float]: ...


class FormulaDecodeTimer:
    """decode_time(b, kv) of any step-time source, with the run-summing loop."""

    __slots__ = ("b", "time")

    def __init__(self, b: int, decode_time: Callable[[int, int], float]) -> None:
        self.b, self.time = b, decode_time

    def __call__(self, kv: int) -> float:
        return self.time(self.b, kv)

    def ends(self, t: float, kv: int, k: int, horizon: float) -> list[float]:
        """End times of up to k steps from t (step j reads kv + j x b), stopping at the first
        end that reaches `horizon`."""
        b, time, out = self.b, self.time, []
        for _step in range(k):  # (named: compiled, `_` is an object and each index would be boxed)
            t += time(b, kv)
            out.append(t)
            if t >= horizon:
                break
            kv += b
        return out


class TableDecodeTimer:
    """The measured table's decode step of b sequences: base + the row interpolated at the mean
    context kv / b (CostModel._table_decode's scalar branch, the same operations in the same order)."""

    __slots__ = ("b", "d", "base", "grid", "values", "spans", "last", "points")

    def __init__(self, b: int, base: float, grid: Sequence[int], row: Sequence[float]) -> None:
        self.b, self.d, self.base = b, float(b), base
        self.grid, self.values = grid, [float(v) for v in row]
        self.points = [float(v) for v in grid]  # the grid as floats in a list (compiled: read unboxed)
        self.last = len(grid) - 2
        self.spans = [grid[i + 1] - grid[i] for i in range(self.last + 1)]

    def _segment(self, x: float) -> int:
        return min(bisect_right(self.grid, x) - 1, self.last)

    def __call__(self, kv: int) -> float:
        grid, values = self.grid, self.values
        x = float(kv) / self.d
        if x < grid[0]:
            x = float(grid[0])
        i = self._segment(x)
        a = values[i]
        return self.base + (a + (x - grid[i]) / self.spans[i] * (values[i + 1] - a))

    def ends(self, t: float, kv: int, k: int, horizon: float) -> list[float]:
        """FormulaDecodeTimer.ends for this source, the segment kept across steps (the mean
        context only grows along a run)."""
        b, d, base, points, values, spans = self.b, self.d, self.base, self.points, self.values, self.spans
        g0, lo, hi = points[0], INF, -INF  # empty segment: the first step looks it up
        a = g = span = rise = 0.0
        out: list[float] = []
        kvf = float(kv)  # kvf += b is exact (integers far below 2**53): float(kv) each step
        for _step in range(k):  # (named: compiled, `_` is an object and each index would be boxed)
            x = kvf / d
            if x < g0:
                x = g0
            if not lo <= x < hi:
                i = self._segment(x)
                lo, hi = points[i], (points[i + 1] if i < self.last else INF)
                a, g, span, rise = values[i], points[i], float(spans[i]), values[i + 1] - values[i]
            t += base + (a + (x - g) / span * rise)
            out.append(t)  # (compiled, a bound `append` kept in a local would be a call through Python)
            if t >= horizon:
                break
            kvf += b
        return out


class GroupedTableDecodeTimer:
    """The measured table's decode step of b sequences for a model with several attention groups
    (gpt-oss: sliding + full): base + each group's layers x the row interpolated at the mean
    context that group reads (MeasuredTable.grouped_decode's scalar branch, the same operations in
    the same order, with the per-batch row as Python floats)."""

    __slots__ = ("b", "d", "base", "values", "spans", "last", "points", "layers", "clamps", "reads")

    def __init__(self, b: int, base: float, grid: Sequence[int], row: Sequence[float],
                 groups: Sequence[tuple[int, float, Callable[[float, float], float] | None]]) -> None:
        """groups: per attention group (layers, span to clamp the read context at (0: none), or a
        reads_per_seq to call instead (chunked groups)). Kept unboxed (compiled, read as C doubles):
        the grid as floats, each group's layers as a float (int x float is float(int) x float,
        exactly), its clamp (0.0: none) and its reads rule."""
        self.b, self.d, self.base = b, float(b), float(base)  # float(np.float64 + float) is float + float
        self.values = [float(v) for v in row]
        self.points = [float(v) for v in grid]
        self.last = len(grid) - 2
        self.spans = [float(grid[i + 1] - grid[i]) for i in range(self.last + 1)]
        self.layers = [float(layers) for layers, _, _ in groups]
        self.clamps = [float(span) for _, span, _ in groups]
        self.reads = [reads for _, _, reads in groups]

    def __call__(self, kv: int) -> float:
        points, values, spans, last, d = self.points, self.values, self.spans, self.last, self.d
        x = float(kv) / d
        total = 0.0
        for layers, clamp, rule in zip(self.layers, self.clamps, self.reads, strict=True):
            r = _group_read(rule, clamp, x, d, points[0])
            i = min(max(bisect_right(points, r) - 1, 0), last)
            a = values[i]
            total = total + layers * (a + (r - points[i]) / spans[i] * (values[i + 1] - a))
        return self.base + total

    def ends(self, t: float, kv: int, k: int, horizon: float) -> list[float]:
        """FormulaDecodeTimer.ends with this timer's steps: `__call__`'s operations in its order,
        each group's grid segment kept while the context it reads stays inside it (as
        TableDecodeTimer.ends does for one group), so a step bisects nothing."""
        b, d, base, points, values, spans, last = self.b, self.d, self.base, self.points, self.values, self.spans, self.last
        layers, clamps, reads = self.layers, self.clamps, self.reads
        n, g0 = len(layers), points[0]
        lo, hi = [INF] * n, [-INF] * n  # per group: its segment [lo, hi) (empty: the first step looks it up)
        a, g, span, rise = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
        out: list[float] = []
        kvf = float(kv)  # kvf += b is exact (integers far below 2**53)
        for _step in range(k):  # (named: compiled, `_` is an object and each index would be boxed)
            x = kvf / d
            total = 0.0
            for j in range(n):
                r = _group_read(reads[j], clamps[j], x, d, g0)
                if not lo[j] <= r < hi[j]:
                    i = min(max(bisect_right(points, r) - 1, 0), last)
                    lo[j], hi[j] = points[i], (points[i + 1] if i < last else INF)
                    a[j], g[j], span[j], rise[j] = values[i], points[i], spans[i], values[i + 1] - values[i]
                total = total + layers[j] * (a[j] + (r - g[j]) / span[j] * rise[j])
            t += base + total
            out.append(t)
            if t >= horizon:
                break
            kvf += b
        return out


def _group_read(rule: Callable[[float, float], float] | None, clamp: float, x: float, d: float, g0: float) -> float:
    """The context a group reads at mean context x (batch d): its rule (chunked groups), else x
    clamped at its span as min(x, span) takes it (0.0: none); never below the grid's first point."""
    r = float(rule(x, d)) if rule is not None else (clamp if clamp and clamp < x else x)
    return g0 if r < g0 else r

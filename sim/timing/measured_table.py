"""The measured table: what the cost model reads of aiconfigurator-core's kernels, on fixed grids.

sim/timing/measured_db.py builds a `MeasuredTable` once per deployment (querying the package, caching
on disk); sim/timing/cost_model.py reads it in the hot loop. Neither imports the other for it: the
table, its grids and its interpolation live here, and what the table asks of the roofline where it
stops (decode attention past the measured heads, PCIe all-reduce, state layers) is the
`RooflinePart` protocol, which the roofline CostModel satisfies. Scalar and vectorised paths do the
same float operations, so they agree to the last bit.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

# Table grids. Tokens: every step size up to 16k; sequences: vLLM's batch sizes; contexts: 16-128k.
# Typed tuple[int, ...] (one tuple object): a fixed-length tuple type makes compiled code (sim/native)
# unbox all its items on each read and box a new tuple for each bisect or index, ~1 us a use.
TOKENS: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
          6144, 8192, 12288, 16384)
SEQS: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024)
CONTEXTS: tuple[int, ...] = (16, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 65536,
            131072)
PREFIXES: tuple[int, ...] = (0, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
MEMO_LIMIT = 1 << 16  # entries of MeasuredTable._memo


class RooflinePart(Protocol):
    """The roofline pieces a measured table falls back on (sim.timing.cost_model.CostModel)."""

    @property
    def peak_flops(self) -> float: ...

    @property
    def hbm_bandwidth(self) -> float: ...

    @property
    def attention_efficiency(self) -> float: ...

    @property
    def memory_efficiency(self) -> float: ...

    @property
    def allreduce_link(self) -> str: ...

    @property
    def attn_groups(self) -> tuple[Any, ...]: ...


    def allreduce(self, tokens: Any) -> Any: ...

    def decode_attention(self, d: Any, kd: Any, maximum: Callable[[Any, Any], Any]) -> Any: ...


@dataclass(frozen=True)
class MeasuredTable:
    """Measured step pieces of one deployment, in seconds, on fixed grids (module docstring)."""

    ctx_other: np.ndarray  # [TOKENS] non-attention context ops at T tokens (all-reduce apart)
    gen_other: np.ndarray  # [SEQS] non-attention generation ops of D sequences (all-reduce apart)
    ctx_comm: np.ndarray  # [TOKENS] the TP all-reduces of a step of T tokens (0 at TP 1)
    gen_comm: np.ndarray  # [SEQS] the same in a pure-decode step
    logits: np.ndarray  # [SEQS] the lm_head GEMM for S sampled sequences
    ctx_attn: np.ndarray  # [TOKENS, PREFIXES] attention of one prefill chunk of q tokens after p cached
    gen_attn: np.ndarray | None  # [SEQS, CONTEXTS] decode attention; None = the roofline's (outside range)
    roofline: Any = None  # RooflinePart: used where the table stops (decode attention, PCIe all-reduce)
    roofline_allreduce: bool = False
    # Per-group attention (sim/timing/attention_groups.py): when set, ctx_attn and gen_attn hold ONE
    # full-attention layer and each group scales them by its layers at the context it reads.
    attn_groups: tuple[Any, ...] = ()
    # "" = measured as asked; else how the table was derived from the nearest measured one (a KV
    # dtype without kernels: the measured dtype's tables, decode attention scaled by bytes read).
    derived: str = ""
    # Pieces of a general step that depend on one integer of its shape alone (the tokens, the
    # sequences, a prompt chunk's size and cached prefix), kept as computed: a replay asks for the
    # same few thousand values again and again. Same floats as computing them (pure functions).
    _memo: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    # prefill_step's own memos, typed (compiled, a key of one float needs no tuple and the values
    # come back unboxed): other ops and all-reduces by tokens, a chunk's attention by (tokens,
    # cached, chunks), the logits by sequences sampled, the decode-attention rows by sequences.
    _by_tokens: dict[float, tuple[float, float]] = field(default_factory=dict, init=False, compare=False, repr=False)
    _by_chunk: dict[tuple[float, float, float], float] = field(default_factory=dict, init=False, compare=False,
                                                               repr=False)
    _by_seqs: dict[float, float] = field(default_factory=dict, init=False, compare=False, repr=False)
    _rows: dict[float, tuple[float, list[float], list[float]]] = field(default_factory=dict, init=False, compare=False,
                                                                         repr=False)

    def decode_parts(self, d: float) -> tuple[float, np.ndarray | None]:
        """A pure-decode step of d sequences: (GPU seconds apart from decode attention, the decode
        attention row over CONTEXTS interpolated at d, or None when the roofline times it)."""
        comm = self.roofline.allreduce(d) if self.roofline_allreduce else _interp1(SEQS, self.gen_comm, d)
        base = _interp1(SEQS, self.gen_other, d) + _interp1(SEQS, self.logits, d) + comm
        if self.gen_attn is None:
            return base, None
        i, w = _bracket(SEQS, d)
        row = self.gen_attn[i] + w * (self.gen_attn[i + 1] - self.gen_attn[i])
        return base, row

    def grouped_decode(self, row: np.ndarray, d: float, kd: Any, maximum: Callable[[Any, Any], Any]) -> Any:
        """Decode attention summed over the groups: each attention group's layers at the mean context
        it reads (the measured per-layer row); a state group (no measured kernel) from the roofline."""
        x = kd / d
        total = 0.0 * kd
        for g in self.attn_groups:
            if g.kind == "state":
                total = total + g.decode_seconds(d, x, *self._roofline_rates(), maximum)
            else:
                total = total + g.layers * interp_row(CONTEXTS, row, g.reads_per_seq(x, d))
        return total

    def _roofline_rates(self) -> tuple[float, float]:
        r = self.roofline
        return r.peak_flops * r.attention_efficiency, r.hbm_bandwidth * r.memory_efficiency

    def _prefill_attention(self, p: float, kp: float, pp: float, np_: float, maximum: Callable[[Any, Any], Any]) -> Any:
        q, cached = p / np_, kp / np_
        if not self.attn_groups:
            key = (p, kp, np_)
            attn = self._memo.get(key)
            if attn is None:
                attn = np_ * _interp2_scalar(TOKENS, PREFIXES, self.ctx_attn, q, cached)
                self._remember(key, attn)
            return attn
        layer = np_ * _interp2_scalar(TOKENS, PREFIXES, self.ctx_attn, q, cached)
        total = 0.0
        for g in self.attn_groups:
            if g.kind == "state":
                total += g.prefill_seconds(p, kp, pp, np_, *self._roofline_rates(), maximum)
            else:  # a windowed or chunked group does its share of the all-full chunk's pairs
                total += g.layers * layer * g.pair_share(q, cached)
        return total

    def step_seconds(self, d: Any, kd: Any, p: Any, kp: Any, pp: Any, np_: Any,
                     maximum: Callable[[Any, Any], Any]) -> Any:
        """GPU seconds of a step shape; d and the prefill arguments are scalars, kd may be an array."""
        t = d + p
        if p > 0:
            other, comm = self._other_comm(t, True)
            attn = self._prefill_attention(p, kp, pp, np_, maximum)
        else:
            other, comm = self._other_comm(d, False)
            attn = 0.0
        if d > 0:
            if self.gen_attn is None:
                attn = attn + self.roofline.decode_attention(d, kd, maximum)
            elif self.attn_groups:
                row = self.decode_parts(d)[1]
                assert row is not None  # gen_attn is measured on this branch, so decode_parts gives its row
                attn = attn + self.grouped_decode(row, d, kd, maximum)
            elif isinstance(kd, np.ndarray):
                attn = attn + _interp2(SEQS, CONTEXTS, self.gen_attn, d, kd / d)
            else:
                attn = attn + _interp2_scalar(SEQS, CONTEXTS, self.gen_attn, d, kd / d)
        s = d + np_
        logits = self._logits(s) if s > 0 else 0.0
        if self.roofline_allreduce:
            comm = self.roofline.allreduce(t)
        return other + attn + logits + comm

    def prefill_step(self, d: float, kd: float, p: float, kp: float, np_: float) -> float:
        """step_seconds(d, kd, p, kp, pp, np_, max) for p > 0 on a table without attention groups,
        with measured decode attention and all-reduces: the same float operations in the same order,
        each piece memoised by the integer it depends on (typed memos) and the decode attention's
        per-batch-size half kept (`_gen_row`)."""
        t = d + p
        pair = self._by_tokens.get(t)
        if pair is None:
            pair = (float(_interp1_scalar(TOKENS, self.ctx_other, t)), float(_interp1_scalar(TOKENS, self.ctx_comm, t)))
            _bounded(self._by_tokens)[t] = pair
        other, comm = pair
        key = (p, kp, np_)
        attn = self._by_chunk.get(key)
        if attn is None:
            attn = float(self._prefill_attention(p, kp, 0.0, np_, max))
            _bounded(self._by_chunk)[key] = attn
        if d > 0:  # _interp2_scalar(SEQS, CONTEXTS, gen_attn, d, kd / d) with d's bracket kept
            wx, row0, row1 = self._gen_row(d)
            y = max(kd / d, CONTEXTS[0])
            j = min(max(bisect_right(CONTEXTS, y) - 1, 0), len(CONTEXTS) - 2)
            wy = (y - CONTEXTS[j]) / (CONTEXTS[j + 1] - CONTEXTS[j])
            v00, v01, v10, v11 = row0[j], row0[j + 1], row1[j], row1[j + 1]
            lo = v00 + wy * (v01 - v00)
            hi = v10 + wy * (v11 - v10)
            attn = attn + (lo + wx * (hi - lo))
        s = d + np_
        logits = 0.0
        if s > 0:
            got = self._by_seqs.get(s)
            if got is None:
                got = float(self._logits(s))
                _bounded(self._by_seqs)[s] = got
            logits = got
        return other + attn + logits + comm

    def _gen_row(self, d: float) -> tuple[float, list[float], list[float]]:
        """_interp2_scalar's half that depends on d over (SEQS, CONTEXTS): (wx, gen_attn rows i, i + 1)."""
        got = self._rows.get(d)
        if got is None:
            assert self.gen_attn is not None  # prefill_step's condition
            i = min(max(bisect_right(SEQS, d) - 1, 0), len(SEQS) - 2)
            wx = (d - SEQS[i]) / (SEQS[i + 1] - SEQS[i])
            got = (wx, self.gen_attn[i].tolist(), self.gen_attn[i + 1].tolist())
            _bounded(self._rows)[d] = got
        return got

    def _other_comm(self, n: Any, prefill: bool) -> tuple[Any, Any]:
        """(non-attention ops, all-reduces) of a step of n tokens (prefill) or n sequences (decode)."""
        key = (prefill, n)
        pair = self._memo.get(key)
        if pair is None:
            if prefill:
                pair = (_interp1_scalar(TOKENS, self.ctx_other, n), _interp1_scalar(TOKENS, self.ctx_comm, n))
            else:
                pair = (_interp1_scalar(SEQS, self.gen_other, n), _interp1_scalar(SEQS, self.gen_comm, n))
            self._remember(key, pair)
        return pair

    def _logits(self, s: Any) -> Any:
        key = ("logits", s)
        v = self._memo.get(key)
        if v is None:
            v = _interp1_scalar(SEQS, self.logits, s)
            self._remember(key, v)
        return v

    def _remember(self, key: Any, value: Any) -> None:
        if len(self._memo) >= MEMO_LIMIT:  # bounded (prefix-cached chunks make many keys): start over
            self._memo.clear()
        self._memo[key] = value


def _bounded(memo: dict[Any, Any]) -> dict[Any, Any]:
    """`memo`, emptied first when it holds MEMO_LIMIT entries (prefix-cached chunks make many keys)."""
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    return memo


# --- interpolation: identical float operations on scalars and arrays -------------------------------

def _bracket(grid: tuple[int, ...], x: Any) -> tuple[Any, Any]:
    """(index i, weight w) with x between grid[i] and grid[i+1]; clamped at the ends (linear extrapolation
    above the last point)."""
    if isinstance(x, np.ndarray):
        idx = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, len(grid) - 2)
        g = np.asarray(grid, dtype=np.float64)
        return idx, (x - g[idx]) / (g[idx + 1] - g[idx])
    i = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def interp_row(grid: tuple[int, ...], row: np.ndarray, x: Any) -> Any:
    """Linear interpolation of a row over grid at x (clamped below the first point)."""
    if isinstance(x, np.ndarray):
        x = np.maximum(x, grid[0])
    elif x < grid[0]:
        x = float(grid[0])
    return _interp1(grid, row, x)


def _interp1(grid: tuple[int, ...], values: np.ndarray, x: Any) -> Any:
    i, w = _bracket(grid, x)
    if isinstance(i, np.ndarray):
        return values[i] + w * (values[i + 1] - values[i])
    a, b = float(values[i]), float(values[i + 1])
    return a + w * (b - a)


def _interp2(gx: tuple[int, ...], gy: tuple[int, ...], values: np.ndarray, x: Any, y: Any) -> Any:
    i, wx = _bracket(gx, x)
    j, wy = _bracket(gy, max(y, gy[0]) if not isinstance(y, np.ndarray) else np.maximum(y, gy[0]))
    if isinstance(j, np.ndarray) or isinstance(i, np.ndarray):
        v00, v01, v10, v11 = values[i, j], values[i, j + 1], values[i + 1, j], values[i + 1, j + 1]
    else:
        v00, v01 = float(values[i, j]), float(values[i, j + 1])
        v10, v11 = float(values[i + 1, j]), float(values[i + 1, j + 1])
    lo = v00 + wy * (v01 - v00)
    hi = v10 + wy * (v11 - v10)
    return lo + wx * (hi - lo)


# The scalar cases of _interp1 and _interp2 without their type tests (the general step's path:
# step_seconds' shape arguments are scalars): the same float operations in the same order.
def _interp1_scalar(grid: tuple[int, ...], values: np.ndarray, x: Any) -> Any:
    i = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
    a = values.item(i)
    return a + (x - grid[i]) / (grid[i + 1] - grid[i]) * (values.item(i + 1) - a)


def _interp2_scalar(gx: tuple[int, ...], gy: tuple[int, ...], values: np.ndarray, x: Any, y: Any) -> Any:
    y = max(y, gy[0])
    i = min(max(bisect_right(gx, x) - 1, 0), len(gx) - 2)
    j = min(max(bisect_right(gy, y) - 1, 0), len(gy) - 2)
    wx = (x - gx[i]) / (gx[i + 1] - gx[i])
    wy = (y - gy[j]) / (gy[j + 1] - gy[j])
    v00, v01 = values.item(i, j), values.item(i, j + 1)
    v10, v11 = values.item(i + 1, j), values.item(i + 1, j + 1)
    lo = v00 + wy * (v01 - v00)
    hi = v10 + wy * (v11 - v10)
    return lo + wx * (hi - lo)

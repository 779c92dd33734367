"""The load a search varies: a synthetic spec at a chosen rate, or a trace time-scaled.

The search moves one number, the `level`: for a synthetic spec it is the arrival rate itself
(`sim run --synthetic "...,rate=LEVEL"` replays the very same trace: same seed, same lengths);
for a trace it is the speed-up factor of sim.trace.speedup (arrivals divided by it). Levels are
rounded to 4 significant digits so a reported figure reproduces exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.trace import SyntheticSpec, Trace, parse_synthetic_spec, resolve_trace, speedup
from sim.trace.synthetic import MIN_RATE


def round_level(x: float) -> float:
    return float(f"{x:.4g}")


@dataclass(frozen=True)
class Workload:
    """One of: `spec` (synthetic, level = rate) or `trace` (level = speed-up factor)."""

    spec: SyntheticSpec | None = None
    trace: Trace | None = None

    @classmethod
    def from_ref(cls, ref: str, fmt: str | None = None) -> Workload:
        """A trace path or "synthetic:SPEC" (what the CLI and the dashboard accept)."""
        if ref.startswith("synthetic:"):
            return cls(spec=parse_synthetic_spec(ref))
        return cls(trace=resolve_trace(ref, fmt))

    @property
    def start_level(self) -> float:
        """Where the search starts: the spec's rate, or the trace as recorded (x1)."""
        return round_level(self.spec.rate) if self.spec is not None else 1.0

    @property
    def min_level(self) -> float:
        """The lowest level a probe may take: a spec's rate has a floor (sim.trace.synthetic.MIN_RATE);
        a trace slowed by more than 1e6 is no longer a load anyone plans for."""
        return MIN_RATE if self.spec is not None else 1e-6

    def at(self, level: float) -> Trace:
        if self.spec is not None:
            return replace(self.spec, rate=level).generate()
        assert self.trace is not None
        return speedup(self.trace, level)

    def rate(self, level: float) -> float:
        """Mean arrival rate (requests/s) at a level: the spec's rate, or rows / span for a trace."""
        if self.spec is not None:
            return level
        assert self.trace is not None
        span = self.trace.duration_s
        return len(self.trace) / span * level if span > 0 else float("inf")

    def describe(self, level: float) -> str:
        """How to replay this level with `sim run`."""
        if self.spec is not None:
            return f"synthetic:{replace(self.spec, rate=level).text()}"
        assert self.trace is not None
        return f"{self.trace.source} x{level:g}"

"""Synthetic traces: seeded, vectorised, reproducible (1M requests in well under a second or two).

Arrivals: Poisson (exponential gaps), gamma gaps with a chosen coefficient of variation (cv > 1 is
burstier than Poisson, cv < 1 smoother) or constant gaps. Lengths: fixed, uniform, lognormal (by
its mean), bounded zipf, or resampled from another trace. The text spec (docs/TRACES.md) is what
the CLI and the dashboard accept, e.g.
    n=1000,rate=5,arrival=gamma,cv=2,input=lognormal:mean=512:sigma=0.8,output=uniform:lo=16:hi=512,seed=1
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

import numpy as np

from sim.guard import limits
from sim.trace.model import Trace, TraceError

MAX_REQUESTS = limits.MAX_SYNTHETIC_REQUESTS
MAX_RATE = 1e9  # requests/s; and at least MIN_RATE, so arrival times stay finite and meaningful
MIN_RATE = 1e-6
LENGTH_KINDS = {
    "fixed": ("value",),
    "uniform": ("lo", "hi"),
    "lognormal": ("mean", "sigma", "mu"),  # mu (log-space location) overrides mean
    "zipf": ("a", "lo", "hi"),
    "resample": (),
}
ARRIVALS = ("poisson", "gamma", "constant")


@dataclass(frozen=True)
class LengthDist:
    """One token-length distribution. lognormal `mean` is the mean before rounding and clipping."""

    kind: str
    params: tuple[tuple[str, float], ...] = ()

    def param(self, key: str, default: float | None = None) -> float:
        value = dict(self.params).get(key, default)
        if value is None:
            raise TraceError(f"synthetic spec: {self.kind} needs {key}=")
        return float(value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.param("value"))
        if self.kind == "uniform":
            return rng.integers(int(self.param("lo")), int(self.param("hi")), size=n, endpoint=True).astype(np.float64)
        if self.kind == "lognormal":
            mean, sigma = self.param("mean"), self.param("sigma", 1.0)
            mu = self.param("mu", math.log(mean) - sigma**2 / 2)
            return rng.lognormal(mu, sigma, size=n)
        if self.kind == "zipf":
            lo, hi, a = int(self.param("lo", 1)), int(self.param("hi", 4096)), self.param("a", 1.2)
            support = np.arange(lo, hi + 1, dtype=np.float64)
            cdf = np.cumsum(support**-a)
            cdf /= cdf[-1]
            return support[np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(support) - 1)]
        raise TraceError(f"synthetic spec: unknown length distribution {self.kind!r}")

    def text(self) -> str:
        return ":".join([self.kind] + [f"{k}={_num(v)}" for k, v in self.params])


@dataclass(frozen=True)
class SyntheticSpec:
    """Everything that defines a synthetic trace; `generate` is deterministic given the seed."""

    n: int = 1000
    rate: float = 1.0
    arrival: str = "poisson"
    cv: float = 1.0
    input: LengthDist = field(default_factory=lambda: LengthDist("fixed", (("value", 512.0),)))
    output: LengthDist = field(default_factory=lambda: LengthDist("fixed", (("value", 128.0),)))
    max_len: int | None = None  # each length is clipped to [1, max_len]
    seed: int = 0
    preset: str | None = field(default=None, compare=False)  # a label only; the fields above decide

    def text(self) -> str:
        """The spec as text; parse_synthetic_spec(spec.text()) == spec."""
        if self.preset and preset(self.preset, self.n, self.rate, self.seed) == replace(self, arrival="poisson", cv=1.0):
            head = [f"preset={self.preset}", f"n={self.n}", f"rate={_num(self.rate)}", f"arrival={self.arrival}"]
            return ",".join(head + ([f"cv={_num(self.cv)}"] if self.arrival == "gamma" else []) + [f"seed={self.seed}"])
        parts = [f"n={self.n}", f"rate={_num(self.rate)}", f"arrival={self.arrival}"]
        if self.arrival == "gamma":
            parts.append(f"cv={_num(self.cv)}")
        parts += [f"input={self.input.text()}", f"output={self.output.text()}"]
        if self.max_len:
            parts.append(f"max_len={self.max_len}")
        return ",".join(parts + [f"seed={self.seed}"])

    def generate(self, source: Trace | None = None) -> Trace:
        _validate(self)
        rng = np.random.default_rng(self.seed)
        arrival = _arrivals(rng, self.n, self.rate, self.arrival, self.cv)
        inp, out = _lengths(rng, self, source)
        return Trace.build(arrival, inp, out, format="synthetic", source=f"synthetic:{self.text()}")


def synthetic(
    n: int = 1000,
    rate: float = 1.0,
    *,
    arrival: str = "poisson",
    cv: float = 1.0,
    input: LengthDist | str = "fixed:value=512",
    output: LengthDist | str = "fixed:value=128",
    max_len: int | None = None,
    seed: int = 0,
    source: Trace | None = None,
) -> Trace:
    """Generate a trace; `input`/`output` may be LengthDist or spec text like "lognormal:mean=512:sigma=0.8"."""
    spec = SyntheticSpec(
        n=n,
        rate=rate,
        arrival=arrival,
        cv=cv,
        input=_length(input) if isinstance(input, str) else input,
        output=_length(output) if isinstance(output, str) else output,
        max_len=max_len,
        seed=seed,
    )
    return spec.generate(source)


# ----- presets (vLLM paper workloads: means from Kwon et al. 2023, lengths clipped at 2048) --------
# The shape (sigma) is our choice; mu is solved so the mean AFTER rounding and clipping matches.
PRESET_TARGETS = {
    "sharegpt-like": ((161.31, 1.0), (337.99, 0.9)),
    "alpaca-like": ((19.31, 0.6), (58.45, 0.8)),
}
PRESET_MAX_LEN = 2048


def preset(name: str, n: int = 1000, rate: float = 1.0, seed: int = 0) -> SyntheticSpec:
    if name not in PRESET_TARGETS:
        raise TraceError(f"synthetic spec: unknown preset {name!r} (known: {', '.join(PRESET_TARGETS)})")
    (in_mean, in_sigma), (out_mean, out_sigma) = PRESET_TARGETS[name]
    return SyntheticSpec(
        n=n,
        rate=rate,
        input=_calibrated(in_mean, in_sigma, PRESET_MAX_LEN),
        output=_calibrated(out_mean, out_sigma, PRESET_MAX_LEN),
        max_len=PRESET_MAX_LEN,
        seed=seed,
        preset=name,
    )


@cache
def _calibrated(target: float, sigma: float, max_len: int) -> LengthDist:
    """Lognormal whose lengths, rounded and clipped to [1, max_len], have mean `target` (quadrature)."""
    z = np.linspace(-9.0, 9.0, 200_001)
    weights = np.exp(-(z**2) / 2)
    weights /= weights.sum()

    def clipped_mean(mu: float) -> float:
        return float((np.clip(np.rint(np.exp(mu + sigma * z)), 1, max_len) * weights).sum())

    lo, hi = -10.0, math.log(max_len) + 5
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if clipped_mean(mid) < target else (lo, mid)
    mu = (lo + hi) / 2
    return LengthDist("lognormal", (("mean", round(math.exp(mu + sigma**2 / 2), 4)), ("sigma", sigma), ("mu", mu)))


# ----- text spec ------------------------------------------------------------------------------------
def parse_synthetic_spec(text: str) -> SyntheticSpec:
    """Parse "key=value,..." (docs/TRACES.md). Errors are one-line TraceErrors naming the bad part."""
    pairs: dict[str, str] = {}
    for part in text.strip().removeprefix("synthetic:").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not value:
            raise TraceError(f"synthetic spec: {part.strip()!r} is not key=value")
        if key in pairs:
            raise TraceError(f"synthetic spec: {key!r} given twice")
        pairs[key] = value
    known = ("preset", "n", "rate", "arrival", "cv", "input", "output", "max_len", "seed")
    for key in pairs:
        if key not in known:
            raise TraceError(f"synthetic spec: unknown key {key!r} (known: {', '.join(known)})")
    spec = preset(pairs["preset"]) if "preset" in pairs else SyntheticSpec()
    changes: dict[str, Any] = {}
    for key, convert in (("n", int), ("rate", float), ("cv", float), ("max_len", int), ("seed", int)):
        if key in pairs:
            changes[key] = _number(key, pairs[key], convert)
    if "arrival" in pairs:
        changes["arrival"] = pairs["arrival"].lower()
    for key in ("input", "output"):
        if key in pairs:
            changes[key] = _length(pairs[key])
    spec = replace(spec, **changes)
    _validate(spec)
    return spec


def _number(key: str, value: str, convert: type) -> Any:
    try:
        number = float(value)
    except ValueError:
        raise TraceError(f"synthetic spec: {key}={value!r} is not a number") from None
    if not math.isfinite(number) or abs(number) > 1e18:
        raise TraceError(f"synthetic spec: {key}={value!r} is not a usable number")
    if convert is int:
        if not number.is_integer():
            raise TraceError(f"synthetic spec: {key}={value!r} must be a whole number")
        return int(number)
    return number


def _length(text: str) -> LengthDist:
    kind, *rest = text.strip().split(":")
    kind = kind.strip().lower()
    if kind.replace(".", "", 1).isdigit():  # "input=512" is shorthand for fixed:value=512
        return LengthDist("fixed", (("value", _number("value", kind, float)),))
    if kind not in LENGTH_KINDS:
        raise TraceError(f"synthetic spec: unknown length distribution {kind!r} (known: {', '.join(LENGTH_KINDS)})")
    params = []
    for item in rest:
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in LENGTH_KINDS[kind]:
            raise TraceError(
                f"synthetic spec: {kind} takes {', '.join(k + '=' for k in LENGTH_KINDS[kind]) or 'no parameters'}; got {item!r}"
            )
        params.append((key, _number(f"{kind}:{key}", value.strip(), float)))
    return LengthDist(kind, tuple(params))


def _validate(spec: SyntheticSpec) -> None:
    if not 1 <= spec.n <= MAX_REQUESTS:
        raise TraceError(f"synthetic spec: n={spec.n} must be between 1 and {MAX_REQUESTS}")
    if not MIN_RATE <= spec.rate <= MAX_RATE:  # NaN fails too
        raise TraceError(f"synthetic spec: rate={spec.rate} must be between {MIN_RATE:g} and {MAX_RATE:g} requests/s")
    if spec.arrival not in ARRIVALS:
        raise TraceError(f"synthetic spec: arrival={spec.arrival!r} (known: {', '.join(ARRIVALS)})")
    if not 1e-3 <= spec.cv <= 1e3:
        raise TraceError(f"synthetic spec: cv={spec.cv} must be between 0.001 and 1000")
    if spec.max_len is not None and not 1 <= spec.max_len <= limits.MAX_TOKENS:
        raise TraceError(f"synthetic spec: max_len={spec.max_len} must be between 1 and {limits.MAX_TOKENS:,}")
    if not 0 <= spec.seed <= limits.MAX_SEED:
        raise TraceError(f"synthetic spec: seed={spec.seed} must be between 0 and {limits.MAX_SEED:,}")
    for name, dist in (("input", spec.input), ("output", spec.output)):
        p = dict(dist.params)
        too_big = [k for k, v in p.items() if k not in ("sigma", "mu", "a") and not v <= limits.MAX_TOKENS]
        if too_big or not p.get("sigma", 1.0) <= 10 or not abs(p.get("mu", 0.0)) <= 30:
            raise TraceError(f"synthetic spec: {name}={dist.text()}: lengths must stay below {limits.MAX_TOKENS:,} tokens "
                             "(sigma <= 10, |mu| <= 30)")
        ok = {
            "fixed": lambda p: p.get("value", 0) >= 1,
            "uniform": lambda p: 1 <= p.get("lo", 0) <= p.get("hi", 0),
            "lognormal": lambda p: p.get("mean", 0) > 0 and p.get("sigma", 1.0) > 0,
            "zipf": lambda p: 0 < p.get("a", 1.2) <= 100 and 1 <= p.get("lo", 1) <= p.get("hi", 4096) <= 10_000_000,
            "resample": lambda p: True,
        }[dist.kind](p)
        if not ok:
            raise TraceError(f"synthetic spec: {name}={dist.text()} has out-of-range parameters (docs/TRACES.md)")


def _arrivals(rng: np.random.Generator, n: int, rate: float, kind: str, cv: float) -> np.ndarray:
    if kind == "constant":
        gaps = np.full(n - 1, 1.0 / rate)
    elif kind == "poisson" or (kind == "gamma" and cv == 1.0):
        gaps = rng.exponential(1.0 / rate, size=n - 1)
    else:  # gamma gaps: shape 1/cv^2 keeps the mean gap at 1/rate and sets the gap CV to cv
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n - 1)
    arrival = np.empty(n)
    arrival[0] = 0.0
    np.cumsum(gaps, out=arrival[1:])
    return arrival


def _lengths(rng: np.random.Generator, spec: SyntheticSpec, source: Trace | None) -> tuple[np.ndarray, np.ndarray]:
    """Both resampled: draw (input, output) PAIRS from the source, so their correlation survives."""
    kinds = (spec.input.kind, spec.output.kind)
    if "resample" in kinds:
        if source is None:
            raise TraceError("synthetic spec: input/output=resample needs a source trace to resample from")
        _, src_in, src_out = source.arrays()
        joint = rng.integers(0, len(src_in), size=spec.n) if kinds == ("resample", "resample") else None
    columns = []
    for dist, src in ((spec.input, "in"), (spec.output, "out")):
        if dist.kind == "resample":
            idx = joint if joint is not None else rng.integers(0, len(src_in), size=spec.n)
            values = (src_in if src == "in" else src_out)[idx]
        else:
            values = dist.sample(rng, spec.n)
        # a long-tailed draw never passes MAX_TOKENS (the loaders' bound) nor overflows int64
        columns.append(np.clip(np.rint(values), 1, min(spec.max_len or limits.MAX_TOKENS, limits.MAX_TOKENS)).astype(np.int64))
    return columns[0], columns[1]


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))

"""GPU-hour prices for cost per million output tokens: editable defaults, each with its source.

Cloud prices move monthly and differ 2-3x between providers; the defaults are on-demand list prices
per GPU from public price surveys, kept in each GPU's registry entry (models/gpus.py; docs/PLAN.md
repeats the table). Override them with
`--price h100-sxm=2.49,...` or the Plan page's price fields. A GPU without a price gets no cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from models.gpus import GPUS, get_gpu


@dataclass(frozen=True)
class Price:
    usd_per_gpu_hour: float
    source: str


def default_price(gpu: str) -> Price | None:
    """The GPU entry's own price (models/gpus.py: one entry holds a GPU's every fact), or None."""
    spec = GPUS.get(gpu)
    if spec is None or spec.usd_per_gpu_hour is None:
        return None
    return Price(spec.usd_per_gpu_hour, spec.price_source)


def parse_prices(text: str | None) -> dict[str, float]:
    """"GPU=USD_PER_HOUR,..." -> {catalog name: price}; GPU names resolve like --gpu (aliases ok)."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        try:
            usd = float(value)
        except ValueError:
            usd = math.nan
        if not sep or not (usd >= 0 and math.isfinite(usd)):
            raise ValueError(f"--price: {part.strip()!r} is not GPU=USD_PER_HOUR (a number >= 0)")
        out[get_gpu(name.strip()).name] = usd
    return out


def price_for(gpu: str, overrides: dict[str, float]) -> float | None:
    """USD per GPU-hour: the override, else the default, else None (no cost shown)."""
    if gpu in overrides:
        return overrides[gpu]
    known = default_price(gpu)
    return known.usd_per_gpu_hour if known is not None else None


def cost_per_mtok(usd_per_gpu_hour: float | None, tok_s_per_gpu: float) -> float | None:
    """USD per million output tokens = price / (tokens per GPU-hour) x 1e6."""
    if usd_per_gpu_hour is None or not tok_s_per_gpu > 0:
        return None
    return usd_per_gpu_hour / (tok_s_per_gpu * 3600.0) * 1e6

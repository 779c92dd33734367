"""KV tier sizes as a Plan dimension (issue 26): the Plan page's comma lists of GiB become grid
entries, priced beside the GPU-hour by sim/plan/tier_prices.py.

Tiers reuse prefix-cached blocks (sim/run/tier_setup.py refuses them without prefix caching), so a
sweep with any tier turns prefix caching on for every configuration, the size-0 rows included: the
comparison is then with and without the tier, not with and without prefix caching.
"""

from __future__ import annotations

from typing import Any

from sim.plan.grid import parse_grid
from sim.scenario import TIER_MAX_GIB as MAX_TIER_GIB
from sim.scenario import ScenarioError

# Scenario field -> what the Plan page calls it (the remote store is priced by whoever runs it: not offered)
TIER_FIELDS = {"cpu_tier_gib": "CPU tier sizes (GiB per replica)", "nvme_tier_gib": "NVMe tier sizes (GiB per node)"}
MAX_TIER_VALUES = 6


def tier_grid(texts: dict[str, str]) -> dict[str, list[Any]]:
    """Grid entries from comma lists of GiB per tier field ("0, 500, 1000"); {} when every size is 0
    or empty. Bad input: one ScenarioError line naming the field as the page labels it."""
    grid: dict[str, list[Any]] = {}
    for field, text in texts.items():
        label = TIER_FIELDS[field]
        if not text.strip():
            continue
        try:
            values = parse_grid({field: text})[field]
        except ScenarioError:
            raise ScenarioError(f"{label}: {text.strip()!r} is not a comma list of numbers") from None
        bad = [v for v in values if not 0.0 <= v <= MAX_TIER_GIB]
        if bad:
            raise ScenarioError(f"{label}: {bad[0]:g} is outside 0 to {MAX_TIER_GIB:g} GiB")
        if len(values) > MAX_TIER_VALUES:
            raise ScenarioError(f"{label}: {len(values)} sizes (at most {MAX_TIER_VALUES})")
        grid[field] = values
    if not any(v > 0 for values in grid.values() for v in values):
        return {}
    return {**grid, "prefix_caching": [True]}


def swept_tier_fields(grid: dict[str, list[Any]]) -> tuple[str, ...]:
    """The tier fields a row must show (more than one size tried)."""
    return tuple(f for f in TIER_FIELDS if len(grid.get(f, ())) > 1)

"""Summary keys of a run with KV tiers (docs/METRICS.md, "KV tiers"): hits per tier, bytes moved per
tier and direction, link utilisation, load delays, tier occupancy, and TTFT split into queue, load
and prefill. Absent from runs without tiers (their summaries stay as they were)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sim.core.tiers.kinds import LOWER_TIERS
from sim.run.distribution import distribution
from sim.run.tier_setup import TierFleet


def ttft_split(requests: pd.DataFrame, load_s: dict[int, float]) -> dict[str, dict[str, float | None]]:
    """TTFT of completed requests as queue (arrival -> admission) + load (admission -> KV loaded from a
    lower tier, 0 without a load) + prefill (the rest: prefill steps until the first token)."""
    done = requests["finish_s"].notna().to_numpy()
    ids = requests["req_id"].to_numpy()[done]
    queue = requests["queue_s"].to_numpy()[done]
    load = np.array([load_s.get(int(r), 0.0) for r in ids], dtype=float)
    prefill = requests["ttft_s"].to_numpy()[done] - queue - load
    return {"queue": distribution(queue, count=True), "load": distribution(load, count=True),
            "prefill": distribution(prefill, count=True)}


def tier_summary(fleet: TierFleet, requests: pd.DataFrame, *, prefix_queries: int, prefix_hits: int,
                 duration_s: float, occupancy: list[tuple[float, dict[str, int]]]) -> dict[str, Any]:
    q = prefix_queries or 1
    hit_tokens = {name: sum(st.hit_tokens.get(name, 0) for st in fleet.stacks) for name in LOWER_TIERS}
    rates = {"gpu": prefix_hits / q, **{name: hit_tokens[name] / q for name in LOWER_TIERS}}
    rates["total"] = sum(rates.values())
    moved = {name: {"load": 0, "store": 0} for name in LOWER_TIERS}
    load_s: dict[int, float] = {}
    for st in fleet.stacks:
        for name, parts in st.bytes_moved.items():
            for direction, nbytes in parts.items():
                moved[name][direction] = moved[name].get(direction, 0) + nbytes
        load_s.update(st.load_delays)
    chunk_bytes = fleet.stacks[0].k * fleet.stacks[0].bytes_per_block if fleet.stacks else 0
    return {
        "tier_hit_rate": rates,
        "tier_hit_tokens": hit_tokens,
        "tier_bytes_moved": moved,
        "tier_link_utilisation": {name: link.utilisation(duration_s) for name, link in fleet.links.items()},
        "tier_load_delay_s": distribution(np.array(list(load_s.values()), dtype=float), count=True),
        "tier_occupancy": {name: {"capacity_bytes": lru.capacity_chunks * chunk_bytes, "peak_bytes": lru.peak * chunk_bytes,
                                  "end_bytes": len(lru) * chunk_bytes} for name, lru in fleet.tiers.items()},
        "tier_occupancy_series": {"t_s": [t for t, _ in occupancy],
                                  **{name: [occ.get(name, 0) for _, occ in occupancy] for name in fleet.tiers}},
        "ttft_split_s": ttft_split(requests, load_s),
    }

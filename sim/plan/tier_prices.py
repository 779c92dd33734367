"""What KV tiers add to a deployment's price (issue 26): DRAM and NVMe in USD per GB-month beside
the GPU-hour prices (sim/plan/prices.py), so a Plan sweep over tier sizes compares cost per token
with the memory it buys.

Defaults: part prices amortised over AMORTISE_MONTHS (a server's usual 3-year depreciation), both
from price reports of the 2025-2026 memory shortage, so they move fast (edit TIER_USD_PER_GB_MONTH;
there is no command-line override yet).
- cpu: DDR5 server RDIMM about $10 per GB (tuttotech.net, 2025-12-29, on TechPowerUp's report:
  "circa 10 dollari" per GB for standard DDR5 modules; a 4 TB RDIMM kit was nearly $19 per GB):
  $10 / 36 = $0.278 per GB-month;
- nvme: an enterprise TLC SSD of 30 TB at $9,000-11,000 in Q1 2026 (oscoo.com enterprise SSD buying
  guide 2026; $3,062 in Q2 2025), about $0.33 per GB: $0.33 / 36 = $0.0092 per GB-month.
The remote store is priced by whoever runs it: not included (say so where it matters).
"""

from __future__ import annotations

import math
from typing import Any

AMORTISE_MONTHS = 36
HOURS_PER_MONTH = 730.0
GB_PER_GIB = 2**30 / 1e9
GPUS_PER_NODE = 8
TIER_USD_PER_GB_MONTH = {"cpu": 10.0 / AMORTISE_MONTHS, "nvme": 0.33 / AMORTISE_MONTHS}


def tier_usd_per_gpu_hour(scenario: Any, gpus: int) -> float:
    """USD per GPU-hour the scenario's CPU tiers (one per replica) and NVMe tiers (one per node of 8
    GPUs) cost, spread over its `gpus`."""
    prices = TIER_USD_PER_GB_MONTH
    replicas = int(getattr(scenario, "replicas", 1))
    nodes = math.ceil(gpus / GPUS_PER_NODE) if gpus else 0
    gb = {"cpu": float(getattr(scenario, "cpu_tier_gib", 0.0) or 0.0) * GB_PER_GIB * replicas,
          "nvme": float(getattr(scenario, "nvme_tier_gib", 0.0) or 0.0) * GB_PER_GIB * nodes}
    monthly = sum(gb[name] * prices[name] for name in gb)
    return monthly / HOURS_PER_MONTH / gpus if gpus else 0.0

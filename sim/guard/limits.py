"""Bounds for every size and count that comes from outside: one table, so a limit is changed once.

Each bound is far above any real deployment and far below what would exhaust memory or time
(a count of 10**9 replicas is a typo, not a cluster). Messages quote these numbers.
"""

from __future__ import annotations

from models.safe_json import MAX_DEPTH as MAX_JSON_DEPTH  # noqa: F401 - untrusted JSON: configs, snapshots, profiles
from models.spec import CONFIG_LIMITS  # noqa: F401 - model config.json bounds live with the parser (models/ imports no sim/)

# Deployment and scheduler counts (Scenario, CLI flags, URL parameters).
MAX_TP = 64
MAX_PP = 64  # pipeline stages (sim capacity --pp); a model's layer count bounds it further
MAX_REPLICAS = 1024
# vLLM raises a hybrid Mamba model's attention block size until one layer's state fits a page
# (sim/run/deployment.py forced_block_size): 2,096 tokens for Nemotron-3-Nano, 8,208 for Nemotron-3-Ultra
MAX_BLOCK_SIZE = 1 << 15
MAX_NUM_SEQS = 65_536
MAX_BATCHED_TOKENS = 1 << 24
MAX_MODEL_LEN = 1 << 24
MAX_KV_HEADS = 4096
MAX_STATIC_BATCH = 65_536
MAX_GIB = 1_000_000.0  # a KV budget or swap space of a petabyte is a typo
MIN_SPEEDUP, MAX_SPEEDUP = 0.01, 1000.0  # the load dial (Scenario.speedup): 100x slower to 1000x faster
MAX_SEED = 2**32 - 1  # numpy seeds are non-negative; 32 bits keep them portable

# Traces.
MAX_TOKENS = 1_000_000_000  # per request; larger is corrupt data, not a prompt
MAX_HASH = 2**64 - 1  # prefix hash ids are unsigned 64-bit; negatives down to -2**63 are accepted too
MIN_HASH = -(2**63)
MAX_SYNTHETIC_REQUESTS = 50_000_000  # the CLI's cap (a 50M-row trace is about 1.2 GB in memory)
MAX_DASHBOARD_REQUESTS = 2_000_000  # what a page (or a crafted URL) may generate on the server
MAX_UPLOAD_ROWS = 2_000_000  # rows kept from an uploaded trace; the rest are dropped, and it says so

# GPU runs from the dashboard.
MAX_PAGE_GPU_REQUESTS = 2_000
MAX_GPU_STEPS = 10_000_000

# Work a dashboard page starts without asking (ui/work_budget.py): request-steps, i.e. each request
# counted once per step it lives through (sim.guard.work.work_estimate). Measured on the shared 2-core
# EPYC VM (commit of issue 29, `sim run`, qwen2.5-7b on rtx-4090, sharegpt-like synthetic at 50 req/s):
# 20,000 requests = 6.72M output tokens in 8.4 s CPU, 100,000 = 33.7M in 38.9 s CPU, so ~1.15 s per
# million request-steps. 25M is about half a minute of one core; the bundled samples and the Azure
# conversation trace (19,366 requests) stay under it, a 2M-request synthetic link (~670M) does not.
PAGE_WORK_BUDGET = 25_000_000
SECONDS_PER_MILLION_STEPS = 1.15

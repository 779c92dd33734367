"""Allocators by name, built from a resolved KV layout: one place the simulator and the GPU backend agree on.

Adding an allocator = one file subclassing sim.core.kv.base.KVAllocator (the
sim.core.interfaces.Allocator protocol with its defaults; the compiled scheduler calls it natively) + one line in ALLOCATORS
(or `register_allocator` from outside); the CLI, the Scenario checks and the form then offer it.
A factory takes (layout, num_blocks, bytes_per_token, prefix_block_size): `KVLayout` is the part of
a scenario the pool's shape depends on (block size, prefix caching, placement; the KV dtype and TP
for per-group pages), resolved by sim.run.deployment.kv_layout, so the core never needs the Scenario.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from models.registry import Registry
from sim.core.kv.base import KVAllocator
from sim.core.kv.contiguous import ContiguousAllocator
from sim.core.kv.contiguous_groups import GroupedContiguousAllocator
from sim.core.kv.group_managers import UNBOUNDED, GroupManager, align_mode, make_managers
from sim.core.kv.hybrid import HybridPagedAllocator
from sim.core.kv.hybrid_prefix import HybridPrefixAllocator
from sim.core.kv.paged import PagedAllocator

if TYPE_CHECKING:
    from models.kv_groups import KVGroup


@dataclass(frozen=True)
class KVLayout:
    """What a KV pool's shape depends on, resolved from a scenario (sim.run.deployment.kv_layout)."""

    allocator: str = "paged"  # a name in ALLOCATORS
    block_size: int = 16  # token slots per block
    prefix_caching: bool = False
    placement: str = "first-fit"  # contiguous only
    kv_dtype: str = "bf16"  # per-group page sizes
    tp: int = 1
    retention_interval: int | None = 0  # sliding and state groups with prefix caching (vLLM's, sliding_retention.py)
    # vLLM's max_in_flight_tokens (models/kv_groups.py): sets the per-request admission cap of
    # sliding-window and chunked groups (sim/core/kv/hybrid.py); None: no cap, every block counted
    in_flight_tokens: int | None = None
    max_model_len: int = UNBOUNDED  # the cap's other bound


AllocatorFactory = Callable[[KVLayout, int, int, "int | None"], KVAllocator]
# (layout, one manager per KV group, pool pages, page bytes, prefix_block_size) -> allocator
GroupAllocatorFactory = Callable[[KVLayout, list[GroupManager], int, int, "int | None"], KVAllocator]


def _paged(layout: KVLayout, num_blocks: int, bytes_per_token: int, prefix_block_size: int | None) -> KVAllocator:
    return PagedAllocator(
        num_blocks,
        layout.block_size,
        bytes_per_token,
        prefix_caching=layout.prefix_caching,
        prefix_block_size=prefix_block_size,
    )


def _contiguous(layout: KVLayout, num_blocks: int, bytes_per_token: int, prefix_block_size: int | None) -> KVAllocator:
    # Contiguous regions cannot share blocks, so prefix caching does not apply to them.
    return ContiguousAllocator(num_blocks, layout.block_size, bytes_per_token, placement=layout.placement)


def _paged_groups(layout: KVLayout, managers: list[GroupManager], num_pages: int, page_bytes: int,
                  prefix_block_size: int | None) -> KVAllocator:
    if layout.prefix_caching:  # state groups in vLLM's align mode (the mode vLLM sets with prefix caching)
        return HybridPrefixAllocator([align_mode(m) for m in managers], num_pages, layout.block_size, page_bytes,
                                     prefix_block_size, layout.retention_interval,
                                     in_flight_tokens=layout.in_flight_tokens, max_model_len=layout.max_model_len)
    return HybridPagedAllocator(managers, num_pages, layout.block_size, page_bytes,
                                in_flight_tokens=layout.in_flight_tokens, max_model_len=layout.max_model_len)


def _contiguous_groups(layout: KVLayout, managers: list[GroupManager], num_pages: int, page_bytes: int,
                       prefix_block_size: int | None) -> KVAllocator:
    return GroupedContiguousAllocator(managers, num_pages, layout.block_size, page_bytes, layout.placement)


@dataclass(frozen=True)
class AllocatorKind:
    """One allocator: its factory, its factory for models with several KV groups (None: such
    models are refused), and whether the contiguous knobs (reserve, placement) apply."""

    name: str
    build: AllocatorFactory
    description: str = ""
    reserves_up_front: bool = False  # True: the reserve policy and placement knobs apply
    build_groups: GroupAllocatorFactory | None = None


ALLOCATORS: Registry[AllocatorKind] = Registry("allocator", ((k.name, k) for k in (
    AllocatorKind("paged", _paged, "fixed-size blocks on demand (vLLM's PagedAttention); prefix caching",
                  build_groups=_paged_groups),
    AllocatorKind("contiguous", _contiguous, "one contiguous run per request, reserved at admission",
                  reserves_up_front=True, build_groups=_contiguous_groups),
)))


def register_allocator(kind: AllocatorKind) -> AllocatorKind:
    return ALLOCATORS.register(kind.name, kind)


def make_allocator(
    layout: KVLayout, num_blocks: int, bytes_per_token: int, *, prefix_block_size: int | None = None
) -> KVAllocator:
    """The allocator `layout.allocator` names, over `num_blocks` blocks of layout.block_size.

    prefix_block_size: tokens per prefix hash id in the trace (Trace.prefix_block_size, e.g. 512
    for Mooncake); None means the hashes were taken at the KV block size.
    """
    kind = ALLOCATORS.lookup(layout.allocator)
    return kind.build(layout, int(num_blocks), int(bytes_per_token), prefix_block_size)


def blocks_for_budget(kv_budget_bytes: int, block_size: int, bytes_per_token: int) -> int:
    """Whole blocks that fit a KV byte budget (what is left over is below one block)."""
    if bytes_per_token <= 0 or block_size <= 0:
        raise ValueError("blocks_for_budget: block_size and bytes_per_token must be positive")
    return int(kv_budget_bytes) // (block_size * bytes_per_token)


def needs_group_pools(groups: tuple[KVGroup, ...]) -> bool:
    """True when a model's layers keep different things (several KV groups, or a windowed or
    state group): its paged KV needs one manager per group. One full or MLA group does not."""
    return len(groups) > 1 or groups[0].kind not in ("full", "mla") or groups[0].cap is not None


def make_group_allocator(layout: KVLayout, groups: tuple[KVGroup, ...], kv_budget_bytes: int,
                         prefix_block_size: int | None = None) -> KVAllocator:
    """The layout's allocator for a model with several KV groups, over a replica's KV budget
    (bytes, all its TP ranks): one manager per group over a shared pool of equal pages (paged:
    sim/core/kv/hybrid.py, with prefix caching hybrid_prefix.py; contiguous: contiguous_groups.py).
    prefix_block_size: as for make_allocator. Errors are one line starting "scenario:"."""
    kind = ALLOCATORS.lookup(layout.allocator)
    if kind.build_groups is None:
        raise ValueError(f"scenario: allocator={layout.allocator!r} has no per-group form: models with several "
                         f"KV groups ({', '.join(g.label() for g in groups)}) cannot use it")
    bs, dtype, tp = layout.block_size, layout.kv_dtype, layout.tp
    page, managers = make_managers(groups, bs, dtype, tp)
    try:
        return kind.build_groups(layout, managers, int(kv_budget_bytes) // page, page, prefix_block_size)
    except ValueError as exc:
        raise ValueError(f"scenario: {exc}") from None

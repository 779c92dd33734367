"""Contiguous reservations for models with several KV groups: each group reserves what it keeps.

The flat contiguous allocator (sim/core/kv/contiguous.py) reserves R tokens of every layer. A model
whose layers keep different things needs less: a full-attention (or MLA) group still R tokens, a
sliding-window group only min(R, window) tokens (a ring buffer: positions wrap around), a chunked
group min(R, chunk), a state group one fixed slot. So a request's run is, in pool pages of
`page_bytes` (the same pages as sim/core/kv/hybrid.py: every group's block is whole pages),

    pages(R) = sum over groups of pages_per_block(g) x contiguous_blocks_g(R)

and it may grow to the smallest token_cap of its groups (a full group: its blocks x block_size; a
ring that holds the whole window: unbounded). Placement (first-fit, best-fit, buddy) works on pages
unchanged; buddy's rounding is its own part of the per-group breakdown, "(placement rounding)".

Accounting per group and request with n written tokens, final length f (at most the cap) and
h = the group's reserved bytes: token_states = kept(n) bytes (a state: its state bytes);
reserved = kept(f) - kept(n) when positive (slots it will still write); internal_frag = h -
max(kept(n), kept(f)). The groups' held bytes plus the placement's free pages make the pool.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.core.kv.base import AllocationError
from sim.core.kv.contiguous import ContiguousAllocator
from sim.core.kv.group_managers import GroupManager
from sim.core.kv.paged import grown
from sim.core.step_types import KVBreakdown, Retention

ROUNDING = "(placement rounding)"


class GroupedContiguousAllocator(ContiguousAllocator):
    """Contiguous runs of pages sized per KV group (see the module docstring)."""

    def __init__(self, managers: Sequence[GroupManager], num_pages: int, block_size: int, page_bytes: int,
                 placement: str = "first-fit") -> None:
        if page_bytes < 1 or not managers:
            raise ValueError(f"grouped contiguous allocator: bad sizes ({page_bytes=}, {len(managers)} groups)")
        super().__init__(num_pages, block_size, max(page_bytes // block_size, 1), placement)
        self.managers = list(managers)
        self.page_bytes = int(page_bytes)
        self._res = np.zeros(len(self._active), dtype=np.int64)  # tokens reserved (before group sizing)
        self._fin = np.zeros(len(self._active), dtype=np.int64)  # final tokens

    @property
    def capacity_bytes(self) -> int:
        return self.num_blocks * self.page_bytes

    # --- sizing --------------------------------------------------------------------------------
    def _blocks_for(self, num_tokens: int, reserve_tokens: int) -> int:
        tokens = max(int(reserve_tokens), int(num_tokens), 1)
        return sum(m.pages * int(m.contiguous_blocks(tokens)) for m in self.managers)

    def allocate(self, req_id: int, num_tokens: int, final_tokens: int, reserve_tokens: int,
                 prefix_hashes: Sequence[int] | None = None, *, retention: Retention | None = None,
                 computed_tokens: int = 0) -> int:
        """Reserve max(reserve_tokens, num_tokens) tokens, each group what it keeps of them (a
        window's ring either way: computed_tokens changes nothing)."""
        if req_id >= 0:
            self._ensure(req_id)
            if not self._active[req_id]:
                self._res[req_id] = max(int(reserve_tokens), int(num_tokens), 1)
                self._fin[req_id] = final_tokens
        return super().allocate(req_id, num_tokens, final_tokens, reserve_tokens, prefix_hashes)

    def _place(self, req_id: int, start: int, held: int, num_tokens: int, final_tokens: int) -> None:
        super()._place(req_id, start, held, num_tokens, final_tokens)
        tokens = int(self._res[req_id])
        self._cap[req_id] = min(int(m.token_cap(m.contiguous_blocks(tokens))) for m in self.managers)

    # --- books ------------------------------------------------------------------------------------
    def block_table(self, req_id: int) -> list[int]:
        raise AllocationError("the per-group contiguous allocator's runs are pages of several layer groups: "
                              "the GPU backend does not run models with several KV groups")

    def group_breakdown(self) -> dict[str, dict[str, int]]:
        """Per group {token_states, reserved, internal_frag, held} in bytes (module docstring)."""
        act = np.flatnonzero(self._active)
        n, res = self._ntok[act], self._res[act]
        fin = np.minimum(np.maximum(self._fin[act], n), self._cap[act])
        out: dict[str, dict[str, int]] = {}
        group_pages = 0
        for m in self.managers:
            blocks = m.contiguous_blocks(res)
            held = blocks * (m.pages * self.page_bytes)
            group_pages += int(np.add.reduce(blocks)) * m.pages
            if m.kind == "state":
                written = will = blocks * m.state_bytes
            else:
                written, will = m.kept(n) * m.bytes_per_token, m.kept(fin) * m.bytes_per_token
            top = np.maximum(written, will)
            out[m.label] = {"token_states": int(np.add.reduce(written)), "reserved": int(np.add.reduce(top - written)),
                            "internal_frag": int(np.add.reduce(held - top)), "held": int(np.add.reduce(held))}
        rounding = (int(np.add.reduce(self._held[act])) - group_pages) * self.page_bytes
        if rounding:
            out[ROUNDING] = {"token_states": 0, "reserved": 0, "internal_frag": rounding, "held": rounding}
        return out

    def breakdown(self, waiting_reserve_tokens: Sequence[int] = ()) -> KVBreakdown:
        groups = self.group_breakdown().values()
        external = 0
        if len(waiting_reserve_tokens):
            smallest = self._blocks_for(0, int(np.min(waiting_reserve_tokens)))
            external = self.placement.blocks_in_holes_smaller_than(smallest)
        return KVBreakdown(
            token_states=sum(g["token_states"] for g in groups), reserved=sum(g["reserved"] for g in groups),
            internal_frag=sum(g["internal_frag"] for g in groups), external_frag=external * self.page_bytes,
            free=(self.placement.free_blocks - external) * self.page_bytes)

    def check_invariants(self) -> None:
        super().check_invariants()
        held = sum(g["held"] for g in self.group_breakdown().values())
        if held + self.placement.free_blocks * self.page_bytes != self.capacity_bytes:
            raise AssertionError("grouped contiguous allocator: groups + free != the pool")
        act = np.flatnonzero(self._active)
        if np.any(self._ntok[act] > self._cap[act]):
            raise AssertionError("grouped contiguous allocator: a request outgrew its reservation")

    def _ensure(self, req_id: int) -> None:
        super()._ensure(req_id)
        if len(self._res) < len(self._active):
            self._res, self._fin = grown(self._res, len(self._active)), grown(self._fin, len(self._active))

"""The state groups' books in vLLM 0.32's Mamba 'align' mode, for the hybrid prefix allocator
(sim/core/kv/hybrid_prefix.py; rules in sim/core/kv/mamba_align.py).

A state group's table is cdiv(tokens, block) long with -1 (vLLM's null block) except two entries:
the running state's block (`first`, (computed - 1) // block) and the step's last block (end - 1).
A step first releases the state blocks before the running one, then takes the block its last
token falls in. A released state block parks (cached, evictable) if it was keyed, else it is freed
clean; a state block is keyed only when a step ends on a boundary vLLM's retention keeps
(`state_block_keyed`: the prompt's replay boundary, the shared-prefix junction).

A state keyed in a step is no hit for another request until the next step (vLLM's
`MambaManager.cached_blocks_this_step`: `get_num_blocks_to_allocate` answers "pool full" for a
hit ending on it, so the waiting queue's head waits). vLLM also re-registers a request's
replay-boundary state in every step whose cacheable tokens (the step's end floored to a block)
end on it while the request still holds it (`_cache_partial_tail_block`), so that state stays
unusable through the step after it was computed, or the step a hit on it resumes from. `_hot`
holds those keys; the scheduler clears it once a step is scheduled (`end_step`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.core.kv.block_refs import BlockRefs
from sim.core.kv.group_managers import GroupManager
from sim.core.kv.mamba_align import checkpoint_position, state_block_keyed
from sim.core.kv.run_cache import RunPrefixCache


class AlignStateBooks:
    """State-group moves for HybridPrefixAllocator (a mixin: the attributes below are its books)."""

    managers: list[GroupManager]
    block_size: int
    cache: RunPrefixCache
    _gapped: list[bool]
    _first: list[np.ndarray]
    _end: list[np.ndarray]
    _ntok: np.ndarray
    _tables: list[dict[int, list[int]]]
    _blocks: BlockRefs
    _shared: list[int]
    _free_pages: int
    _parked_pages: int
    _gkeys: dict[int, list[list[int]]]
    _keyed_state: set[int]
    _prompt: dict[int, int]
    _junction: dict[int, int]
    _hot: set[int]  # state keys cached in the step being scheduled (vLLM's cached_blocks_this_step)
    retention_interval: int | None

    def _take(self, g: int, count: int = 1) -> list[int]:
        raise NotImplementedError

    def _state_moves(self, ids: np.ndarray, firsts: list, ends: list) -> list[tuple[int, int, int, int]]:
        """(group, request, new first, new end) of every state group whose books change."""
        out = []
        for g, gapped in enumerate(self._gapped):
            if not gapped:
                continue
            first, end = self._first[g], self._end[g]
            for k, r in enumerate(ids.tolist()):
                f1, e1 = int(firsts[g][k]), int(ends[g][k])
                if f1 != int(first[r]) or e1 != int(end[r]):
                    out.append((g, r, f1, e1))
        return out

    def _finish_states(self, states: list[tuple[int, int, int, int]], ids: np.ndarray, new: np.ndarray) -> None:
        """After the other groups' passes: take the state blocks the new books hold, then key the
        states the step ends on (the requests' token counts not yet moved to `new`)."""
        for g, r, f1, e1 in states:
            self._grow_state(g, r, f1, e1)
        for r, n1 in zip(ids.tolist(), new.tolist(), strict=True):
            self._key_state(r, int(self._ntok[r]), int(n1))

    def _state_held(self, g: int, r: int) -> list[int]:
        """Indices of the state blocks request r holds in group g (its first and last), descending."""
        table, f, e = self._tables[g][r], int(self._first[g][r]), int(self._end[g][r])
        return [i for i in sorted({f, e - 1}, reverse=True) if 0 <= i < len(table) and table[i] >= 0]

    def _drop_state(self, g: int, r: int, f1: int) -> None:
        """A step's start: release the state blocks before the running one (`remove_skipped_blocks`)."""
        self._release_state(g, r, [i for i in self._state_held(g, r) if i < f1])

    def _grow_state(self, g: int, r: int, f1: int, e1: int) -> None:
        """Take the blocks the new books hold that the table lacks (the step's last block; after a
        booked decode run, possibly the running one too): nulls between."""
        table = self._tables[g][r]
        table.extend([-1] * (e1 - len(table)))
        for i in sorted({f1, e1 - 1}):
            if table[i] < 0:
                table[i] = self._take(g, 1)[0]
        self._first[g][r], self._end[g][r] = f1, e1

    def _release_state(self, g: int, r: int, indices: Sequence[int]) -> None:
        """Drop one reference to request r's state blocks at `indices`: a shared one stays in use; a
        keyed one parks (cached, evictable); an unkeyed one is freed clean (vLLM frees it to the
        front of its free queue)."""
        pages, table = self.managers[g].pages, self._tables[g][r]
        nodes = self._gkeys[r][g] if r in self._gkeys else []
        for i in indices:
            b = table[i]
            table[i] = -1
            if not self._blocks.release_one(b):  # shared: its other users keep it
                self._shared[g] -= 1
                continue
            self._free_pages += pages
            if b in self._keyed_state:
                self.cache.park([b], nodes, [i])
                self._parked_pages += pages

    def _key_state(self, r: int, computed: int, end_tokens: int) -> None:
        """Key the state block a step from `computed` to `end_tokens` tokens ends on, when vLLM's
        retention keeps it (mamba_align.state_block_keyed: a boundary, the replay one or the junction)."""
        gkeys = self._gkeys.get(r)
        if gkeys is None or end_tokens <= computed:
            return
        for g, gapped in enumerate(self._gapped):
            if not gapped:
                continue
            keys = gkeys[g]
            i = state_block_keyed(computed, end_tokens - computed, self.block_size, len(keys) * self.cache.per,
                                  self._prompt.get(r, 0), self._junction.get(r, 0), self.retention_interval)
            block = self._tables[g][r][i] if i is not None else -1
            if block >= 0 and block not in self._keyed_state:
                self.cache.register(keys, i, [block])  # type: ignore[arg-type]  # i is not None here
                self._keyed_state.add(block)
                self._hot.add(self.cache.keys_at(keys, [i])[0])  # type: ignore[list-item]
        self._reheat_replay_state(r, end_tokens)

    def _reheat_replay_state(self, r: int, end_tokens: int) -> None:
        """A step of r ending at `end_tokens` re-registers r's replay-boundary state when the end
        floored to a block is that boundary and r holds the keyed state there (vLLM's
        `_cache_partial_tail_block`): the state is 'cached this step' again."""
        boundary = checkpoint_position(self._prompt.get(r, 0), self.block_size)
        if boundary <= 0 or end_tokens // self.block_size * self.block_size != boundary:
            return
        i = boundary // self.block_size - 1
        for g, gapped in enumerate(self._gapped):
            table = self._tables[g][r]
            if gapped and i < len(table) and table[i] in self._keyed_state:
                self._hot.add(self.cache.keys_at(self._gkeys[r][g], [i])[0])

    def _state_hit_hot(self, hit_tokens: int, gkeys: list[list[int]]) -> bool:
        """Whether a hit of `hit_tokens` takes a state cached in this step (vLLM defers the request)."""
        i = hit_tokens // self.block_size - 1
        return i >= 0 and any(gapped and self.cache.keys_at(gkeys[g], [i])[0] in self._hot
                              for g, gapped in enumerate(self._gapped))

    def end_step(self) -> None:
        """The step is scheduled: states cached in it become hits for the next (vLLM clears
        `cached_blocks_this_step` when a step starts; nothing asks between steps)."""
        self._hot.clear()

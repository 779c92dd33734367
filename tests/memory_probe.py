"""Peak transient memory of a block of torch code, counted by construction (works on the meta device).

A TorchDispatchMode sees every op's outputs; a storage first seen as an op output and not owned by
a tensor that existed before is a new allocation; it is released when the last tensor we saw on it
is collected. No data is computed on meta, so sizes of real workloads (256 x 2,048-token contexts
of an 8B model) are checked without the memory.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class PeakProbe(TorchDispatchMode):
    def __init__(self, *existing: torch.Tensor) -> None:
        super().__init__()
        self.external = {t.untyped_storage()._cdata for t in existing}
        self.refs: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.live = self.peak = 0

    def _release(self, key: int) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            self.live -= self.sizes.pop(key)
            del self.refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            key = t.untyped_storage()._cdata
            if key in self.external:
                continue
            if key not in self.refs:
                self.refs[key] = 0
                self.sizes[key] = t.untyped_storage().nbytes()
                self.live += self.sizes[key]
                self.peak = max(self.peak, self.live)
            self.refs[key] += 1
            weakref.finalize(t, self._release, key)
        return out

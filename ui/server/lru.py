"""A least-recently-used cache bounded by bytes, not by entry count.

st.cache_data bounds entries only: 64 cached results of a million-request trace can hold gigabytes,
and nothing returns after a busy hour. Here every value carries its size (`size_of`), the total
stays under `max_bytes`, and the least recently used entries go first. A value larger than the
whole bound is returned but not kept. Thread-safe: Streamlit runs each session on its own thread.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pandas as pd

V = TypeVar("V")


MiB = 1 << 20
MAX_CACHE_MIB = 1 << 20


def cache_bytes_from_env(name: str, default_mib: float, env: dict[str, str] | None = None) -> int:
    """A cache bound set in MiB by an environment variable; a bad value is a one-line ValueError."""
    text = (os.environ if env is None else env).get(name, "").strip() or str(default_mib)
    try:
        mib = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a number of MiB") from None
    if not 1 <= mib <= MAX_CACHE_MIB:
        raise ValueError(f"{name}={text}: must be between 1 and {MAX_CACHE_MIB} MiB")
    return int(mib * MiB)


def size_of(value: Any) -> int:
    """Bytes a cached value holds: DataFrames deep, containers and dataclasses through their fields."""
    return _size(value, set())


def _size(value: Any, seen: set[int]) -> int:
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(deep=True).sum())
    if isinstance(value, pd.Series):
        return int(value.memory_usage(deep=True))
    if isinstance(value, (bytes, bytearray, str)):
        return sys.getsizeof(value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(_size(k, seen) + _size(v, seen) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return sys.getsizeof(value) + sum(_size(v, seen) for v in value)
    fields = getattr(value, "__dict__", None)
    if fields is not None:
        return sys.getsizeof(value) + _size(fields, seen)
    return sys.getsizeof(value)


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int


class ByteLRU(Generic[V]):
    """get/put/get_or_make under one lock; sizes measured once, when a value is put."""

    def __init__(self, max_bytes: int, sizer: Callable[[Any], int] = size_of) -> None:
        if max_bytes <= 0:
            raise ValueError(f"cache bound must be > 0 bytes, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._sizer = sizer
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self._misses += 1
                return None
            self._items.move_to_end(key)
            self._hits += 1
            return item[0]

    def put(self, key: Hashable, value: V) -> V:
        nbytes = self._sizer(value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if nbytes <= self.max_bytes:
                self._items[key] = (value, nbytes)
                self._bytes += nbytes
                while self._bytes > self.max_bytes:
                    _, (_, gone) = self._items.popitem(last=False)
                    self._bytes -= gone
        return value

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        """The cached value, or make() kept (two threads may both make it once; the last one is kept)."""
        value = self.get(key)
        return value if value is not None else self.put(key, make())

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(len(self._items), self._bytes, self.max_bytes, self._hits, self._misses)

"""Registry: the one place an option kind's names are defined (allocators, KV dtypes, GPUs, ...).

Every option kind has exactly one Registry instance, next to the code that implements the options.
CLI choices, Scenario validation, dashboard widgets and the docs tables (docs/OPTIONS.md) all read
the live registry, so registering an entry from outside (a plugin, a test) makes it appear
everywhere at once. A registry keeps insertion order: that is the order users see.

This module imports nothing from the project, so both models/ and sim/ can build on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar

T = TypeVar("T")
_BY_KIND: dict[str, Registry] = {}  # every registry, so entries added at run time can travel to workers


class UnknownOption(ValueError):
    """A name no registry entry has; the message is one line listing the known names."""


class Registry(Mapping[str, T]):
    """Name -> entry for one option kind, with a one-line error for unknown names.

    `describe` gives the text the docs tables and form help show for an entry (the entry's
    `description` attribute by default, else its str()).
    """

    def __init__(self, kind: str, entries: Iterable[tuple[str, T]] = ()) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        for name, entry in entries:
            self.register(name, entry)
        self._built_in = frozenset(self._entries)
        _BY_KIND[kind] = self

    def register(self, name: str, entry: T) -> T:
        """Add one option; a name that is taken is an error (unregister it first to replace it)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind}: a name must be a non-empty string, got {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> T:
        """Remove one option and return it (tests and plugins that clean up after themselves)."""
        return self._entries.pop(name)

    def lookup(self, name: str) -> T:
        """The entry called `name`, or UnknownOption naming the known choices."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownOption(f"unknown {self.kind} {name!r}: choose one of {self.choices_text()}") from None

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order (a snapshot: build widgets from it per call)."""
        return tuple(self._entries)

    def choices_text(self) -> str:
        return ", ".join(self._entries)

    def describe(self, name: str) -> str:
        entry = self.lookup(name)
        return str(getattr(entry, "description", entry))

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {self.choices_text()})"


def added_entries() -> list[tuple[str, str, object]]:
    """(kind, name, entry) of every option registered after its registry was built (plugins, tests).

    The dashboard's worker processes import the project afresh and so know only the built-in
    entries; the server sends these along with each run (apply_entries) so both sides agree."""
    return [(kind, name, entry) for kind, reg in _BY_KIND.items()
            for name, entry in reg._entries.items() if name not in reg._built_in]


def apply_entries(entries: Iterable[tuple[str, str, object]]) -> None:
    """Register what added_entries() listed in another process, skipping names already there."""
    for kind, name, entry in entries:
        registry = _BY_KIND.get(kind)
        if registry is not None and name not in registry:
            registry.register(name, entry)

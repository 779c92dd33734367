"""The simulator's hot modules, compiled to C with mypyc where they are current, else run as source.

Why: a replay's CPU is Python overhead spread over a few thousand lines (the engine loop, the
scheduler, the decode fast path, the paged allocator, the step-time tables): compiled as they are,
the same code takes ~30% less CPU with bit-identical results. The source stays the one definition;
`make native` (run by `make run` and `make test`) compiles the modules of NATIVE_MODULES in place
(sim/native/build.py) and records each source's hash in a manifest.

Python's import system prefers an extension module to the .py beside it, so a compiled module older
than its source would run old code silently. `use_compiled_where_current` (called by sim/__init__.py
before anything else is imported) guards that: unless every compiled module matches its source's
hash as built, the whole group runs from source (compiled modules call each other directly, so one
stale module makes the group stale) and one line on stderr says so. KVSIM_PURE_PYTHON=1 runs the
source always (tests compare the two; debuggers and profilers see Python lines).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

# One registry: the modules compiled, in dotted form. Each must compile under mypyc (its type hints
# are checked at run time there: an int annotation refuses a numpy integer).
NATIVE_MODULES: tuple[str, ...] = (
    "sim.timing.decode_timer",
    "sim.timing.measured_table",
    "sim.core.decode_run",
    "sim.core.scheduler",
    "sim.core.request",  # the request table: its columns read as native attributes
    "sim.core.kv.base",  # the allocators' base: the scheduler calls a pool through its vtable
    "sim.core.kv.paged",
    # the per-group pool with prefix caching (gpt-oss, llama-4) and its books; its state-group mixin
    # (hybrid_state.py) stays interpreted: mypyc takes a mixin only as a trait
    "sim.core.kv.hybrid",
    "sim.core.kv.hybrid_prefix",
    "sim.core.kv.block_refs",
    "sim.core.kv.run_cache",
    "sim.core.kv.run_lru",
    "sim.core.kv.run_peak",
    "sim.core.kv.sliding_retention",
    "sim.core.kv.group_managers",
    "sim.run.engine",
    "sim.run.metrics",
    # the single replica's step: the plan, its executor and the cost model's step time
    "sim.core.step_types",
    "sim.run.modelled_step",
    "sim.timing.cost_model",
    # The fleet (issue 25): its engine and live views, the routers (sim/fleet/pd.py's pools stay
    # interpreted subclasses of the compiled FleetSimulation: tests wrap their methods per instance).
    "sim.fleet.engine",
    "sim.fleet.live_view",
    "sim.fleet.fleet_metrics",
    "sim.core.routing.view",
    "sim.core.routing.prefill_book",
    "sim.core.routing.routers",
)
GROUP = "kvsim_native"  # mypyc's shared library: <GROUP>__mypyc<suffix> at the repository root
ROOT = Path(__file__).resolve().parent.parent.parent
MANIFEST = Path(__file__).resolve().parent / "manifest.json"
PURE_ENV = "KVSIM_PURE_PYTHON"


def source_path(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def extension_path(module: str) -> Path:
    """Where this interpreter would find the compiled module (its ABI's suffix)."""
    return source_path(module).with_suffix(importlib.machinery.EXTENSION_SUFFIXES[0])


def source_hash(module: str) -> str:
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def compiled_modules() -> list[str]:
    """The registered modules with a compiled extension beside their source."""
    return [m for m in NATIVE_MODULES if extension_path(m).exists()]


def stale_modules() -> list[str]:
    """Compiled modules present whose source changed since the build (or with no record of it)."""
    present = compiled_modules()
    if not present:
        return []
    try:
        built = json.loads(MANIFEST.read_text())["modules"]
    except (OSError, ValueError, KeyError):
        return present
    return [m for m in present if built.get(m) != source_hash(m)]


class _SourceFinder:
    """A meta-path finder that loads the listed modules from their .py, never their extension."""

    def __init__(self, modules: set[str]) -> None:
        self.modules = modules

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name not in self.modules:
            return None
        return importlib.util.spec_from_file_location(name, source_path(name))


def use_compiled_where_current() -> bool:
    """Arrange imports so that compiled modules run only when all are current; True if they do."""
    present = compiled_modules()
    if not present:
        return False
    pure = os.environ.get(PURE_ENV, "") not in ("", "0")
    stale = [] if pure else stale_modules()
    if not pure and not stale and len(present) == len(NATIVE_MODULES):
        return True
    if not pure:  # asked for the source: nothing to say
        names = ", ".join(stale or sorted(set(NATIVE_MODULES) - set(present)))
        print(f"kvsim: the compiled simulator is out of date ({names}); running it as Python source "
              "(slower): run `make native`", file=sys.stderr)
    sys.meta_path.insert(0, _SourceFinder(set(NATIVE_MODULES)))
    return False

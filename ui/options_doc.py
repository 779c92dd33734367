"""docs/OPTIONS.md, generated from the registries: every option kind and its names, one table each.

`python -m ui.options_doc > docs/OPTIONS.md` rewrites the file; tests/test_registries.py fails when
the file and the registries disagree, so the docs cannot drift from the code.
"""

from __future__ import annotations

from collections.abc import Iterable

from models.gpus import GPUS
from models.kv_dtypes import KV_DTYPES
from models.links import LINKS
from models.registry import Registry
from models.spec import list_catalog, load_spec
from models.weight_dtypes import WEIGHT_DTYPES
from sim.core.kv.placement import PLACEMENTS
from sim.core.kv.registry import ALLOCATORS
from sim.core.kv.reserve import RESERVE_POLICIES
from sim.core.preemption import PREEMPTION_MODES
from sim.core.routing.registry import ROUTERS
from sim.core.tiers.kinds import TIERS
from sim.core.tiers.policy import TIER_POLICIES
from sim.core.tiers.scope import TIER_SCOPES
from sim.fidelity.importers.registry import IMPORTERS
from sim.memory.pool_sources import KV_POOL_SOURCES
from sim.timing.sources import COST_SOURCES
from sim.trace.registry import FORMATS
from ui.pages import PAGES

HEADER = """# Options

Generated from the registries by `python -m ui.options_doc > docs/OPTIONS.md` (a test checks it is
current). Each option kind is defined once, in the file named under its heading; the CLI choices,
the Scenario checks, the dashboard form and this page all read that one registry.
"""


def _table(title: str, where: str, head: tuple[str, ...], rows: Iterable[tuple[object, ...]]) -> str:
    lines = [f"## {title}", "", f"Defined in `{where}`.", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _simple(title: str, where: str, registry: Registry) -> str:
    return _table(title, where, ("name", "what it is"), ((f"`{n}`", registry.describe(n)) for n in registry))


def render() -> str:
    parts = [
        HEADER,
        _simple("Allocators (`--allocator`)", "sim/core/kv/registry.py", ALLOCATORS),
        _simple("Reserve policies (`--reserve`, contiguous only)", "sim/core/kv/reserve.py", RESERVE_POLICIES),
        _simple("Placements (`--placement`, contiguous only)", "sim/core/kv/placement.py", PLACEMENTS),
        _simple("Preemption modes (`--preemption`)", "sim/core/preemption.py", PREEMPTION_MODES),
        _table("Routers (`--router`)", "sim/core/routing/registry.py", ("name", "reads replica state", "what it is, and its source"),
               ((f"`{n}`", "no" if k.state_free else "yes", k.description) for n, k in ROUTERS.items())),
        _simple("Step-time sources (`--cost-source`)", "sim/timing/sources.py", COST_SOURCES),
        _simple("KV pool sources (`--kv-pool`)", "sim/memory/pool_sources.py", KV_POOL_SOURCES),
        _table("KV dtypes (`--kv-dtype`)", "models/kv_dtypes.py", ("name", "bits", "scales", "what it is", "engines that offer it"),
               ((f"`{d.name}`", d.element_bits, d.scale_layout or "none", d.description, d.engines)
                for d in KV_DTYPES.values())),
        _table("Weight dtypes (`--weight-dtype`)", "models/weight_dtypes.py", ("name", "bytes per parameter", "what it is"),
               ((f"`{d.name}`", d.bytes_per_param, d.description) for d in WEIGHT_DTYPES.values())),
        _simple("Trace formats (`--format`)", "sim/trace/registry.py", FORMATS),
        _simple("Benchmark files (`sim validate FILE`, detected by content)", "sim/fidelity/importers/registry.py",
                IMPORTERS),
        _table("GPUs (`--gpu`)", "models/gpus.py", ("name", "GPU", "memory (GiB)", "HBM (GB/s)", "SMs", "compute capability"),
               ((f"`{g.name}`", g.label, f"{g.hbm_gib:.1f}", f"{g.hbm_bandwidth / 1e9:,.0f}", str(g.sm_count or "-"),
                 g.compute_capability or "-") for g in GPUS.values())),
        _table("Links (`--kv-link`)", "models/links.py", ("name", "GB/s per direction", "latency (us)", "scope", "source"),
               ((f"`{k.name}`", f"{k.bandwidth / 1e9:g}", f"{k.latency_s * 1e6:g}", k.scope, k.source) for k in LINKS.values())),
        _simple("KV tier policies (`--tier-policy`)", "sim/core/tiers/policy.py", TIER_POLICIES),
        _simple("CPU tier scope (`--cpu-tier-scope`)", "sim/core/tiers/scope.py", TIER_SCOPES),
        _table("KV tiers (`--cpu-tier-gib`, `--nvme-tier-gib`, `--remote-tier-gib`)", "sim/core/tiers/kinds.py",
               ("name", "medium", "one per", "source"),
               ((f"`{k.name}`", k.medium, k.scope, k.source) for k in TIERS.values())),
        _table("Models (`--model`)", "models/catalog/ (one JSON file per model)",
               ("name", "family", "layers", "kv heads", "context"),
               ((f"`{n}`", s.family, s.num_layers, s.num_kv_heads, f"{s.max_position_embeddings:,}")
                for n, s in ((n, load_spec(n)) for n in list_catalog()))),
        _table("Dashboard pages", "ui/pages.py", ("URL path", "title", "script", "what it shows"),
               ((f"`/{p.url_path}`", p.title, f"`{p.script}`", p.description) for p in PAGES.values())),
    ]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")

"""Compare presets, defined once: `sim compare --preset NAME` and the dashboard's Compare page both
read COMPARE_PRESETS. Each preset turns a base scenario into labelled variants; everything a preset
does not name is the base scenario's, so a preset changes one thing at a time.

The P/D preset's aggregated baseline keeps the base's router (it used to be least-outstanding in
the CLI and the base's router on the page): the P/D variants route their prefill pool with the
base's router and their decode pool with its --decode-router, so keeping the base's router for the
aggregated fleet makes the prefill:decode split the only difference. To compare against a
load-aware aggregated fleet, set the base's router (e.g. least-outstanding) and both sides get it.
The option sweeps read the registries, so a registered option joins them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from models.registry import Registry
from models.spec import load_spec
from sim.core.routing.pd_split import every_split
from sim.scenario import CHOICES, Scenario

Variants = dict[str, Scenario]


@dataclass(frozen=True)
class ComparePreset:
    name: str  # the CLI's --preset
    title: str  # the Compare page's label
    variants: Callable[[Scenario], Variants]  # label -> scenario


def _paging(base: Scenario) -> Variants:
    return {f"contiguous {r}": base.replace(allocator="contiguous", reserve=r) for r in CHOICES["reserve"]} | {
        "paged": base.replace(allocator="paged")}


def _placement(base: Scenario) -> Variants:
    return {f"contiguous pow2 {p}": base.replace(allocator="contiguous", reserve="pow2", placement=p)
            for p in CHOICES["placement"]} | {"paged": base.replace(allocator="paged")}


def _attention(base: Scenario) -> Variants:
    spec = load_spec(base.model)
    return {f"MHA ({spec.num_attention_heads} kv heads)": base.replace(kv_heads=spec.num_attention_heads),
            f"GQA (native, {spec.num_kv_heads} kv heads)": base.replace(kv_heads=None),
            "MQA (1 kv head)": base.replace(kv_heads=1)}


def fleet_size(base: Scenario) -> int:
    """Replicas of the fleet presets: the base's, at least 2."""
    return max(2, base.replicas)


def _routing(base: Scenario) -> Variants:
    n = fleet_size(base)
    return {r: base.replace(replicas=n, router=r, pd=None) for r in CHOICES["router"]}


def _pd(base: Scenario) -> Variants:
    n = fleet_size(base)
    return {f"aggregated x{n}": base.replace(replicas=n, pd=None)} | {
        f"P/D {split}": base.replace(pd=split) for split in every_split(n)}


# KV tiers of the `offload` preset (docs/TIERS.md); the tiers reuse prefix-cached blocks, so prefix
# caching is on in every variant
OFFLOAD = {"no KV tiers": {}, "CPU 1,000 GiB": {"cpu_tier_gib": 1000.0},
           "CPU 250 GiB + NVMe 2,000 GiB": {"cpu_tier_gib": 250.0, "nvme_tier_gib": 2000.0}}


def _offload(base: Scenario) -> Variants:
    return {label: base.replace(**{"prefix_caching": True, "cpu_tier_gib": 0.0, "nvme_tier_gib": 0.0, **tiers})
            for label, tiers in OFFLOAD.items()}


COMPARE_PRESETS: Registry[ComparePreset] = Registry("compare preset", ((p.name, p) for p in (
    ComparePreset("reserve", "paging: contiguous max / pow2 / oracle vs paged", _paging),
    ComparePreset("attention", "attention: MHA vs GQA vs MQA", _attention),
    ComparePreset("kv-dtype", "KV dtype: fp16 vs fp8 vs int8 vs int4",
                  lambda base: {d: base.replace(kv_dtype=d) for d in ("fp16", "fp8", "int8", "int4")}),
    ComparePreset("block-size", "block size: 8 / 16 / 32 / 128",
                  lambda base: {f"block {b}": base.replace(allocator="paged", block_size=b) for b in (8, 16, 32, 128)}),
    ComparePreset("routing", "routing: every router on the replicas", _routing),
    ComparePreset("pd", "P/D: aggregated vs every prefill:decode split", _pd),
    ComparePreset("offload", "offload: none / CPU / CPU+NVMe KV tiers", _offload),
    ComparePreset("placement", "placement: contiguous pow2 with every placement vs paged", _placement),
    ComparePreset("preemption", "preemption: every preemption mode",
                  lambda base: {m: base.replace(preemption=m) for m in CHOICES["preemption"]}),
    ComparePreset("batching", "batching: static 8 / static 32 vs continuous (paged)",
                  lambda base: {"static batch 8": base.replace(static_batch=8), "static batch 32": base.replace(static_batch=32),
                                "continuous (paged)": base.replace(allocator="paged", static_batch=None)}),
)))

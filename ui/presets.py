"""Compare-page presets: the what-if families the issue names, each a few variants of one base scenario."""

from __future__ import annotations

from models.spec import load_spec
from sim.core.kv.reserve import RESERVE_POLICIES
from sim.core.routing.registry import ROUTERS
from sim.scenario import Scenario

PRESETS = (
    "paging: contiguous max / pow2 / oracle vs paged",
    "attention: MHA vs GQA vs MQA",
    "KV dtype: fp16 vs fp8 vs int8 vs int4",
    "block size: 8 / 16 / 32 / 128",
    "routing: every router on the replicas",
    "P/D: aggregated vs every prefill:decode split",
    "offload: none / CPU / CPU+NVMe KV tiers",
)
OFFLOAD_PRESET = PRESETS[6]
OFFLOAD = {"no KV tiers": {}, "CPU 1,000 GiB": {"cpu_tier_gib": 1000.0},
           "CPU 250 GiB + NVMe 2,000 GiB": {"cpu_tier_gib": 250.0, "nvme_tier_gib": 2000.0}}  # docs/TIERS.md


def preset_variants(name: str, base: Scenario) -> dict[str, Scenario]:
    """Label -> Scenario for a preset; everything not named by the preset is the base scenario's."""
    if name == PRESETS[0]:
        return {f"contiguous {r}": base.replace(allocator="contiguous", reserve=r) for r in RESERVE_POLICIES} | {
            "paged": base.replace(allocator="paged")}
    if name == PRESETS[1]:
        spec = load_spec(base.model)
        return {f"MHA ({spec.num_attention_heads} kv heads)": base.replace(kv_heads=spec.num_attention_heads),
                f"GQA (native, {spec.num_kv_heads} kv heads)": base.replace(kv_heads=None),
                "MQA (1 kv head)": base.replace(kv_heads=1)}
    if name == PRESETS[2]:
        return {d: base.replace(kv_dtype=d) for d in ("fp16", "fp8", "int8", "int4")}
    if name == PRESETS[3]:
        return {f"block {b}": base.replace(allocator="paged", block_size=b) for b in (8, 16, 32, 128)}
    if name == PRESETS[4]:
        n = max(2, base.replicas)
        return {r: base.replace(replicas=n, router=r, pd=None) for r in ROUTERS}
    if name == PRESETS[5]:
        n = max(2, base.replicas)
        return {f"aggregated x{n}": base.replace(replicas=n, pd=None)} | {
            f"P/D {p}:{n - p}": base.replace(pd=f"{p}:{n - p}") for p in range(1, n)}
    if name == OFFLOAD_PRESET:  # the tiers reuse prefix-cached blocks: prefix caching on in every variant
        return {label: base.replace(**{"prefix_caching": True, "cpu_tier_gib": 0.0, "nvme_tier_gib": 0.0, **tiers})
                for label, tiers in OFFLOAD.items()}
    raise ValueError(f"unknown preset {name!r}")

"""Who sizes the simulated KV pool (`Scenario.kv_pool`): the one list of their names.

Deployment.resolve (sim/run/deployment.py) implements each; the Scenario checks, the CLI, the
Simulate sidebar and docs/OPTIONS.md read this registry. Both derive the pool from the GPU; an explicit `kv_budget_gib` goes with
`kvsim` only (the Scenario refuses both at once).
"""

from __future__ import annotations

from dataclasses import dataclass

from models.registry import Registry


@dataclass(frozen=True)
class PoolSource:
    name: str
    description: str


KV_POOL_SOURCES: Registry[PoolSource] = Registry("KV pool source", ((s.name, s) for s in (
    PoolSource("kvsim", "kvsim's budget: GPU memory x gpu_mem_util - weights - activation peak - overhead "
               "(docs/CAPACITY.md)"),
    PoolSource("vllm", "vLLM's start-up accounting: num_gpu_blocks as vLLM V1's GPU worker sizes it, warm "
               "compile cache, the newest version read (sim/memory/vllm_profile.py, docs/CALIBRATION.md)"),
)))

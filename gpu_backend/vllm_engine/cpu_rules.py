"""What a vLLM V1 run on CPU can serve, beside conform.engine_config's checks: the block size it
takes, the KV blocks of a budget, the tiny model its CPU attention accepts.

`served_scenario` turns any dashboard scenario into one vLLM can run (engine_config then accepts
it); `num_blocks` sizes the pool from the scenario's budget, with the model as the Deployment runs
it (the kv-heads what-if applied: run_vllm writes the same heads into the config vLLM loads).
"""

from __future__ import annotations

from pathlib import Path

from sim.run.deployment import Deployment
from sim.scenario import Scenario

BLOCK_MULTIPLE = 32  # vLLM's CPU attention takes block sizes that are multiples of 32
DEFAULT_BLOCKS = 64  # the pool when the scenario sets no budget (vLLM on CPU holds it in RAM)
MAX_BLOCKS = 1 << 16
KV_DTYPE = "fp32"  # the worker runs the model in float32; vLLM's KV cache takes the model dtype
# vLLM's CPU attention needs head_dim >= 32: the tiny catalog model (head_dim 16) is too small for it.
TINY_MODEL = str(Path(__file__).resolve().parents[2] / "tests" / "data" / "tiny-llama" / "config.json")


def served_scenario(scenario: Scenario, tiny: bool) -> Scenario:
    """The scenario a vLLM CPU run serves: block size a multiple of 32, paged, recompute, continuous
    batching; with `tiny`, a tiny Llama whose head_dim vLLM's CPU attention accepts (its own heads)."""
    bs = scenario.block_size if scenario.block_size % BLOCK_MULTIPLE == 0 else BLOCK_MULTIPLE
    scenario = scenario.replace(model=TINY_MODEL, kv_heads=None) if tiny else scenario
    return scenario.replace(block_size=bs, allocator="paged", preemption="recompute", static_batch=None)


def num_blocks(scenario: Scenario) -> int:
    """KV blocks for a vLLM run: the scenario's budget in blocks of its size (fp32 K/V of the model as
    deployed, kv-heads what-if included), else DEFAULT_BLOCKS; between 2 and MAX_BLOCKS."""
    if scenario.kv_budget_gib is None:
        return DEFAULT_BLOCKS
    bpt = Deployment.model_of(scenario).kv_bytes_per_token(KV_DTYPE)
    return max(2, min(int(scenario.kv_budget_gib * 2**30 // (scenario.block_size * bpt)), MAX_BLOCKS))

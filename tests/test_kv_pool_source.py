"""kv_pool: the simulated pool sized by vLLM's start-up accounting, block for block; and a measured
run's pool copied block for block whatever the model's layout (sim validate)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from models.spec import load_spec
from sim.__main__ import main
from sim.errors import ScenarioError
from sim.fidelity.run_record import load_run_dir
from sim.fidelity.validate import run_scenario, run_trace
from sim.memory.capacity import capacity_table
from sim.memory.vllm_profile import add_vllm_pool
from sim.run.deployment import Deployment
from sim.run.engine import build
from sim.scenario import Scenario

FIXTURE = Path(__file__).resolve().parent.parent / "samples" / "vllm_run"

# dense; dense at TP4; sliding + full (gpt-oss); sliding padded to the full group's size (Gemma-3);
# linear-attention states with vLLM's raised block size (Qwen3-Next at TP4)
CASES = [("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("gpt-oss-20b", 1), ("gemma-3-27b", 1), ("qwen3-next-80b-a3b", 4)]


def _capacity_blocks(model: str, tp: int, block_size: int, prefix_caching: bool) -> int:
    """vLLM's pool by `sim capacity`'s own road (capacity_table + add_vllm_pool), not the run's."""
    spec = load_spec(model)
    from models.gpus import get_gpu

    table = capacity_table(spec, get_gpu("h100-sxm"), [8192], tp=tp, weight_dtype="native")
    return add_vllm_pool(table, spec, get_gpu("h100-sxm"), block_size=block_size, mamba_align=prefix_caching)[
        "assumptions"]["num_gpu_blocks"]


@pytest.mark.parametrize(("model", "tp"), CASES)
def test_vllm_pool_is_num_gpu_blocks(model, tp):
    dep = Deployment.resolve(Scenario(model=model, gpu="h100-sxm", tp=tp, kv_pool="vllm"))
    own = Deployment.resolve(Scenario(model=model, gpu="h100-sxm", tp=tp))
    n = _capacity_blocks(model, tp, dep.scenario.block_size, False)
    assert dep.num_blocks == n == dep.budget_terms["num_gpu_blocks"]
    assert dep.budget_terms["source"] == "vllm" and dep.budget_terms["kv_budget_bytes"] == dep.kv_budget_bytes
    assert own.num_blocks != n  # kvsim's own budget is another figure (docs/CALIBRATION.md)


def test_cli_flag_sizes_the_run(capsys):
    assert main(["run", "--synthetic", "preset=sharegpt-like,n=10,rate=5", "--model", "gpt-oss-20b",
                 "--kv-pool", "vllm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_blocks"] == out["num_gpu_blocks"] == _capacity_blocks("gpt-oss-20b", 1, 16, False)
    assert out["kv_budget_terms"]["source"] == "vllm"


def test_explicit_budget_and_vllm_pool_refused():
    with pytest.raises(ScenarioError, match="kv_pool.*give one of the two"):
        Scenario(kv_pool="vllm", kv_budget_gib=10.0)
    with pytest.raises(ScenarioError, match="kv_pool='nope'.*must be one of"):
        Scenario(kv_pool="nope")
    assert Scenario(kv_pool="vllm").with_kv_budget(3.0).kv_pool == "kvsim"
    assert Scenario().digest() == Scenario(kv_pool="kvsim").digest()  # runs from before the field keep theirs


@pytest.mark.parametrize(("model", "tp", "blocks"), [("gpt-oss-20b", 1, 5000), ("gemma-3-27b", 1, 3000),
                                                     ("llama-3.1-70b", 8, 4000)])
def test_measured_pool_copied_block_for_block(tmp_path, model, tp, blocks):
    """A measured run's num_gpu_blocks is the simulated pool, for grouped layouts (pages of several
    layers, padding layers) and replicated KV heads (8 heads at TP8 is one per rank) alike."""
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir)
    (run_dir / "config.json").unlink()  # the catalog model, not the fixture's config
    run = load_run_dir(run_dir, overrides={"model": model, "tp": tp, "num_gpu_blocks": blocks, "gpu": "h100-sxm"})
    sc = run_scenario(run)
    assert build(run_trace(run).first(5), sc).num_blocks == blocks

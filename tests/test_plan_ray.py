"""The search on a real local Ray instance (2 CPUs, no dashboard) gives the process pool's rows."""

from __future__ import annotations

import json

import pytest

from sim.__main__ import main
from sim.plan.config_search import SearchOptions
from sim.plan.grid import expand, parse_grid
from sim.plan.search import search
from sim.plan.slo import parse_slo
from sim.plan.workload import Workload
from sim.scenario import Scenario

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

WORKLOAD = "synthetic:preset=sharegpt-like,n=120,rate=8,seed=2"
GRID = {"kv_budget_gib": "0.25,1,4", "kv_dtype": "bf16,fp8", "max_num_seqs": "16,128", "allocator": "paged,contiguous"}


@pytest.fixture(scope="module")
def local_ray():
    from sim.plan.executors import code_modules

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"py_modules": code_modules()})
    yield
    ray.shutdown()


def test_24_configurations_on_ray_match_the_process_pool(local_ray):
    workload = Workload.from_ref(WORKLOAD)
    configs = expand(Scenario(), parse_grid(GRID))
    assert len(configs) == 24
    options = SearchOptions(parse_slo("ttft_p99=1,tpot_p99=0.05"), target_rate=30)
    on_ray = search(workload, configs, options, ray="auto").to_dict()
    pooled = search(workload, configs, options, workers=2).to_dict()
    assert on_ray == pooled
    assert on_ray["completed"] == 24 and not on_ray["cancelled"]
    assert {r["binding"] for r in on_ray["rows"]} >= {"kv", "max_num_seqs"}  # the grid spans both limits


def test_cli_ray_flag_uses_the_running_instance(local_ray, capsys):
    code = main(["search", "--synthetic", WORKLOAD.removeprefix("synthetic:"), "--model", "llama-3-8b",
                 "--kv-budget-gib", "0.25,4", "--slo", "ttft_p99=1", "--ray", "auto", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["kv_budget_gib"] for r in out["rows"]] == [0.25, 4.0]
    assert out["rows"][0]["max_rate_per_s"] < out["rows"][1]["max_rate_per_s"]

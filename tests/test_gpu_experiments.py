"""The reference experiments on CPU with the tiny model: measured KV bytes equal the formula, the
capacity experiment sizes its own pool (no magic budget) and really preempts; the CLI reads the same list."""

from __future__ import annotations

import json

import pytest

from gpu_backend.cli import main
from gpu_backend.executor import RunConfig
from gpu_backend.experiments import CAPACITY_FITS, EXPERIMENTS, capacity_budget_gib, run_experiment
from sim.scenario import Scenario

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def test_kv_vs_batch_measured_equals_formula():
    df = run_experiment("KV vs batch size", Scenario(model="tiny-llama", kv_dtype="fp32"), RunConfig(offline=True))
    assert list(df["batch"]) == [1, 2, 4, 8]
    assert (df["kv_bytes_measured"] == df["kv_bytes_formula"]).all()


def test_capacity_sizes_its_own_pool_and_preempts():
    sc = Scenario(model="tiny-llama", kv_dtype="fp32", block_size=16)
    row = run_experiment("Capacity", sc, RunConfig(offline=True)).iloc[0]
    per_request_blocks = -(-(128 + 8) // 16)
    assert row["num_blocks"] == CAPACITY_FITS * per_request_blocks
    # A request is admitted on its prompt's 8 blocks and takes a 9th at its first decode token, so up
    # to 72 // 8 = 9 run at once until the pool runs dry and preemption brings them back; the mean
    # batch (timed on the real CPU, so it varies run to run) stays at or under that bound.
    most_resident = row["num_blocks"] // -(-128 // 16)
    assert row["preemptions"] > 0 and row["mean_batch"] <= most_resident
    assert capacity_budget_gib(sc, 128, 8, 1) * 2**30 == per_request_blocks * 16 * 512


def test_unknown_experiment_lists_the_choices(capsys):
    assert main(["experiment", "nope", "--device", "cpu", "--model", "tiny-llama"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and all(name in err for name in EXPERIMENTS) and "\n" not in err.strip()


def test_cli_experiment_json(capsys):
    assert main(["experiment", "KV vs sequence length", "--device", "cpu", "--model", "tiny-llama",
                 "--kv-dtype", "fp32", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["prompt_tokens"] for r in rows] == [32, 64, 128, 256]
    assert all(r["kv_bytes_measured"] == r["kv_bytes_formula"] for r in rows)

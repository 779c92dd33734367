"""`python -m gpu_backend run --engine vllm --device cpu`: a real vLLM engine, the simulator's frames out."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache

import pandas as pd
import pytest

from sim.run.engine import simulate
from sim.run.metrics import REQUEST_COLUMNS, STEP_COLUMNS
from sim.scenario import Scenario
from sim.trace import load_trace

pytestmark = pytest.mark.slow
TRACE = "tests/data/gpu_tiny_trace.csv"
ARGS = ["--model", "tests/data/tiny-llama", "--block-size", "32", "--num-blocks", "64", "--max-num-seqs", "8",
        "--max-batched-tokens", "128"]


@cache
def cli_run(out: str) -> dict:
    cmd = [sys.executable, "-m", "gpu_backend", "run", "--engine", "vllm", "--device", "cpu", "--trace", TRACE, *ARGS,
           "--out", out, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, vllm_env):
    out = tmp_path_factory.mktemp("vllm_run")
    return out, cli_run(str(out))


def test_summary_has_the_simulators_schema(run_dir):
    _, summary = run_dir
    sim = simulate(load_trace(TRACE), Scenario(model="tests/data/tiny-llama/config.json", block_size=32,
                                               kv_budget_gib=0.01)).summary
    assert set(sim) <= set(summary), set(sim) - set(summary)
    assert summary["measured_by"] == "vLLM" and summary["device"] == "cpu" and summary["vllm_version"] == "0.32.0"
    assert summary["requests"] == summary["completed"] == 8 and summary["unfinished"] == 0
    assert summary["num_blocks"] == 64 and summary["block_size"] == 32


def test_frames_and_step_log(run_dir):
    out, summary = run_dir
    steps = pd.read_parquet(out / "steps.parquet")
    reqs = pd.read_parquet(out / "requests.parquet")
    log = pd.read_csv(out / "step_log.csv")
    assert list(steps.columns) == list(STEP_COLUMNS) and list(reqs.columns) == list(REQUEST_COLUMNS)
    trace = load_trace(TRACE).df
    assert reqs["input_tokens"].tolist() == trace["input_tokens"].tolist()
    assert reqs["output_tokens"].tolist() == trace["output_tokens"].tolist()
    # per-request timestamps from the engine: arrival <= first scheduled <= first token <= finish
    assert (reqs["arrival_s"] <= reqs["admitted_s"]).all() and (reqs["admitted_s"] <= reqs["first_token_s"]).all()
    assert (reqs["first_token_s"] <= reqs["finish_s"]).all()
    # the step log is vLLM's scheduler, step by step
    assert len(log) == summary["num_steps"] == int(steps["num_steps"].sum())
    assert ((log["prefill_tokens"] + log["decode_tokens"]) <= 128).all()
    assert (log["num_running"] <= 8).all() and (log["blocks_in_use"] <= 64).all()
    assert int(log["prefill_tokens"].sum()) == int(trace["input_tokens"].sum())  # no preemption: each prompt once
    assert int(log["decode_tokens"].sum()) == int((trace["output_tokens"] - 1).sum())

"""`python -m gpu_backend run|profile|status` on CPU with the tiny test model; telemetry without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_backend import telemetry
from gpu_backend.cli import main
from tests.resolved import cost_of

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent
RUN = ["run", "--device", "cpu", "--model", str(DATA / "gpu_tiny_model"), "--trace", str(DATA / "gpu_tiny_trace.csv"),
       "--kv-budget-gib", "0.001", "--block-size", "4", "--kv-dtype", "int8"]


def test_run_json_summary_as_a_subprocess():
    out = subprocess.run([sys.executable, "-m", "gpu_backend", *RUN, "--json", "--offline"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["completed"] == 8 and s["device"] == "cpu" and s["offline"] is True
    assert s["kv_pool_bytes"] == (s["num_blocks"] + 1) * 4 * s["bytes_per_token"]  # int8: no fixed scale bytes
    assert s["bytes_per_token"] == 2 * 2 * 2 * (16 + 4)  # K and V, 2 layers, 2 kv heads, int8 + fp32 scale


def test_run_writes_frames(tmp_path, capsys):
    assert main([*RUN, "--offline", "--out", str(tmp_path)]) == 0
    assert "KV pool" in capsys.readouterr().out
    for name in ("scenario.json", "summary.json", "step_log.csv"):
        assert (tmp_path / name).is_file()
    assert any(tmp_path.glob("steps.*")) and any(tmp_path.glob("requests.*"))


@pytest.mark.parametrize("argv, needle", [
    (["run", "--device", "cuda", "--model", "tiny-llama", "--trace", str(DATA / "gpu_tiny_trace.csv")], "no CUDA"),
    (["run", "--device", "cpu", "--model", "no-such-model", "--trace", str(DATA / "gpu_tiny_trace.csv")], "error:"),
    ([*RUN[:-2], "--kv-dtype", "int4"], "simulated only"),
    ([*RUN, "--tp", "2"], "one GPU"),
])
def test_bad_input_is_one_line(argv, needle, capsys):
    if "cuda" in argv and telemetry.cuda_available():
        pytest.skip("this machine has CUDA")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err


def test_profile_writes_a_profile_sim_run_can_use(tmp_path):
    from sim.scenario import Scenario
    from sim.timing.cost_model import load_profile

    path = tmp_path / "prof.json"
    assert main(["profile", "--device", "cpu", "--model", "tiny-llama", "--grid", "small", "--repeats", "2",
                 "--out", str(path)]) == 0
    prof = load_profile(path)
    assert prof["fit"]["samples"] == 9 and prof["tp"] == 1 and prof["kv_dtype"] == "fp32"
    cm = cost_of(Scenario(model="tiny-llama", profile=str(path), kv_dtype="fp32",
                                                      weight_dtype="fp32"))
    assert cm.step_time(8, 256, 256) > 0 and (cm.decode_step_times(4, 8, 256) > 0).all()


def test_status_and_telemetry_without_gpu(capsys):
    assert main(["status"]) == 0
    st = telemetry.gpu_status()
    if st.present:
        pytest.skip("this machine has a GPU")
    assert capsys.readouterr().out.startswith("no GPU")
    with telemetry.Telemetry(interval_s=0.01) as t:
        import time

        time.sleep(0.05)
    assert t.history() and t.latest() is not None and t.status.present is False


@pytest.mark.gpu
def test_cuda_run_reports_memory():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from gpu_backend.executor import RunConfig, run
    from sim.scenario import Scenario
    from sim.trace import load_trace

    res = run(load_trace(str(DATA / "gpu_tiny_trace.csv")),
              Scenario(model=str(DATA / "gpu_tiny_model"), kv_budget_gib=0.01, block_size=16),
              RunConfig(device="cuda", dtype="bf16", offline=True))
    assert res.summary["peak_mem_allocated_bytes"] >= res.summary["kv_pool_bytes"]
    assert res.summary["completed"] == 8

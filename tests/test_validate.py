"""sim validate: the run-record reader, the engine-config copy and the side-by-side comparison."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from sim.__main__ import main
from sim.fidelity.run_record import RunError, load_run_bytes, load_run_dir, load_run_zip
from sim.fidelity.validate import run_scenario, validate
from sim.run.engine import build

FIXTURE = Path(__file__).resolve().parent.parent / "samples" / "vllm_run"
SHARED_RUN = Path(__file__).resolve().parents[1].parent / "shared" / "fidelity" / "rtx4090-llama-3.1-8b" / "run"


def test_reader_measured_latencies():
    run = load_run_dir(FIXTURE)
    first = json.loads((FIXTURE / "requests.jsonl").read_text().splitlines()[0])
    r = run.requests
    assert len(r) == 40 and r["arrival_s"].iloc[0] == 0.0 and r["arrival_s"].is_monotonic_increasing
    assert r["ttft_s"].iloc[0] == pytest.approx(first["first_token_ts"] - first["queued_ts"])
    assert r["tpot_s"].iloc[0] == pytest.approx((first["last_token_ts"] - first["first_token_ts"]) / (first["output_toks"] - 1))
    assert run.engine.num_gpu_blocks == 2588 and run.engine.max_batched_tokens == 2048 and run.engine.prefix_caching
    assert run.config_path == FIXTURE / "config.json"
    assert run.timeseries["kv_cache_usage_perc"].max() <= 1.0


def test_scenario_copies_the_engine_exactly():
    run = load_run_dir(FIXTURE)
    sc = run_scenario(run)
    assert (sc.gpu, sc.max_num_seqs, sc.max_batched_tokens, sc.block_size, sc.max_model_len) == ("rtx-4090", 256, 2048, 16, 32768)
    from sim.fidelity.validate import run_trace

    assert build(run_trace(run), sc).num_blocks == 2588  # the pool vLLM sized, block for block


def test_validate_json_cli(capsys):
    assert main(["validate", str(FIXTURE), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["metric"], r["stat"]): r for r in out["comparison"]}
    assert {("TTFT", "p99"), ("TPOT", "mean"), ("E2E", "p90"), ("throughput (tok/s)", "mean")} <= set(rows)
    row = rows[("E2E", "mean")]
    assert row["error"] == pytest.approx(row["simulated"] / row["measured"] - 1)
    assert len(out["series"]["t_s"]) == 30 and "simulated_kv_cache_usage_perc" in out["series"]
    assert out["cost_model"]


def test_validate_text_cli(capsys):
    assert main(["validate", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "TTFT" in out and "throughput" in out and "running" in out


def test_zip_and_bytes_agree(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name in ("meta.json", "requests.jsonl", "timeseries.csv", "config.json"):
            z.write(FIXTURE / name, f"myrun/{name}")
    a = load_run_zip(buf.getvalue(), "myrun.zip")
    b = load_run_bytes(*(FIXTURE.joinpath(n).read_bytes() for n in ("meta.json", "requests.jsonl", "timeseries.csv", "config.json")))
    assert a.requests.equals(b.requests) and a.engine == b.engine
    with pytest.raises(RunError, match="lacks timeseries.csv"):
        buf2 = io.BytesIO()
        with zipfile.ZipFile(buf2, "w") as z:
            z.write(FIXTURE / "meta.json", "meta.json")
            z.write(FIXTURE / "requests.jsonl", "requests.jsonl")
        load_run_zip(buf2.getvalue(), "bad.zip")


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('"output_toks": 531', '"output_toks": "x"', 1), "line 1: output_toks must be a number"),
    (lambda t: "{not json\n" + t, "line 1: not valid JSON"),
    (lambda t: t.replace('"first_token_ts"', '"first_tok"', 1), "line 1: first_token_ts must be a number"),
])
def test_bad_requests_one_line(tmp_path, edit, message):
    d = tmp_path / "run"
    shutil.copytree(FIXTURE, d)
    p = d / "requests.jsonl"
    p.write_text(edit(p.read_text()))
    with pytest.raises(RunError, match=message) as exc:
        load_run_dir(d)
    assert "\n" not in str(exc.value) and "requests.jsonl" in str(exc.value)


def test_bad_meta_and_device(tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(FIXTURE, d)
    meta = json.loads((d / "meta.json").read_text())
    meta["kv_cache"]["num_gpu_blocks"] = 0
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(RunError, match="kv_cache.num_gpu_blocks must be a positive integer"):
        load_run_dir(d)
    meta["kv_cache"]["num_gpu_blocks"] = 100
    meta["hardware"]["device_name"] = "Mystery GPU 9000"
    (d / "meta.json").write_text(json.dumps(meta))
    assert main(["validate", str(d)]) == 2
    assert "Mystery GPU 9000" in capsys.readouterr().err


def test_shared_run_replays_fully():
    if not SHARED_RUN.is_dir():
        pytest.skip("../shared/fidelity not present")
    v = validate(load_run_dir(SHARED_RUN))
    assert v.result.summary["completed"] == 300 and v.result.summary["num_blocks"] == 2588
    assert np.isfinite(v.table["error"]).all()


def test_shared_run_defaults_within_ten_percent():
    """Done-when of issue 10: roofline v2 defaults, no profile, mean TTFT / TPOT / E2E within 10%."""
    if not SHARED_RUN.is_dir():
        pytest.skip("../shared/fidelity not present")
    v = validate(load_run_dir(SHARED_RUN))
    assert v.result.summary["cost_model"]["source"] == "roofline"
    for metric in ("TTFT", "TPOT", "E2E"):
        assert abs(v.error(metric)) <= 0.10, (metric, v.error(metric))


def test_api_overhead_adds_to_ttft():
    run = load_run_dir(FIXTURE)
    base = validate(run)
    more = validate(run, api_overhead_s=0.009)
    first = base.result.requests["ttft_s"].iloc[0], more.result.requests["ttft_s"].iloc[0]
    assert first[1] - first[0] == pytest.approx(0.009, rel=1e-6)  # the first request meets an idle engine
    assert more.result.summary["cost_model"]["api_overhead_s"] == 0.009

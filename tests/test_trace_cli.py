"""`python -m sim trace` end to end, in a subprocess, through sim.__main__.main (exit 2 on bad input).

If another subcommand's module is not importable yet, the subprocess runs main() with only the
trace subcommand registered, which still exercises the real argument parsing and error path.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
DATA = ROOT / "tests" / "data" / "traces"


def _all_subcommands_importable() -> bool:
    from sim.__main__ import SUBCOMMANDS

    return all(importlib.util.find_spec(m) is not None for m in SUBCOMMANDS.values())


def run_cli(*args: str) -> subprocess.CompletedProcess:
    if _all_subcommands_importable():
        cmd = [sys.executable, "-m", "sim", *args]
    else:
        code = (
            "import sys, sim.__main__ as m; m.SUBCOMMANDS = {'trace': 'sim.cli.trace'}; sys.exit(m.main(sys.argv[1:]))"
        )
        cmd = [sys.executable, "-c", code, *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_json_summary_of_a_sample() -> None:
    proc = run_cli("trace", str(SAMPLES / "chat_small.csv"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format"] == "generic" and data["rows"] == 300
    assert set(data["input_tokens"]) >= {"mean", "p50", "p99"} and set(data["output_tokens"]) >= {"mean", "p50", "p99"}
    assert data["rate_per_s"] == round(300 / data["duration_s"], 6)


def test_human_output_format_option_and_transforms() -> None:
    proc = run_cli("trace", str(SAMPLES / "mooncake_small.jsonl"), "--format", "mooncake", "--window", "0:20", "--speedup", "2")
    assert proc.returncode == 0, proc.stderr
    assert "[mooncake]" in proc.stdout and "applied: speedup x2" in proc.stdout and "512-token blocks" in proc.stdout


def test_burstgpt_filters_and_warning_in_json() -> None:
    proc = run_cli("trace", str(SAMPLES / "burstgpt_small.csv"), "--model", "GPT-4", "--json")
    data = json.loads(proc.stdout)
    assert data["format"] == "burstgpt" and any("failed requests" in w for w in data["warnings"])


def test_synthetic_spec_as_path() -> None:
    proc = run_cli("trace", "synthetic:preset=alpaca-like,n=2000,rate=8,seed=3", "--json")
    data = json.loads(proc.stdout)
    assert data["format"] == "synthetic" and data["rows"] == 2000


def test_bad_input_prints_one_line_error_and_exits_2() -> None:
    for args, piece in [
        ((str(DATA / "non_numeric.csv"),), "non_numeric.csv: data row 3: non-numeric token count 'abc'"),
        ((str(DATA / "binary.csv"),), "binary data"),
        ((str(SAMPLES / "chat_small.csv"), "--max-mb", "0.001"), "over the"),
        ((str(SAMPLES / "chat_small.csv"), "--window", "abc"), "--window 'abc'"),
        (("synthetic:n=oops",), "synthetic spec: n='oops'"),
        ((str(ROOT / "nope.csv"),), "no such file"),
    ]:
        proc = run_cli("trace", *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("error: ") and piece in proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_out_writes_a_generic_csv_that_loads_back(tmp_path: Path) -> None:
    out = tmp_path / "fast.csv"
    proc = run_cli("trace", str(SAMPLES / "vidur_small.csv"), "--speedup", "2", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    from sim.trace import load_trace

    assert load_trace(out).digest() == json.loads(proc.stdout)["digest"]


def test_help_lists_formats() -> None:
    proc = run_cli("trace", "--help")
    assert proc.returncode == 0 and "burstgpt" in proc.stdout and "synthetic:" in proc.stdout

"""The validation layer (sim/guard, models/strict.py, models/safe_json.py) and the entry points that use it:
each class of bad input from issue 13 gets one clear line, never a traceback or a silent wrong value."""

from __future__ import annotations

import json
import os

import pytest

from models.safe_json import json_depth, loads
from models.spec import SpecError, spec_from_config
from models.strict import flag, number, whole
from sim.__main__ import main as sim_main
from sim.guard.text import plain, public_error
from sim.scenario import Scenario, ScenarioError
from sim.trace import TraceError, load_trace, load_trace_bytes, parse_synthetic_spec

GENERIC = "arrival_s,input_tokens,output_tokens\n"


def test_value_checks() -> None:
    assert whole(5, "x", 1, 10) == 5
    for bad in (True, 2.0, float("nan"), "3", 11, 0):
        with pytest.raises(ValueError, match="^x: "):
            whole(bad, "x", 1, 10)
    assert number(0.5, "y", 0, 1) == 0.5
    for bad in (float("inf"), float("nan"), False, "0.5", 2):
        with pytest.raises(ValueError, match="^y: "):
            number(bad, "y", 0, 1)
    assert flag("false", "z") is False and flag("TRUE", "z") is True and flag(True, "z") is True
    with pytest.raises(ValueError, match="expected true or false"):
        flag("maybe", "z")


def test_json_depth_and_constants() -> None:
    deep = "[" * 10_000 + "]" * 10_000
    assert json_depth(deep) > 64
    assert json_depth('{"a": "[[[[[[[["}') == 1  # brackets inside strings do not count
    with pytest.raises(ValueError, match="nested deeper than 64"):
        loads(deep, error=ValueError, source="f.json")
    # NaN/Infinity named by the field where they stand, not just "not valid JSON" (issue 29)
    with pytest.raises(ValueError, match=r"^f.json: a: NaN is not a number \(JSON has no NaN or Infinity\)$"):
        loads('{"a": NaN}', error=ValueError, source="f.json")
    with pytest.raises(ValueError, match=r"^f.json: b\.c\[1\]: -Infinity is not a number"):
        loads('{"a": 1, "b": {"c": [0, -Infinity]}}', error=ValueError, source="f.json")
    with pytest.raises(ValueError, match=r"^f.json: value: Infinity is not a number"):
        loads('Infinity', error=ValueError, source="f.json")


@pytest.mark.parametrize(("data", "message"), [
    (b'{"timestamp": 1, "input_length": ' + b"[" * 5000 + b"]" * 5000 + b', "output_length": 3}\n', "line 1: JSON nested too deeply"),
    (b'{"arrival_s": 0, "input_tokens": true, "output_tokens": 3}\n', "line 1: token count in 'input_tokens' is true"),
    (b'{"arrival_s": NaN, "input_tokens": 5, "output_tokens": 3}\n', "line 1: arrival_s: NaN is not a number"),
    (b'{"arrival_s": 1e300, "input_tokens": 5, "output_tokens": 3}\n', "arrival time '1e+300' in 'arrival_s' is implausibly large"),
    (b'{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [123456789012345678901234567890]}\n',
     "line 1: 'hash_ids' must be a list of integers of at most 64 bits"),
    ((GENERIC.replace("input_tokens", "input_tokens,input_tokens") + "0,5,6,3\n").encode(), "column 'input_tokens' appears twice"),
    ((GENERIC + "0,true,3\n").encode(), "data row 1: token count in 'input_tokens' is true"),
])
def test_trace_classes_one_line(data: bytes, message: str) -> None:
    with pytest.raises(TraceError) as info:
        load_trace_bytes(data, "t.jsonl")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cr_only_line_endings_read_right() -> None:
    trace = load_trace_bytes(b"arrival_s,input_tokens,output_tokens\r0,5,3\r1,6,4\r", "mac.csv")
    assert trace.df["input_tokens"].tolist() == [5, 6] and trace.df["output_tokens"].tolist() == [3, 4]
    trace = load_trace_bytes(b'{"arrival_s": 0, "input_tokens": 5, "output_tokens": 3}\r{"arrival_s": 1, '
                             b'"input_tokens": 7, "output_tokens": 2}\r', "mac.jsonl")
    assert trace.df["input_tokens"].tolist() == [5, 7]


def test_upload_rows_capped_and_said() -> None:
    rows = "".join(f"{i},5,3\n" for i in range(50))
    trace = load_trace_bytes((GENERIC + rows).encode(), "big.csv", max_rows=20)
    assert len(trace) == 20 and any("rows capped" in w for w in trace.warnings)
    jsonl = "".join(json.dumps({"arrival_s": i, "input_tokens": 5, "output_tokens": 3}) + "\n" for i in range(50))
    trace = load_trace_bytes(jsonl.encode(), "big.jsonl", max_rows=20)
    assert len(trace) == 20 and any("rows capped: kept the first 20" in w for w in trace.warnings)


@pytest.mark.parametrize(("spec", "message"), [
    ("n=10,seed=-1", "seed=-1 must be between 0"),
    ("n=10,input=uniform:lo=1:hi=1e18", "lengths must stay below"),
    ("n=10,max_len=1e30", "is not a usable number"),
    ("n=1e18", "must be between 1 and"),
    ("n=10,rate=1e-300", "rate=1e-300 must be between"),
])
def test_synthetic_bounds(spec: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_synthetic_spec(spec)


def test_files_one_line(tmp_path) -> None:
    with pytest.raises(TraceError, match="is a folder, not a file"):
        load_trace(tmp_path)
    with pytest.raises(TraceError, match="name too long"):
        load_trace(tmp_path / ("x" * 300 + ".csv"))
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "missing" / "t.csv")
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.csv"
        locked.write_text(GENERIC + "0,5,3\n")
        locked.chmod(0)
        with pytest.raises(TraceError, match="permission denied"):
            load_trace(locked)


CONFIG = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
          "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336}


@pytest.mark.parametrize(("change", "message"), [
    ({"head_dim": 0}, "head_dim must be a positive integer, got 0"),
    ({"num_hidden_layers": 10**9}, "num_hidden_layers: 1000000000 is out of range"),
    ({"hidden_size": 4096.0}, "hidden_size must be a positive integer"),
    ({"tie_word_embeddings": "maybe"}, "tie_word_embeddings: expected true or false"),
])
def test_config_classes(change: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_from_config({**CONFIG, **change}, source="config.json")


def test_config_false_string_is_false() -> None:
    assert spec_from_config({**CONFIG, "tie_word_embeddings": "false"}).tie_word_embeddings is False
    assert spec_from_config({**CONFIG, "tie_word_embeddings": "true"}).tie_word_embeddings is True


@pytest.mark.parametrize("change", [
    {"replicas": 10**12}, {"seed": -1}, {"kv_budget_gib": float("inf")}, {"tp": True}, {"gpu_mem_util": float("nan")},
    {"max_num_seqs": 10**9}, {"prefix_caching": "yes please"}, {"block_size": 2.0},
])
def test_scenario_bounds(change: dict) -> None:
    with pytest.raises(ScenarioError):
        Scenario.from_dict(change)


def test_scenario_false_string() -> None:
    assert Scenario.from_dict({"prefix_caching": "false", "chunked_prefill": "false"}).chunked_prefill is False


def _exit_code(main, argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse errors exit from inside parse_args
        return int(exc.code)


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--synthetic", "n=2", "--model", "llama-3-8b", "--replicas", "1000000000000"], "replicas: 1000000000000 is out of range"),
    (["run", "--synthetic", "n=2", "--model", "llama-3-8b", "--bogus"], "unrecognized arguments: --bogus (see python -m sim --help)"),
    (["capacity", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--users", "-5"], "argument --users: -5 is out of range"),
    (["trace", "/nonexistent/dir/t.csv"], "no such file"),
])
def test_cli_one_line_exit_2(argv: list[str], message: str, capsys) -> None:
    code = _exit_code(sim_main, argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--synthetic", "n=2", "--model", "tiny-llama", "--max-steps", "-1"], "--max-steps: -1 is out of range"),
    (["profile", "--model", "tiny-llama", "--block-size", "0", "--out", "x.json"], "--block-size: 0 is out of range"),
])
def test_gpu_backend_flags_bounded(argv: list[str], message: str, capsys) -> None:
    from gpu_backend.cli import main as gpu_main

    code = _exit_code(gpu_main, argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_text_made_safe() -> None:
    zw = "\u200b"  # GFM autolinks bare URLs even when escaped: an invisible break stops it
    assert plain("[click](http://x) **b** <b> head_dim _i_") == \
        r"\[click\]\(http:" + zw + r"//x\) \*\*b\*\* \<b\> head_dim \_i\_"
    here = os.path.dirname(os.path.abspath(__file__))
    assert here not in public_error(f"{here}/data/x.csv: bad\nsecond line")
    assert public_error(f"{here}/data/x.csv: bad\nsecond line").endswith("x.csv: bad")

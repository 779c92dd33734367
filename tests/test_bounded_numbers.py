"""Issue 29: every number read from a file is bounded before arithmetic (sim.guard.bounded), and
messages name the file, the row and the field. Each class comes in through a real reader: a custom
GPU file, a model config, a calibration profile, a Mooncake trace, a snapshot's embedded trace (CLI
import and the dashboard's upload)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.gpus import GpuError, load_gpu_file
from models.spec import SpecError, load_spec
from sim.guard import bounded, bounded_all
from sim.report.snapshot import Snapshot, SnapshotError
from sim.trace import Trace, TraceError, load_trace_bytes
from tests.test_charts import make_result

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("value", "kw", "message"), [
    (10**400, {}, r"^f: 1000.*\.\.\. is out of range \[0, 10\]$"),  # compared exactly, never float(10**400)
    (2**64, {"integer": True}, r"^f: 18446744073709551616 does not fit in 64 bits"),
    (float("nan"), {}, r"^f: nan is not a finite number$"),
    (float("-inf"), {}, r"^f: -inf is not a finite number$"),
    (True, {}, r"^f: expected a number, got True$"),
    (2.0, {"integer": True}, r"^f: expected a whole number, got 2.0$"),
    ("3", {}, r"^f: expected a number, got '3'$"),
    (11, {}, r"^f: 11 is out of range \[0, 10\]$"),
])
def test_bounded_refuses_with_the_field_named(value, kw, message):
    with pytest.raises(ValueError, match=message):
        bounded(value, "f", 0, 10, **kw)


def test_bounded_returns_the_value_in_its_kind():
    assert bounded(3, "f", 0, 10) == 3.0 and isinstance(bounded(3, "f", 0, 10), float)
    assert bounded(2**64 - 1, "h", 0, 2**64 - 1, integer=True) == 2**64 - 1


def test_bounded_all_names_the_first_bad_row():
    bounded_all([1, 2, 3], "col", 1, 3, integer=True)
    bounded_all([], "col", 1, 3, integer=True)
    for values, message in (([1, 2**70, 3], "col row 2: .* does not fit in 64 bits"), ([1, 2, float("nan")], "col row 3"),
                            ([1, True], "col row 2: expected a whole number"), ([5, 0], "col row 2: 0 is out of range")):
        with pytest.raises(ValueError, match=message):
            bounded_all(values, "col", 1, 10, integer=True)


def test_gpu_file_with_an_absurd_finite_memory(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"hbm_gib": 1e300, "hbm_bandwidth_gbs": 3000, "bf16_tflops": 900}))
    with pytest.raises(GpuError, match=r"big.json: hbm_gib: 1e\+300 is out of range \[0, 1,048,576\]"):
        load_gpu_file(path)
    cli = subprocess.run([sys.executable, "-m", "sim", "capacity", "--model", "llama-3-8b", "--gpu", str(path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert cli.returncode == 2 and cli.stderr.count("\n") == 1 and "hbm_gib: 1e+300 is out of range" in cli.stderr


def test_model_config_numbers_outside_any_range(tmp_path):
    cfg = json.loads((ROOT / "models" / "catalog" / "deepseek-v3.json").read_text())
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**cfg, "kv_lora_rank": 10**400}))
    with pytest.raises(SpecError, match=r"ds.json: kv_lora_rank: 1000.* is out of range"):
        load_spec(str(path))
    path.write_text(json.dumps({**cfg, "rope_scaling": {**cfg.get("rope_scaling", {}), "factor": 1e300}}))
    with pytest.raises(SpecError, match=r"ds.json: rope_scaling.factor: 1e\+300 is out of range"):
        load_spec(str(path))


def test_mooncake_nan_names_the_line_and_the_key():
    data = b'{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [1]}\n' \
           b'{"timestamp": 10, "input_length": NaN, "output_length": 3, "hash_ids": [2]}\n'
    with pytest.raises(TraceError, match=r"^m.jsonl: line 2: input_length: NaN is not a number"):
        load_trace_bytes(data, "m.jsonl")


def test_unsigned_64_bit_hash_ids_load_and_digest():
    """Mooncake ids are unsigned 64-bit: ids >= 2**63 load, digest (as their int64 alias) and run."""
    line = '{{"timestamp": {t}, "input_length": 1200, "output_length": 4, "hash_ids": [{h}, 7]}}\n'
    data = "".join(line.format(t=i, h=2**63 + 5 if i % 2 else 2**64 - 1) for i in range(4)).encode()
    t = load_trace_bytes(data, "m.jsonl")
    signed = Trace.build(*t.arrays(), format="mooncake", source="m", prefix_block_size=512,
                         prefix_hashes=[[h - 2**64, 7] for h, _ in t.df["prefix_hashes"]])
    assert t.digest() == signed.digest()  # same bytes: the alias, so signed digests are unchanged


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf", b"\xef\xbb\xbf\r\n \n"])
def test_a_file_of_only_a_byte_order_mark_is_empty(data):
    for name in ("t.csv", "t.jsonl"):
        with pytest.raises(TraceError, match=rf"^{name}: empty file \(a UTF-8 byte-order mark and nothing else\)$"):
            load_trace_bytes(data, name)


def _snapshot_with_hashes() -> dict:
    trace = Trace.build([0, 1], [5, 6], [3, 4], format="mooncake", source="inner.jsonl",
                        prefix_hashes=[[1, 2], [1, 3]], prefix_block_size=512)
    result = make_result()
    result.trace_digest = trace.digest()
    return json.loads(Snapshot.from_result(result, trace).to_json())


@pytest.mark.parametrize(("where", "value", "message"), [
    (("prefix_hashes", 1, 0), 2**90, r"^up.kvsim.json: trace.prefix_hashes row 2 item 1: \d+ does not fit in 64 bits"),
    (("input_tokens", 1), 10**30, r"^up.kvsim.json: trace.input_tokens row 2: \d+ does not fit in 64 bits"),
    (("arrival_s", 1), 1e300, r"^up.kvsim.json: trace.arrival_s row 2: 1e\+300 is out of range"),
    (("prefix_block_size",), 2**70, r"^up.kvsim.json: trace.prefix_block_size: \d+ does not fit in 64 bits"),
])
def test_snapshot_embedded_trace_values_named_outer_file_first(where, value, message):
    doc = _snapshot_with_hashes()
    node = doc["trace"]
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    with pytest.raises(SnapshotError, match=message):
        Snapshot.from_json(json.dumps(doc), "up.kvsim.json")


def test_snapshot_with_a_90_bit_hash_from_the_cli(tmp_path):
    doc = _snapshot_with_hashes()
    doc["trace"]["prefix_hashes"][0][0] = 2**90
    path = tmp_path / "hostile.kvsim.json"
    path.write_text(json.dumps(doc))
    cli = subprocess.run([sys.executable, "-m", "sim", "snapshots", "--db", str(tmp_path / "s.sqlite"), "import",
                          str(path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert cli.returncode == 2 and "Traceback" not in cli.stderr and cli.stderr.count("\n") == 1
    assert "hostile.kvsim.json: trace.prefix_hashes row 1 item 1" in cli.stderr and "64 bits" in cli.stderr


def test_snapshot_with_a_90_bit_hash_uploaded_in_the_dashboard(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(tmp_path / "s.sqlite"))
    doc = _snapshot_with_hashes()
    doc["trace"]["prefix_hashes"][1][1] = -(2**63) - 1
    at = AppTest.from_file(str(ROOT / "app_pages" / "snapshots.py"), default_timeout=60).run()
    at.file_uploader(key="snap_file").upload("h.kvsim.json", json.dumps(doc).encode(), "application/json").run()
    assert not at.exception and not at.metric
    assert at.error[0].value.startswith("h.kvsim.json: trace.prefix_hashes row 2 item 2:")

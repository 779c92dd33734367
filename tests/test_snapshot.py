"""Snapshot files (schema-versioned JSON, untrusted input) and the SQLite SnapshotStore."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pandas as pd
import pytest

from sim.report.snapshot import (
    MAX_STEP_ROWS,
    SCHEMA_VERSION,
    Snapshot,
    SnapshotError,
    downsample,
    snapshot_link,
)
from sim.report.snapshot_store import SnapshotStore
from sim.trace import Trace
from tests.test_charts import make_result


def small_trace(n: int = 50) -> Trace:
    rng = np.random.default_rng(1)
    return Trace.build(np.cumsum(rng.exponential(0.3, n)), rng.integers(10, 2000, n), rng.integers(1, 500, n),
                       format="generic", source="/tmp/some/dir/t.csv")


def test_round_trip_keeps_scenario_summary_frames_and_trace():
    trace = small_trace()
    snap = Snapshot.from_result(result_for(trace), trace, name="run 1")
    back = Snapshot.from_json(snap.to_json())
    assert back.scenario == snap.scenario and back.summary == snap.summary and back.name == "run 1"
    pd.testing.assert_frame_equal(back.steps, snap.steps, check_dtype=False)
    assert np.isnan(back.requests["ttft_s"].iat[-1])  # NaN travels as null and comes back as NaN
    rebuilt = back.trace()
    assert rebuilt is not None and rebuilt.digest() == trace.digest()
    assert back.trace_summary["rows"] == 50 and back.trace_data["source"] == "t.csv"  # no server paths leak


def test_large_frames_are_downsampled_keeping_first_and_last():
    df = pd.DataFrame({"t_s": np.arange(10_000.0)})
    small = downsample(df, MAX_STEP_ROWS)
    assert len(small) == MAX_STEP_ROWS and small["t_s"].iat[0] == 0 and small["t_s"].iat[-1] == 9999
    assert len(downsample(df.head(5), 100)) == 5


def result_for(trace: Trace):
    result = make_result()
    result.trace_digest = trace.digest()
    return result


def _doc() -> dict:
    trace = small_trace()
    return json.loads(Snapshot.from_result(result_for(trace), trace).to_json())


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema_version=99), "unknown schema_version 99"),
    (lambda d: d.pop("schema"), "not a kvsim snapshot"),
    (lambda d: d["scenario"].update(allocator="magic"), "allocator"),
    (lambda d: d["scenario"].update(bogus=1), "unknown field(s): bogus"),
    (lambda d: d["steps"]["data"][0].append(1), "steps row 1"),
    (lambda d: d["requests"]["data"][2].__setitem__(0, "x"), "values must be numbers"),
    (lambda d: d.update(summary=[1]), "\"summary\" must be a dict"),
    (lambda d: d["trace"]["input_tokens"].__setitem__(0, 99999), "does not match trace_digest"),
    (lambda d: d["trace"].update(arrival_s="1,2"), "trace.arrival_s"),
])
def test_bad_snapshots_give_one_line_errors(mutate, message):
    doc = _doc()
    mutate(doc)
    with pytest.raises(SnapshotError) as err:
        Snapshot.from_json(json.dumps(doc), "up.json")
    assert message in str(err.value) and "\n" not in str(err.value) and str(err.value).startswith("up.json")


def test_not_json_and_oversize_rejected(monkeypatch):
    with pytest.raises(SnapshotError, match="not a JSON snapshot"):
        Snapshot.from_json(b"\x80\x04pickle", "x.json")
    with pytest.raises(SnapshotError, match="not a kvsim snapshot"):
        Snapshot.from_json("[1, 2]")
    monkeypatch.setattr("sim.report.snapshot.MAX_SNAPSHOT_BYTES", 100)
    with pytest.raises(SnapshotError, match="over the 100-byte"):
        Snapshot.from_json("{" + " " * 200 + "}")
    assert SCHEMA_VERSION == 1


def test_store_save_get_list_delete(tmp_path):
    store = SnapshotStore(tmp_path / "sub" / "snaps.sqlite")
    trace = small_trace()
    snap = Snapshot.from_result(result_for(trace), trace)
    a = store.save(snap, "first")
    b = store.save(snap, "  second  ")
    assert a != b and len(a) >= 22  # 128 random bits, URL-safe base64
    got = store.get(a)
    assert got.name == "first" and got.summary == snap.summary
    assert {i.name for i in store.list()} == {"first", "second"}
    assert store.delete(a, operator=True) is True and store.delete(a, operator=True) is False
    with pytest.raises(SnapshotError, match="not found"):
        store.get(a)
    # a real SQLite file another process can read
    rows = sqlite3.connect(tmp_path / "sub" / "snaps.sqlite").execute("SELECT name FROM snapshots").fetchall()
    assert rows == [("second",)]


def test_default_store_path_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(tmp_path / "env.sqlite"))
    store = SnapshotStore.default()
    assert store.path == tmp_path / "env.sqlite" and store.path.exists()


def test_bad_upload_changes_nothing_saved(tmp_path):
    store = SnapshotStore(tmp_path / "s.sqlite")
    store.save(Snapshot.from_result(make_result(), None), "kept")
    doc = _doc()
    doc["schema_version"] = 2
    with pytest.raises(SnapshotError):
        store.save(Snapshot.from_json(json.dumps(doc)), "never")
    assert [i.name for i in store.list()] == ["kept"]


@pytest.mark.parametrize(("url", "base", "link"), [
    ("http://127.0.0.1:8501", "", "http://127.0.0.1:8501/?snapshot=abc"),  # the default page, at the root
    ("http://127.0.0.1:8501/", "", "http://127.0.0.1:8501/?snapshot=abc"),
    ("http://127.0.0.1:8501/simulate?kv_dtype=int8", "", "http://127.0.0.1:8501/?snapshot=abc"),
    ("https://ops.example/kvsim/compare", "kvsim", "https://ops.example/kvsim/?snapshot=abc"),  # behind a proxy
    ("https://ops.example/kvsim", "/kvsim/", "https://ops.example/kvsim/?snapshot=abc"),
    (None, "", "/?snapshot=abc"),  # no browser URL known (AppTest)
])
def test_snapshot_link_points_at_the_server_root(url, base, link):
    assert snapshot_link(url, "abc", base) == link

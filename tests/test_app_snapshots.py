"""AppTest: Snapshots page (open ?snapshot=ID, upload files, bad files change nothing, delete) and
the app shell's navigation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from sim.out.report import headline_metrics
from sim.out.snapshot import Snapshot, SnapshotStore
from tests.test_charts import make_result

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "app_pages" / "snapshots.py")


@pytest.fixture()
def store(tmp_path, monkeypatch) -> SnapshotStore:
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(tmp_path / "snaps.sqlite"))
    return SnapshotStore(tmp_path / "snaps.sqlite")


def page(**params) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.query_params.update(params)
    return at.run()


def test_link_opens_the_saved_numbers(store):
    snap = Snapshot.from_result(make_result(), None)
    snap_id = store.save(snap, "team run")
    at = page(snapshot=snap_id)
    assert not at.exception and not at.error
    assert at.subheader[0].value == "team run"
    assert [(m.label, m.value) for m in at.metric] == headline_metrics(snap.summary)
    assert len(at.get("plotly_chart")) == 5
    assert at.dataframe[0].value["name"].tolist() == ["team run"]


def test_unknown_id_is_a_message(store):
    at = page(snapshot="nope")
    assert not at.exception and "not found" in at.error[0].value


def test_upload_good_and_bad_files(store):
    kept = store.save(Snapshot.from_result(make_result(), None), "kept")
    good = Snapshot.from_result(make_result(token_gib=5.0), None, name="uploaded").to_json().encode()
    at = page()
    at.file_uploader(key="snap_file").upload("good.kvsim.json", good, "application/json").run()
    assert not at.error and at.subheader[1].value == "uploaded"
    doc = json.loads(good)
    doc["schema_version"] = 7
    for name, data, message in [("v7.json", json.dumps(doc).encode(), "unknown schema_version 7"),
                                ("junk.json", b"\x00\x01 not json", "not a JSON snapshot"),
                                ("list.json", b"[]", "not a kvsim snapshot")]:
        at.file_uploader(key="snap_file").upload(name, data, "application/json").run()
        assert not at.exception and at.error[0].value.startswith(name) and message in at.error[0].value
        assert not at.metric
    assert [s.id for s in store.list()] == [kept]  # nothing saved changed


def test_delete(store):
    snap_id = store.save(Snapshot.from_result(make_result(), None), "old")
    at = page()
    at.selectbox(key="snap_delete_pick").set_value(f"old ({snap_id})").run()
    at.button(key="snap_delete").click().run()
    assert store.list() == []


def test_app_navigation_and_snapshot_link(store):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["trace_first"] = "50"
    at.run()
    assert not at.exception and at.title[0].value.startswith("Plan")  # the landing page (issue 14)
    snap_id = store.save(Snapshot.from_result(make_result(), None), "linked")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["snapshot"] = snap_id
    at.run()
    assert at.title[0].value == "Snapshots" and at.subheader[0].value == "linked"

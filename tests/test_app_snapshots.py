"""AppTest: Snapshots page (open ?snapshot=ID, upload files, bad files change nothing, delete) and
the app shell's navigation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from sim.report.html_report import headline_metrics
from sim.report.snapshot import Snapshot
from sim.report.snapshot_store import SnapshotStore
from sim.scenario import Scenario
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
    snap_id = store.save(snap, "team run", public=True)  # public: listed for every visitor
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


def test_delete_needs_the_manage_secret(store):
    saved = store.save_shared(Snapshot.from_result(make_result(), None), "old", public=True)
    at = page()
    at.selectbox(key="snap_delete_pick").set_value(f"old ({saved.id})").run()
    at.text_input(key="snap_delete_secret").input("guess").run()
    at.button(key="snap_delete").click().run()
    assert not at.exception and "wrong manage secret" in at.error[0].value
    assert [s.id for s in store.list()] == [saved.id]
    at.text_input(key="snap_delete_secret").input(saved.manage_secret).run()
    at.button(key="snap_delete").click().run()
    assert store.list() == []


def test_private_snapshots_not_listed_to_others(store):
    private = store.save(Snapshot.from_result(make_result(), None), "private")
    store.save(Snapshot.from_result(make_result(), None), "shared", public=True)
    at = page()
    assert at.dataframe[0].value["name"].tolist() == ["shared"]
    at = page(snapshot=private)  # the link still opens it
    assert not at.error and at.metric


@pytest.mark.parametrize("name", ["[click me](http://evil.example) **bold** <b>html</b>", "# heading _x_ `code`"])
def test_user_text_shown_as_text(store, name):
    snap_id = store.save(Snapshot.from_result(make_result(), None), name)
    at = page(snapshot=snap_id)
    assert not at.exception
    shown = at.subheader[0].value
    bare = re.sub(r"\\.", "", shown)  # what is left once every escaped character is removed
    assert not set(bare) & set("[]()*<>#`") and shown.replace("\\", "").replace("\u200b", "") == name  # escaped, and nothing lost
    at = page(snapshot="[x](http://evil.example) <script>")
    assert "not found" in at.error[0].value and "\\[x\\]\\(http:\u200b//evil" in at.error[0].value


def test_store_unavailable_page_still_works(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(tmp_path))  # a folder, not a database file
    at = page()
    assert not at.exception and "is a folder" in at.error[0].value
    good = Snapshot.from_result(make_result(), None, name="file").to_json().encode()
    at.file_uploader(key="snap_file").upload("f.kvsim.json", good, "application/json").run()
    assert not at.exception and at.metric


def test_damaged_store_moved_aside(tmp_path, monkeypatch):
    db = tmp_path / "snaps.sqlite"
    db.write_bytes(b"garbage, not SQLite" * 100)
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(db))
    at = page()
    assert not at.exception and "moved aside to snaps.sqlite.damaged-" in at.warning[0].value
    assert str(tmp_path) not in at.warning[0].value
    aside = list(tmp_path.glob("snaps.sqlite.damaged-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == b"garbage, not SQLite" * 100  # never overwritten


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


def test_link_says_what_ran_and_keeps_digests_below(store):
    """The loaded screenshot: a snapshot of a run at load x 3 with max_model_len 4,096 said neither, and
    its first line was a trace digest."""
    result = make_result()
    result.scenario = Scenario(speedup=3.0, max_model_len=4096)
    snap_id = store.save(Snapshot.from_result(result, None), "loaded run")
    at = page(snapshot=snap_id)
    captions = [c.value for c in at.caption]
    assert "replayed at 3x its rate" in captions[0] and "max_model_len 4,096" in captions[0]
    reproduce = f"To reproduce: trace digest {result.trace_digest}; scenario {result.scenario.digest()}"
    assert reproduce in captions and all("digest" not in c for c in captions[:captions.index(reproduce)])

"""Issue 29: a snapshot store whose folder and file are read-only is listed and opened (CLI and page)
and saving says in one line why it cannot, with permissions really enforced.

Tests often run as root, who writes anywhere (CAP_DAC_OVERRIDE), so the checks run in a subprocess
as `nobody` through setpriv (util-linux, Essential on Debian: always installed) with every
capability dropped; each subprocess first proves that it cannot write into the folder. As another
user they run directly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from sim.report.snapshot import Snapshot
from sim.report.snapshot_store import SnapshotStore
from tests.test_charts import make_result

ROOT = Path(__file__).resolve().parent.parent
DROP = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]


def unprivileged(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run argv without the right to override file permissions (as nobody when we are root)."""
    prefix = DROP if os.geteuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to drop root's permission override; install util-linux")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": tempfile.gettempdir()}
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture()
def archive():
    """A store of two snapshots in a folder that `nobody` can enter, then made read-only (folder 555,
    file 444); permissions restored afterwards so the folder can be removed."""
    top = Path(tempfile.mkdtemp(prefix="kvsim-ro-"))
    top.chmod(0o755)
    folder = top / "archive"
    folder.mkdir()
    db = folder / "s.sqlite"
    store = SnapshotStore(db)
    ids = [store.save(Snapshot.from_result(make_result(), None), f"s{i}", public=True) for i in range(2)]
    SnapshotStore(db)  # the last connection closes: checkpointed, no -wal left
    for side in folder.glob("s.sqlite-*"):
        side.unlink()
    db.chmod(0o444)
    folder.chmod(0o555)
    try:
        yield db, ids
    finally:
        folder.chmod(0o755)
        db.chmod(0o644)
        shutil.rmtree(top)


PROBE = """
import pathlib, sys
try:
    (pathlib.Path({folder!r}) / "probe").write_text("x")
except PermissionError:
    pass
else:
    sys.exit("permissions are not enforced in this subprocess: the test would prove nothing")
"""


def _script(db: Path, body: str) -> list[str]:
    return [sys.executable, "-c", PROBE.format(folder=str(db.parent)) + textwrap.dedent(body)]


def test_read_only_store_lists_opens_and_refuses_saving(archive):
    db, ids = archive
    out = unprivileged(_script(db, f"""
        import json
        from sim.report.snapshot import Snapshot
        from sim.report.snapshot_store import SnapshotStore, StoreError
        from tests.test_charts import make_result
        store = SnapshotStore({str(db)!r})
        result = {{"read_only": store.read_only, "ids": sorted(s.id for s in store.list()),
                  "name": store.get({ids[0]!r}).name, "check": store.check()}}
        try:
            store.save(Snapshot.from_result(make_result(), None), "no")
        except StoreError as exc:
            result["save"] = str(exc)
        try:
            store.delete({ids[0]!r}, operator=True)
        except StoreError as exc:
            result["delete"] = str(exc)
        try:
            SnapshotStore({str(db.parent / "new.sqlite")!r})
        except StoreError as exc:
            result["new"] = str(exc)
        print(json.dumps(result))
    """))
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["read_only"] and result["ids"] == sorted(ids) and result["name"] == "s0" and result["check"] == "ok"
    assert result["save"] == ("snapshot store s.sqlite: read-only (the file and its folder are read-only), nothing "
                              "can be saved; snapshots in it can still be opened")
    assert result["delete"] == "snapshot store s.sqlite: read-only (the file and its folder are read-only), nothing can be deleted"
    assert result["new"] == "snapshot store new.sqlite: its folder is read-only, nothing can be saved"
    assert sorted(p.name for p in db.parent.iterdir()) == ["s.sqlite"]  # no -wal/-shm needed, none made


def test_read_only_store_from_the_cli(archive):
    db, ids = archive
    base = [sys.executable, "-m", "sim", "snapshots", "--db", str(db)]
    listed = unprivileged([*base, "list", "--json"])
    assert listed.returncode == 0, listed.stderr
    assert sorted(r["id"] for r in json.loads(listed.stdout)) == sorted(ids)
    exported = unprivileged([*base, "export", ids[1]])
    assert exported.returncode == 0 and json.loads(exported.stdout)["name"] == "s1"
    checked = unprivileged([*base, "check"])
    assert checked.returncode == 0 and checked.stdout.startswith("ok:")
    snap_file = db.parent.parent / "one.kvsim.json"
    snap_file.write_text(Snapshot.from_result(make_result(), None).to_json())
    snap_file.chmod(0o644)
    imported = unprivileged([*base, "import", str(snap_file)])
    assert imported.returncode == 2 and imported.stderr == (
        "error: snapshot store s.sqlite: read-only (the file and its folder are read-only), nothing can be saved\n")


def test_read_only_store_on_the_snapshots_page(archive):
    db, ids = archive
    out = unprivileged(_script(db, f"""
        import json, os
        os.environ["KVSIM_SNAPSHOT_DB"] = {str(db)!r}
        from streamlit.testing.v1 import AppTest
        at = AppTest.from_file("app_pages/snapshots.py", default_timeout=60)
        at.query_params["snapshot"] = {ids[0]!r}
        at.run()
        print(json.dumps({{"exception": bool(at.exception), "errors": [e.value for e in at.error],
                          "info": [i.value for i in at.info], "title": at.subheader[0].value if at.subheader else "",
                          "metrics": len(at.metric), "listed": at.dataframe[0].value["name"].tolist()}}))
    """), timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    page = json.loads(out.stdout.strip().splitlines()[-1])
    assert not page["exception"] and page["errors"] == []
    assert page["title"] == "s0" and page["metrics"] > 0 and sorted(page["listed"]) == ["s0", "s1"]
    assert any("read-only (the file and its folder are read-only)" in i for i in page["info"])


def test_wal_left_beside_a_read_only_store_is_named(archive):
    """A -wal file the folder's owner left behind cannot be read without write access: the store
    still opens (immutable) and the reason says which file holds the unread changes."""
    db, ids = archive
    folder = db.parent
    folder.chmod(0o755)
    (folder / "s.sqlite-wal").write_bytes(b"\x00" * 64)
    folder.chmod(0o555)
    out = unprivileged(_script(db, f"""
        from sim.report.snapshot_store import SnapshotStore
        store = SnapshotStore({str(db)!r})
        print(len(store.list()), store.read_only_why)
    """))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == ("2 the file and its folder are read-only; s.sqlite-wal holds changes "
                                                   "that cannot be read without write access")

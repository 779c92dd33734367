"""The store-damage suite (issue 13): truncated, garbage, wrong schema, locked, read-only folder and
file, concurrent writers, a writer killed mid-save. Each ends in one StoreError line saying which, a
damaged file is never overwritten, and nothing committed before the fault is lost."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from sim.__main__ import main as sim_main
from sim.report.snapshot import Snapshot, SnapshotError
from sim.report.snapshot_store import STORE_VERSION, SnapshotStore, StoreError, move_aside, open_store
from tests.test_charts import make_result

ROOT = Path(__file__).resolve().parent.parent


def snap() -> Snapshot:
    return Snapshot.from_result(make_result(), None)


def filled(path: Path, n: int = 3) -> list[str]:
    store = SnapshotStore(path)
    return [store.save(snap(), f"s{i}") for i in range(n)]


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_ids_are_128_bit_and_secrets_separate(tmp_path):
    store = SnapshotStore(tmp_path / "s.sqlite")
    saved = store.save_shared(snap(), "x")
    assert len(saved.id) >= 22 and len(saved.manage_secret) >= 22 and saved.id != saved.manage_secret
    raw = sqlite3.connect(tmp_path / "s.sqlite").execute("SELECT * FROM snapshots").fetchone()
    assert saved.manage_secret not in [str(v) for v in raw]  # only its hash is stored
    with pytest.raises(SnapshotError, match="wrong manage secret"):
        store.delete(saved.id, "nope")
    assert store.delete(saved.id, saved.manage_secret)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "zeroed-header"])
def test_damaged_file_one_line_and_moved_aside(tmp_path, damage):
    db = tmp_path / "s.sqlite"
    filled(db)
    data = db.read_bytes()
    db.write_bytes({"truncated": data[: len(data) // 3], "garbage": os.urandom(len(data)),
                    "zeroed-header": b"\0" * 100 + data[100:]}[damage])
    for f in (tmp_path / "s.sqlite-wal", tmp_path / "s.sqlite-shm"):
        f.unlink(missing_ok=True)
    before = db.read_bytes()
    with pytest.raises(StoreError) as info:
        SnapshotStore(db)
    assert info.value.kind == "damaged" and one_line(info.value).startswith("snapshot store s.sqlite: damaged")
    store, note = open_store(db)
    assert "moved aside to s.sqlite.damaged-" in note and store.list() == []
    aside = list(tmp_path.glob("s.sqlite.damaged-*"))
    assert [p.read_bytes() for p in aside if not p.name.endswith(("-wal", "-shm"))] == [before]


def test_wrong_schema(tmp_path):
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE users (name TEXT)").connection.commit()
    with pytest.raises(StoreError, match="another program") as info:
        SnapshotStore(other)
    assert info.value.kind == "damaged"
    odd = tmp_path / "odd.sqlite"
    sqlite3.connect(odd).execute("CREATE TABLE snapshots (id TEXT)").connection.commit()
    with pytest.raises(StoreError, match="wrong columns"):
        SnapshotStore(odd)
    newer = tmp_path / "newer.sqlite"
    SnapshotStore(newer)
    with sqlite3.connect(newer) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'store_version'")
    with pytest.raises(StoreError, match=f"newer than this app's {STORE_VERSION}"):
        SnapshotStore(newer)


def test_version_1_store_migrates_and_keeps_links(tmp_path):
    db = tmp_path / "v1.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE snapshots (id TEXT PRIMARY KEY, name TEXT NOT NULL, created_utc TEXT NOT NULL, "
                    "scenario_digest TEXT NOT NULL, trace_digest TEXT NOT NULL, body TEXT NOT NULL)")
        s = snap()
        con.execute("INSERT INTO snapshots VALUES ('old1', 'legacy', '2026', ?, ?, ?)",
                    (s.scenario.digest(), s.trace_digest, s.named("legacy").to_json()))
    store = SnapshotStore(db)
    assert store.get("old1").name == "legacy"  # the old link still opens
    assert store.list(public=True) == []  # but nobody lists it
    with pytest.raises(SnapshotError, match="wrong manage secret"):
        store.delete("old1", "anything")


def test_locked_store_is_a_message_and_waits(tmp_path, monkeypatch):
    db = tmp_path / "s.sqlite"
    kept = filled(db, 1)
    monkeypatch.setattr("sim.report.snapshot_store.BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        store = SnapshotStore.__new__(SnapshotStore)
        store.path, store.read_only, store._has_v2 = db, False, True
        with pytest.raises(StoreError) as info:
            store.save(snap(), "blocked")
        assert info.value.kind == "locked" and "busy" in one_line(info.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [s.id for s in SnapshotStore(db).list()] == kept


# A read-only folder and file, with permissions enforced as a non-root user: tests/test_snapshot_store_readonly.py


def test_read_only_kinds_without_permissions(tmp_path):
    """Whoever runs the tests (root included): a folder where the file should be, and a missing parent
    that cannot be created, are one line each."""
    with pytest.raises(StoreError, match="is a folder"):
        SnapshotStore(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot create its folder"):
        SnapshotStore(tmp_path / "file" / "sub" / "s.sqlite")


def _writer(args: tuple[str, int]) -> list[str]:
    path, n = args
    store = SnapshotStore(path)
    return [store.save(snap(), f"w{os.getpid()}-{i}") for i in range(n)]


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(tmp_path):
    db = str(tmp_path / "s.sqlite")
    SnapshotStore(db)
    with ProcessPoolExecutor(4) as pool:
        ids = [i for batch in pool.map(_writer, [(db, 8)] * 4) for i in batch]
    store = SnapshotStore(db)
    assert len(ids) == 32 and sorted(s.id for s in store.list()) == sorted(ids)
    assert store.check() == "ok"


KILLED_WRITER = """
import sys
sys.path.insert(0, {root!r})
from sim.report.snapshot import Snapshot
from sim.report.snapshot_store import SnapshotStore
from tests.test_charts import make_result
store = SnapshotStore({db!r})
snap = Snapshot.from_result(make_result(), None)
while True:
    print(store.save(snap, "loop"), flush=True)
"""


@pytest.mark.slow
def test_writer_killed_mid_save_loses_nothing_committed(tmp_path):
    db = tmp_path / "s.sqlite"
    kept = filled(db, 2)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER.format(root=str(ROOT), db=str(db))],
                            stdout=subprocess.PIPE, text=True)
    committed = []
    deadline = time.time() + 30
    while len(committed) < 20 and time.time() < deadline:
        committed.append(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGKILL)  # very likely in the middle of the next save
    proc.wait()
    store = SnapshotStore(db)
    assert store.check() == "ok"
    have = {s.id for s in store.list()}
    assert set(kept) | set(committed) <= have  # every save that returned is there


def test_move_aside_never_overwrites(tmp_path):
    db = tmp_path / "s.sqlite"
    db.write_bytes(b"one")
    first = move_aside(db)
    db.write_bytes(b"two")
    second = move_aside(db)
    assert first != second and first.read_bytes() == b"one" and second.read_bytes() == b"two"


def test_cli_operator_commands(tmp_path, capsys):
    db = str(tmp_path / "s.sqlite")
    ids = filled(Path(db), 2)
    assert sim_main(["snapshots", "--db", db, "list"]) == 0
    assert "2 snapshot(s)" in capsys.readouterr().out
    out = tmp_path / "one.kvsim.json"
    assert sim_main(["snapshots", "--db", db, "export", ids[0], "--out", str(out)]) == 0
    assert Snapshot.from_json(out.read_bytes()).name == "s0"
    assert sim_main(["snapshots", "--db", db, "import", str(out), "--name", "again", "--public", "--json"]) == 0
    assert "manage_secret" in capsys.readouterr().out
    assert sim_main(["snapshots", "--db", db, "delete", ids[1]]) == 0
    assert sim_main(["snapshots", "--db", db, "check"]) == 0
    assert sorted(s.name for s in SnapshotStore(db).list()) == ["again", "s0"]
    capsys.readouterr()
    assert sim_main(["snapshots", "--db", db, "delete", "nope"]) == 2
    assert capsys.readouterr().err == "error: snapshot 'nope': not found\n"
    Path(db + "-wal").unlink(missing_ok=True)
    Path(db).write_bytes(b"garbage" * 200)
    assert sim_main(["snapshots", "--db", db, "check"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert sim_main(["snapshots", "--db", db, "check", "--move-aside"]) == 0
    assert "moved aside to" in capsys.readouterr().out and SnapshotStore(db).list() == []


def test_a_fresh_id_never_starts_with_a_dash_so_the_cli_can_take_it(monkeypatch, tmp_path, capsys):
    """`sim snapshots delete ID` read an id starting with '-' as an option (1 id in 64). The store
    draws again when the random token starts with '-'; here the first two draws do."""
    import sim.report.snapshot_store as store_module

    real = store_module.secrets.token_urlsafe
    draws = iter(["-dash1", "-dash2"])
    monkeypatch.setattr(store_module.secrets, "token_urlsafe", lambda n: next(draws, None) or real(n))
    db = tmp_path / "s.sqlite"
    snap_id = SnapshotStore(db).save(Snapshot.from_result(make_result(), name="x"), "x")
    assert not snap_id.startswith("-") and len(snap_id) >= 22  # 16 random bytes, url-safe
    assert sim_main(["snapshots", "--db", str(db), "delete", snap_id]) == 0
    assert sim_main(["snapshots", "--db", str(db), "list"]) == 0
    assert "0 snapshot(s)" in capsys.readouterr().out

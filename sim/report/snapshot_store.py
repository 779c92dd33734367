"""The SQLite snapshot store: what a `?snapshot=ID` link opens.

Safe to share and hard to break:
- ids are 128-bit random (unguessable); each save also returns a separate manage secret (only its
  SHA-256 is stored) that deleting needs. A link lets anyone who has it read; only the secret deletes.
- a snapshot is listed to everyone only when saved as public; otherwise its link is the only way in.
- on open: `PRAGMA quick_check` and the schema version; WAL journal and a busy timeout, so readers
  never block the writer and concurrent writers wait instead of failing.
- damaged, locked and missing stores are StoreError lines that say which; a damaged file
  is never overwritten: `move_aside` renames it (the message says to what) and a fresh store starts.
- a read-only store (file, folder or mount: an archive, a locked-down server) is opened read-only
  (`mode=ro`, or `immutable` when the folder cannot hold the WAL index): listing and opening work,
  saving and deleting say in one line why they cannot.
- every body read back is validated as an untrusted snapshot file before anyone draws it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from models.safe_read import kind_of
from sim.report.snapshot import MAX_SNAPSHOT_BYTES, Snapshot, SnapshotError

STORE_VERSION = 2  # 1: the first table (no secrets); 2: manage_hash + public, meta table
DB_ENV = "KVSIM_SNAPSHOT_DB"
DEFAULT_DB = Path(__file__).resolve().parent.parent.parent / "data" / "snapshots.sqlite"
BUSY_TIMEOUT_S = 5.0
ID_BYTES = 16  # 128 bits


def fresh_token() -> str:
    """A fresh url-safe token of ID_BYTES random bytes that does not start with '-': an id is typed
    on the command line (`sim snapshots delete ID`), where a leading '-' reads as an option (1 id in
    64 did; the CI run of 2026-11-27 hit one)."""
    while True:
        token = secrets.token_urlsafe(ID_BYTES)
        if not token.startswith("-"):
            return token
MAX_NAME = 200
_COLUMNS = ("id", "name", "created_utc", "scenario_digest", "trace_digest", "body")
_DAMAGE = ("not a database", "malformed", "corrupt", "disk image", "file is encrypted", "no such table")


class StoreError(SnapshotError):
    """The store cannot be used (damaged, locked, read-only, missing); `kind` says which."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class SnapshotInfo:
    """One row of the store's list (no body)."""

    id: str
    name: str
    created_utc: str
    scenario_digest: str
    trace_digest: str
    size_bytes: int
    public: bool = False


@dataclass(frozen=True)
class Saved:
    """What a save hands back once: the link id and the secret that can delete it."""

    id: str
    manage_secret: str


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class SnapshotStore:
    """Named snapshots in one SQLite file. A connection per call, so Streamlit threads never share one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.read_only = False
        self.read_only_why = ""  # why nothing can be saved, when read_only
        self._ro_uri = ""
        self._open()

    @classmethod
    def default(cls) -> SnapshotStore:
        """The store at $KVSIM_SNAPSHOT_DB, else data/snapshots.sqlite in the repository."""
        return cls(store_path())

    # ----- opening and checking -----------------------------------------------------------------
    def _open(self) -> None:
        name = self.path.name
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"snapshot store {name}: cannot create its folder ({exc.strerror})", "unavailable") from None
        exists = self.path.exists()
        if exists and not self.path.is_file():
            raise StoreError(f"snapshot store {name}: is {kind_of(self.path.stat().st_mode)}, not a database file",
                             "unavailable")
        self.read_only_why = self._why_read_only(exists)
        self.read_only = bool(self.read_only_why)
        if self.read_only and not exists:
            raise StoreError(f"snapshot store {name}: its folder is read-only, nothing can be saved", "read-only")
        try:
            self._check_on_open()
        except StoreError as exc:
            if exc.kind != "read-only" or self.read_only:
                raise
            # the permission bits said writable but SQLite was refused (a read-only mount, an ACL): read it
            self.read_only, self.read_only_why = True, "the file system refused writes"
            self._check_on_open()

    def _why_read_only(self, exists: bool) -> str:
        if exists and not os.access(self.path, os.W_OK):
            return "the file is read-only" if os.access(self.path.parent, os.W_OK) else "the file and its folder are read-only"
        if not os.access(self.path.parent, os.W_OK):
            return "its folder is read-only"
        return ""

    def _check_on_open(self) -> None:
        if self.read_only:
            self._ro_uri = self._read_only_uri()
        with self._connect() as db:
            if not self.read_only:
                db.execute("PRAGMA journal_mode=WAL")
            result = db.execute("PRAGMA quick_check").fetchone()
            if not result or result[0] != "ok":
                raise StoreError(f"snapshot store {self.path.name}: damaged ({str(result[0] if result else 'no answer')[:80]})",
                                 "damaged")
            self._schema(db)

    def _read_only_uri(self) -> str:
        """How to read a store we may not write. `mode=ro` needs the WAL index (-shm) file, which a
        read-only folder cannot hold; then the file is opened `immutable` (no locks, no -wal/-shm: an
        archive nobody writes). A -wal file left beside it would then go unread, which the reason says."""
        base = self.path.resolve().as_uri()
        try:
            probe = sqlite3.connect(f"{base}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
            try:
                probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                probe.close()
            return f"{base}?mode=ro"
        except sqlite3.Error:
            wal = self.path.with_name(self.path.name + "-wal")
            if wal.exists() and wal.stat().st_size > 0:
                self.read_only_why += f"; {wal.name} holds changes that cannot be read without write access"
            return f"{base}?mode=ro&immutable=1"

    def _schema(self, db: sqlite3.Connection) -> None:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "snapshots" not in tables:
            if tables - {"meta"}:
                raise StoreError(f"snapshot store {self.path.name}: a SQLite file of another program "
                                 f"(tables: {', '.join(sorted(tables))[:80]})", "damaged")
            if self.read_only:
                raise StoreError(f"snapshot store {self.path.name}: empty and read-only", "read-only")
            db.execute("CREATE TABLE snapshots (id TEXT PRIMARY KEY, name TEXT NOT NULL, created_utc TEXT NOT NULL, "
                       "scenario_digest TEXT NOT NULL, trace_digest TEXT NOT NULL, body TEXT NOT NULL, "
                       "manage_hash TEXT, public INTEGER NOT NULL DEFAULT 0)")
        columns = [r[1] for r in db.execute("PRAGMA table_info(snapshots)")]
        if not set(_COLUMNS) <= set(columns):
            raise StoreError(f"snapshot store {self.path.name}: the snapshots table has the wrong columns", "damaged")
        version = self._version(db, tables)
        if version > STORE_VERSION:
            raise StoreError(f"snapshot store {self.path.name}: version {version} is newer than this app's "
                             f"{STORE_VERSION}", "damaged")
        if version < STORE_VERSION and not self.read_only:  # v1 -> v2: links keep working, nothing listed
            if "manage_hash" not in columns:
                db.execute("ALTER TABLE snapshots ADD COLUMN manage_hash TEXT")
            if "public" not in columns:
                db.execute("ALTER TABLE snapshots ADD COLUMN public INTEGER NOT NULL DEFAULT 0")
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('store_version', ?)", (str(STORE_VERSION),))
        self._has_v2 = {"manage_hash", "public"} <= {r[1] for r in db.execute("PRAGMA table_info(snapshots)")}

    @staticmethod
    def _version(db: sqlite3.Connection, tables: set[str]) -> int:
        if "meta" not in tables:
            return 1
        row = db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone()
        try:
            return int(row[0]) if row else 1
        except ValueError:
            return 10**9

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """One transaction on a fresh connection, committed on success and always closed; sqlite3
        errors become StoreError lines that say whether the store is damaged, locked or read-only."""
        try:
            if self.read_only:
                db = sqlite3.connect(self._ro_uri, uri=True, timeout=BUSY_TIMEOUT_S)
            else:
                db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        try:
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            with db:
                yield db
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        finally:
            db.close()

    def _error(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc).lower()
        name = self.path.name
        if "locked" in text or "busy" in text:
            return StoreError(f"snapshot store {name}: busy (locked by another writer for over "
                              f"{BUSY_TIMEOUT_S:g} s); try again", "locked")
        if "readonly" in text or "read-only" in text:
            return StoreError(f"snapshot store {name}: read-only, nothing can be saved or deleted", "read-only")
        if any(word in text for word in _DAMAGE):
            return StoreError(f"snapshot store {name}: damaged ({str(exc)[:80]})", "damaged")
        if "unable to open" in text:
            return StoreError(f"snapshot store {name}: cannot be opened (permissions?)", "unavailable")
        if "disk is full" in text or "disk i/o" in text:
            return StoreError(f"snapshot store {name}: the disk is full or failing ({str(exc)[:60]})", "unavailable")
        return StoreError(f"snapshot store {name}: {str(exc)[:120]}", "unavailable")

    def check(self) -> str:
        """Full integrity check (`PRAGMA integrity_check`): "ok" or the first problem."""
        with self._connect() as db:
            row = db.execute("PRAGMA integrity_check").fetchone()
        return str(row[0]) if row else "no answer"

    # ----- writing ----------------------------------------------------------------------------
    def save(self, snapshot: Snapshot, name: str, *, public: bool = False) -> str:
        """Store under a fresh unguessable id and return the id (see `save_shared` for the manage secret)."""
        return self.save_shared(snapshot, name, public=public).id

    def save_shared(self, snapshot: Snapshot, name: str, *, public: bool = False) -> Saved:
        """Store under a fresh 128-bit id; the returned secret is the only way to delete it later."""
        if self.read_only:
            raise StoreError(f"snapshot store {self.path.name}: read-only ({self.read_only_why}), nothing can be saved; "
                             "snapshots in it can still be opened", "read-only")
        name = " ".join(str(name).split())[:MAX_NAME] or "unnamed"
        body = snapshot.named(name).to_json()
        if len(body) > MAX_SNAPSHOT_BYTES:
            raise SnapshotError(f"snapshot: {len(body):,} bytes is over the {MAX_SNAPSHOT_BYTES:,}-byte limit")
        saved = Saved(fresh_token(), fresh_token())
        created = snapshot.created_utc or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._connect() as db:
            db.execute("INSERT INTO snapshots (id, name, created_utc, scenario_digest, trace_digest, body, manage_hash, "
                       "public) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (saved.id, name, created, snapshot.scenario.digest(), snapshot.trace_digest, body,
                        _hash(saved.manage_secret), int(bool(public))))
        return saved

    def delete(self, snap_id: str, manage_secret: str | None = None, *, operator: bool = False) -> bool:
        """Delete with the snapshot's manage secret (or `operator=True`: the `sim snapshots` command).
        False when there is no such snapshot; SnapshotError when the secret is wrong."""
        if self.read_only:
            raise StoreError(f"snapshot store {self.path.name}: read-only ({self.read_only_why}), nothing can be deleted",
                             "read-only")
        with self._connect() as db:
            row = db.execute("SELECT manage_hash FROM snapshots WHERE id = ?", (str(snap_id),)).fetchone()
            if row is None:
                return False
            if not operator and not (manage_secret and row[0] and hmac.compare_digest(row[0], _hash(manage_secret))):
                raise SnapshotError("snapshot: wrong manage secret (only the secret given at save time deletes it)")
            db.execute("DELETE FROM snapshots WHERE id = ?", (str(snap_id),))
        return True

    def import_json(self, data: bytes | str, source: str, name: str | None = None, *, public: bool = False) -> Saved:
        """An exported snapshot file back into the store (validated like any upload)."""
        if self.read_only:
            raise StoreError(f"snapshot store {self.path.name}: read-only ({self.read_only_why}), nothing can be saved",
                             "read-only")
        snap = Snapshot.from_json(data, source)
        return self.save_shared(snap, name if name is not None else snap.name, public=public)

    # ----- reading ----------------------------------------------------------------------------
    def get(self, snap_id: str) -> Snapshot:
        with self._connect() as db:
            row = db.execute("SELECT body FROM snapshots WHERE id = ?", (str(snap_id)[:100],)).fetchone()
        if row is None:
            raise SnapshotError(f"snapshot {str(snap_id)[:40]!r}: not found")
        return Snapshot.from_json(row[0], f"snapshot {str(snap_id)[:40]}")

    def export_json(self, snap_id: str) -> str:
        """The stored body, checked: what `sim snapshots export` writes."""
        return self.get(snap_id).to_json()

    def list(self, *, ids: list[str] | tuple[str, ...] | None = None, public: bool = False) -> list[SnapshotInfo]:
        """Every snapshot (operators) or, with `ids`/`public`, those ids plus the public ones (a page's view)."""
        where, args = "", []
        if ids is not None or public:
            keys = [str(i) for i in (ids or ())][:1000]
            where = f"WHERE id IN ({','.join('?' * len(keys))})" if keys else "WHERE 0"
            if public and self._has_v2:
                where += " OR public = 1"
            args = keys
        pub = "public" if self._has_v2 else "0"
        with self._connect() as db:
            rows = db.execute(f"SELECT id, name, created_utc, scenario_digest, trace_digest, length(body), {pub} "
                              f"FROM snapshots {where} ORDER BY created_utc DESC, rowid DESC", args).fetchall()
        return [SnapshotInfo(id_, name, created, scenario_digest, trace_digest, size, public=bool(pub))
                for id_, name, created, scenario_digest, trace_digest, size, pub in rows]


def move_aside(path: str | Path) -> Path:
    """Rename a damaged store (and its -wal/-shm files) to <name>.damaged-<UTC time>; never overwrite it."""
    p = Path(path)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = p.with_name(f"{p.name}.damaged-{stamp}")
    n = 1
    while target.exists():
        target = p.with_name(f"{p.name}.damaged-{stamp}-{n}")
        n += 1
    p.rename(target)
    for suffix in ("-wal", "-shm"):
        side = p.with_name(p.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return target


def store_path(path: str | Path | None = None) -> Path:
    """The given path, else $KVSIM_SNAPSHOT_DB, else data/snapshots.sqlite in the repository."""
    return Path(path) if path is not None else Path(os.environ.get(DB_ENV) or DEFAULT_DB)


def open_store(path: str | Path | None = None, *, recover: bool = True) -> tuple[SnapshotStore, str]:
    """The store, and a note when a damaged file had to be moved aside to get a working one (the
    dashboard shows it; nothing in the damaged file is deleted). Other failures raise StoreError."""
    target = store_path(path)
    try:
        return SnapshotStore(target), ""
    except StoreError as exc:
        if exc.kind != "damaged" or not recover:
            raise
        moved = move_aside(target)
        return SnapshotStore(target), (f"{exc} - it was moved aside to {moved.name} (next to the store) and a new, "
                                       "empty store started; an operator can inspect it with `python -m sim snapshots`")

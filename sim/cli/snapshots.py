"""`python -m sim snapshots list|export|import|delete|check`: the snapshot store, for operators.

Operators have the file, so `delete` needs no manage secret. A damaged store is reported by `check`
(exit 2) and only moved aside with `check --move-aside`, never overwritten.
"""

from __future__ import annotations

import argparse
from typing import Any

from sim.cli.common import CliError, print_json


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("snapshots", help="list, export, import, delete or check saved snapshots",
                              description="Operate the dashboard's snapshot store ($KVSIM_SNAPSHOT_DB or "
                              "data/snapshots.sqlite).")
    p.add_argument("--db", metavar="PATH", help="store file (default: $KVSIM_SNAPSHOT_DB or data/snapshots.sqlite)")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = sub.add_parser("list", help="every snapshot: id, name, saved, public, size")
    ls.add_argument("--json", action="store_true")
    ex = sub.add_parser("export", help="write one snapshot as a .kvsim.json file")
    ex.add_argument("id")
    ex.add_argument("--out", metavar="FILE", help="default: stdout")
    im = sub.add_parser("import", help="add a snapshot file; prints its id and manage secret")
    im.add_argument("file")
    im.add_argument("--name", help="default: the name inside the file")
    im.add_argument("--public", action="store_true", help="list it for every visitor")
    im.add_argument("--json", action="store_true")
    de = sub.add_parser("delete", help="delete one snapshot (operators need no manage secret)")
    de.add_argument("id")
    ch = sub.add_parser("check", help="integrity check; exit 2 when damaged")
    ch.add_argument("--move-aside", action="store_true", help="rename a damaged store and start a new one")
    return p


def run(args: argparse.Namespace) -> int:
    from sim.report.snapshot_store import open_store

    if args.action == "check":
        return _check(args)
    store, _ = open_store(args.db, recover=False)
    if args.action == "list":
        rows = [vars(i) | {"public": i.public} for i in store.list()]
        if args.json:
            print_json(rows)
        else:
            for r in rows:
                print(f"{r['id']}  {r['created_utc']}  {'public ' if r['public'] else 'private'}  "
                      f"{r['size_bytes'] / 1024:8.1f} KB  {r['name']}")
            print(f"{len(rows)} snapshot(s) in {store.path}")
    elif args.action == "export":
        text = store.export_json(args.id)
        if args.out:
            from sim.guard.files import write_text

            write_text(args.out, text + "\n", CliError, what="snapshot")
        else:
            print(text)
    elif args.action == "import":
        from sim.guard.files import read_limited
        from sim.report.snapshot import MAX_SNAPSHOT_BYTES

        data = read_limited(args.file, MAX_SNAPSHOT_BYTES, CliError, what="snapshot")
        saved = store.import_json(data, args.file, args.name, public=args.public)
        if args.json:
            print_json({"id": saved.id, "manage_secret": saved.manage_secret})
        else:
            print(f"imported as {saved.id} (link: /?snapshot={saved.id}); manage secret: {saved.manage_secret}")
    elif args.action == "delete":
        if not store.delete(args.id, operator=True):
            raise CliError(f"snapshot {args.id[:40]!r}: not found")
        print(f"deleted {args.id}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from sim.report.snapshot_store import StoreError, move_aside, open_store, store_path

    try:
        store, _ = open_store(args.db, recover=False)
        result = store.check()
    except StoreError as exc:
        if exc.kind != "damaged" or not args.move_aside:
            raise
        path = store_path(args.db)
        moved = move_aside(path)
        open_store(path)
        print(f"{exc}; moved aside to {moved} and started a new store at {path}")
        return 0
    if result != "ok":
        raise CliError(f"snapshot store {store.path}: integrity check failed ({result[:120]})")
    print(f"ok: {store.path}, {len(store.list())} snapshot(s)")
    return 0

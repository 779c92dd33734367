"""Files named by a user: one line for every way opening, reading or writing them can fail.

Permission denied, a directory, FIFO or device where a file is expected, a name too long, a missing
parent folder, a read-only or full disk, a read that stalls: each becomes `error("<path>: <problem>")`,
never an OSError traceback or a hang. Reading is models/safe_read.py (models/ uses it too).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from models.safe_read import READ_STALL_S, read_regular, why

__all__ = ["READ_STALL_S", "read_limited", "read_regular", "why", "write_text"]


def read_limited(path: str | Path, max_bytes: int, error: type[Exception], what: str = "file") -> bytes:
    """The bytes of a regular file of at most max_bytes; one-line `error` for anything else (a folder,
    a FIFO or device, too large, unreadable, a read stalled past READ_STALL_S): models/safe_read.py."""
    return read_regular(path, max_bytes, error, what)


def write_text(path: str | Path, text: str, error: type[Exception], *, what: str = "file") -> None:
    """Write a whole file atomically (temp + rename) so a full disk never leaves half a file."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    try:
        if p.is_dir():
            raise error(f"{p}: is a folder, cannot write the {what} there")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise error(f"{p}: cannot write the {what} ({why(exc)})") from None

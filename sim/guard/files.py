"""Files named by a user: one line for every way opening, reading or writing them can fail.

Permission denied, a directory where a file is expected, a name too long, a missing parent folder,
a read-only or full disk: each becomes `error("<path>: <problem>")`, never an OSError traceback.
"""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path

_WHY = {
    errno.ENOENT: "no such file or folder",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EISDIR: "is a folder, not a file",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENAMETOOLONG: "name too long",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.ELOOP: "too many symbolic links",
}


def why(exc: OSError) -> str:
    """A short reason for an OSError, without the path (callers put the path they were given)."""
    return _WHY.get(exc.errno or 0, exc.strerror or type(exc).__name__)


def read_limited(path: str | Path, max_bytes: int, error: type[Exception], what: str = "file") -> bytes:
    """The bytes of a regular file of at most max_bytes; one-line `error` for anything else."""
    p = Path(path)
    try:
        if p.is_dir():
            raise error(f"{p}: is a folder, not a file")
        size = p.stat().st_size
        if size > max_bytes:
            raise error(f"{p}: {size:,} bytes is over the {max_bytes:,}-byte limit for a {what}")
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{p}: cannot read ({why(exc)})") from None
    if len(data) > max_bytes:  # grew while we read it
        raise error(f"{p}: over the {max_bytes:,}-byte limit for a {what}")
    return data


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


def make_dir(path: str | Path, error: type[Exception], what: str = "output folder") -> Path:
    """Create a folder (parents too) and check we can write into it."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".kvsim-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except FileExistsError:
        raise error(f"{p}: exists and is not a folder, cannot use it as the {what}") from None
    except OSError as exc:
        raise error(f"{p}: cannot use it as the {what} ({why(exc)})") from None
    return p

"""Reading a file a user named, one safe way: regular files only, size-bounded, never blocking forever.

A named pipe (FIFO) blocks `open()` until someone writes to it, a device can stream without end,
and a stalled network file system can hang a read for minutes: each would hang the CLI or a
dashboard worker. So the path is opened non-blocking (a FIFO opens at once), refused unless fstat
says it is a regular file, and read in a helper thread whose progress is awaited with a timeout.
A leaf module (no project imports) so models/ and sim/ share it; sim.guard.files re-exports it.
"""

from __future__ import annotations

import errno
import os
import queue
import stat
import threading
from pathlib import Path
from typing import Any

READ_STALL_S = 20.0  # no byte for this long: a stalled file system, not a slow disk
CHUNK = 16 << 20  # progress is reported per chunk; the join at the end is one copy
_WHY = {
    errno.ENOENT: "no such file or folder", errno.EACCES: "permission denied", errno.EPERM: "permission denied",
    errno.EISDIR: "is a folder, not a file", errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENAMETOOLONG: "name too long", errno.ELOOP: "too many symbolic links", errno.ENXIO: "no such device",
    errno.EROFS: "read-only file system", errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
}


def why(exc: OSError) -> str:
    """A short reason for an OSError, without the path (callers put the path they were given)."""
    return _WHY.get(exc.errno or 0, exc.strerror or type(exc).__name__)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | Path, max_bytes: int, error: type[Exception], what: str = "file",
                 stall_s: float = READ_STALL_S) -> bytes:
    """The bytes of the regular file `path` (at most max_bytes). Anything else is one line
    `error("<path>: <problem>")`: a folder, FIFO, device or socket ("is a named pipe (FIFO), not a
    regular file"), too large, unreadable, or no data for `stall_s` seconds."""
    p = Path(path)
    results: queue.Queue[tuple[str, Any]] = queue.Queue()
    threading.Thread(target=_read_into, args=(p, max_bytes, results), daemon=True, name="kvsim-read").start()
    while True:
        try:
            kind, value = results.get(timeout=stall_s)
        except queue.Empty:  # the thread stays blocked in the kernel; this caller goes on
            raise error(f"{p}: no data for {stall_s:g} s (a stalled network file system?); not read") from None
        if kind == "progress":
            continue
        if kind == "data":
            return value
        if kind == "special":
            raise error(f"{p}: is {value}, not a {'file' if value == 'a folder' else 'regular file'}")
        if kind == "size":
            raise error(f"{p}: {value:,} bytes is too large for a {what} (limit {max_bytes:,} bytes)")
        raise error(f"{p}: cannot read ({value})")


def _read_into(p: Path, max_bytes: int, results: queue.Queue[tuple[str, Any]]) -> None:
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # O_NONBLOCK: a FIFO opens at once
    except OSError as exc:
        try:  # a socket cannot be opened at all (ENXIO): say what it is rather than "no such device"
            mode = os.stat(p).st_mode
        except OSError:
            mode = stat.S_IFREG
        results.put(("special", kind_of(mode)) if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode) else ("error", why(exc)))
        return
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            results.put(("special", kind_of(info.st_mode)))
            return
        if info.st_size > max_bytes:
            results.put(("size", info.st_size))
            return
        os.set_blocking(fd, True)
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            results.put(("progress", None))
        if total > max_bytes:  # grew while we read it
            results.put(("size", total))
        else:
            results.put(("data", b"".join(chunks)))
    except OSError as exc:
        results.put(("error", why(exc)))
    finally:
        os.close(fd)

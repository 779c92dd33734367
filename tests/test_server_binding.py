"""`make run` listens on 127.0.0.1 only (issue 13): read the kernel's table of listening sockets while
the real Makefile target serves, and check that every socket on its port is loopback."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listeners(port: int) -> list[str]:
    """Local addresses in LISTEN state on `port`, from /proc/net/tcp and tcp6."""
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.append(socket.inet_ntoa(bytes.fromhex(addr)[::-1]) if width == 8 else addr)
    return found


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/net/tcp") or not shutil.which("make"), reason="needs Linux /proc and make")
def test_make_run_listens_on_loopback_only():
    port = _free_port()
    # -o: use the installed venv as it is (the suite already runs inside it); the recipe is what is tested
    proc = subprocess.Popen(["make", "-o", ".venv/.installed-stamp", "run", f"PORT={port}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and not listeners(port):
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
            time.sleep(0.5)
        time.sleep(1)
        found = listeners(port)
        assert found and all(a == "127.0.0.1" for a in found), found
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)

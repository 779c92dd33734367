"""Issue 29: only regular files are read (models/safe_read.py through sim.guard.files): a FIFO, a
device or a folder is refused in one line at once, never a hang; a read that stalls times out."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from models.gpus import GpuError, load_gpu_file
from models.safe_read import read_regular
from models.spec import SpecError, load_spec
from sim.trace import TraceError, load_trace

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


def _prompt(call, error, message: str) -> None:
    start = time.monotonic()
    with pytest.raises(error, match=message) as exc:
        call()
    assert time.monotonic() - start < 5 and "\n" not in str(exc.value)


def test_a_fifo_without_a_writer_is_refused_at_once(fifo):
    """open() of a FIFO blocks until a writer comes: these calls used to hang forever."""
    _prompt(lambda: load_trace(fifo), TraceError, r"pipe.json: is a named pipe \(FIFO\), not a regular file$")
    _prompt(lambda: load_gpu_file(fifo), GpuError, "is a named pipe")
    _prompt(lambda: load_spec(str(fifo)), SpecError, "is a named pipe")


def test_a_fifo_with_an_endless_writer_is_refused(fifo):
    stop = threading.Event()

    def write() -> None:
        fd = os.open(fifo, os.O_WRONLY)  # blocks until the reader opens
        try:
            while not stop.is_set():
                os.write(fd, b"0,5,3\n" * 1000)
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        _prompt(lambda: load_trace(fifo), TraceError, "is a named pipe")
    finally:
        stop.set()
        with open(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), "rb", closefd=True):  # let a blocked writer go
            pass
        writer.join(timeout=5)


@pytest.mark.parametrize(("path", "what"), [("/dev/zero", "a character device"), ("/dev/null", "a character device")])
def test_devices_are_refused(path, what):
    _prompt(lambda: load_trace(path), TraceError, f"{path}: is {what}, not a regular file")


def test_a_folder_is_refused(tmp_path):
    _prompt(lambda: load_trace(tmp_path), TraceError, "is a folder, not a file")


def test_cli_names_the_fifo_and_exits_2(fifo):
    for argv in (["trace", str(fifo)], ["run", "--synthetic", "n=3", "--model", "llama-3-8b", "--gpu", str(fifo)],
                 ["snapshots", "--db", str(fifo.parent / "s.sqlite"), "import", str(fifo)]):
        cli = subprocess.run([sys.executable, "-m", "sim", *argv], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert cli.returncode == 2 and cli.stderr.strip().endswith("is a named pipe (FIFO), not a regular file"), cli.stderr


def test_a_stalled_read_times_out(tmp_path, monkeypatch):
    """A stalled network file system, simulated: os.read blocks until released. The caller gets one
    line after stall_s; the blocked helper thread is released at the end of the test."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0,5,3\n")
    release = threading.Event()
    real_read = os.read

    def stalled(fd: int, n: int) -> bytes:
        release.wait(10)
        return real_read(fd, n)

    monkeypatch.setattr("models.safe_read.os.read", stalled)
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"t.csv: no data for 0.3 s \(a stalled network file system\?\); not read$"):
        read_regular(path, 1 << 20, ValueError, stall_s=0.3)
    assert time.monotonic() - start < 3
    release.set()


def test_regular_files_read_whole_and_bounded(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    assert read_regular(path, 100, ValueError) == b"x" * 100
    with pytest.raises(ValueError, match=r"100 bytes is too large for a file \(limit 99 bytes\)"):
        read_regular(path, 99, ValueError)
    with pytest.raises(ValueError, match="no such file"):
        read_regular(tmp_path / "missing", 99, ValueError)

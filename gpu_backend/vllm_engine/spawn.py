"""Start a process in vLLM's environment: directly, or forked from a warm zygote when one is running.

Every vLLM run (a worker, `gpu_backend conform`, the OpenAI server of tests/test_observe_vllm.py)
is a process of .venv-vllm's Python, and each pays vLLM's import (~25 s of CPU here). With
KVSIM_VLLM_ZYGOTE naming the socket of a running zygote (gpu_backend/vllm_engine/zygote.py,
started by `start_zygote`), `spawn` asks the zygote to fork the run instead: the same code runs
with the same argv, environment, folder and standard streams, minus the import. `make test` starts
one zygote per pytest worker (tests/conftest.py). Without the variable, or when its zygote is not
answering, `spawn` starts the process as it always did.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

ZYGOTE_ENV = "KVSIM_VLLM_ZYGOTE"
# OpenMP threads of every vLLM process (its OMP_NUM_THREADS), when set. vLLM on CPU runs one OpenMP
# thread per core, bound and spinning at barriers: beside other work on a 2-core machine a tiny
# model's engine then ran ~5x slower (tests/test_vllm_conform.py's seven runs: 231 s against 43 s
# with 1 thread, both cores busy). tests/conftest.py sets 1; unset, vLLM chooses.
OMP_THREADS_ENV = "KVSIM_VLLM_OMP_THREADS"
ZYGOTE = Path(__file__).with_name("zygote.py")


class ZygoteChild:
    """The parts of subprocess.Popen the callers use, for a run the zygote forked."""

    def __init__(self, conn: socket.socket, stdin: IO[str] | None, stdout: IO[str] | None) -> None:
        self._conn, self._buf = conn, b""
        self.stdin, self.stdout = stdin, stdout
        self.returncode: int | None = None
        self.pid = int(self._line("pid", None))

    def _line(self, kind: str, timeout: float | None) -> str:
        """The value of the next "kind value" line on the connection (raises TimeoutError, EOFError)."""
        self._conn.settimeout(timeout)
        while True:
            for line in self._buf.decode().splitlines(keepends=True):
                if line.endswith("\n") and line.startswith(kind + " "):
                    self._buf = self._buf.replace(line.encode(), b"", 1)
                    return line.split()[1]
            more = self._conn.recv(4096)
            if not more:
                raise EOFError(f"zygote connection closed before its {kind} line")
            self._buf += more

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(timeout=0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self.returncode = int(self._line("exit", timeout))
            except (TimeoutError, BlockingIOError):
                raise subprocess.TimeoutExpired(str(ZYGOTE), timeout or 0.0) from None
            except (EOFError, OSError):
                self.returncode = -signal.SIGKILL  # ended without reporting: killed
            self._conn.close()
        return self.returncode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


def spawn(argv: list[str], *, env: dict[str, str], cwd: str | Path, stdin: Any = None, stdout: Any = None,
          stderr: Any = None, python: Path, start_new_session: bool = False) -> subprocess.Popen | ZygoteChild:
    """`python argv...` in .venv-vllm, text mode (argv: a script path, "-m" module or "-c" code, then
    its arguments). Streams as Popen's: None, subprocess.PIPE (stdin, stdout), subprocess.DEVNULL,
    a file, or subprocess.STDOUT for stderr."""
    env = with_omp_threads(env)
    path = os.environ.get(ZYGOTE_ENV)
    if path and Path(path).exists():
        try:
            return _from_zygote(path, python, argv, env, cwd, stdin, stdout, stderr, start_new_session)
        except OSError:
            pass  # no zygote answering, or one of another interpreter: start the process directly
    return subprocess.Popen([str(python), *argv], stdin=stdin, stdout=stdout, stderr=stderr, text=True, env=env,
                            cwd=str(cwd), start_new_session=start_new_session)


def with_omp_threads(env: dict[str, str]) -> dict[str, str]:
    """`env` with OMP_NUM_THREADS from KVSIM_VLLM_OMP_THREADS when that is set (in `env` or here)."""
    threads = env.get(OMP_THREADS_ENV) or os.environ.get(OMP_THREADS_ENV)
    return {**env, "OMP_NUM_THREADS": threads} if threads else env


def run_captured(argv: list[str], *, python: Path, cwd: str | Path, env: dict[str, str] | None = None,
                 timeout_s: float = 300.0) -> tuple[int, str, str]:
    """`spawn` to the end: (exit status, stdout, stderr's last 4,000 characters). Killed at timeout_s."""
    with tempfile.TemporaryFile("w+") as err:
        proc = spawn(argv, env=dict(os.environ) if env is None else env, cwd=cwd, stdin=subprocess.DEVNULL,
                     stdout=subprocess.PIPE, stderr=err, python=python)
        assert proc.stdout is not None
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            out = proc.stdout.read()
            rc = proc.wait()
        finally:
            timer.cancel()
            proc.stdout.close()
        err.seek(0)
        return rc, out, err.read()[-4000:]


def _from_zygote(path: str, python: Path, argv: list[str], env: dict[str, str], cwd: str | Path, stdin: Any, stdout: Any,
                 stderr: Any, new_session: bool) -> ZygoteChild:
    ours: list[Any] = [None, None]  # our ends of the pipes, as Popen's stdin / stdout
    theirs: list[int] = []  # the child's 0, 1, 2
    for i, (stream, mode) in enumerate(((stdin, "w"), (stdout, "r"), (stderr, "r"))):
        if stream == subprocess.PIPE and i < 2:
            r, w = os.pipe()
            mine, child = (w, r) if mode == "w" else (r, w)
            ours[i] = open(mine, mode)  # noqa: SIM115  # handed to the caller, as Popen's pipes are
            theirs.append(child)
        elif stream is None:
            theirs.append(os.dup(i))  # inherited, as Popen's None
        elif stream == subprocess.DEVNULL:
            theirs.append(os.open(os.devnull, os.O_RDWR))
        elif stream == subprocess.STDOUT and i == 2:
            theirs.append(os.dup(theirs[1]))
        else:
            theirs.append(os.dup(stream.fileno()))  # a file
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = json.dumps({"python": str(python), "argv": [str(a) for a in argv], "env": env, "cwd": str(cwd),
                              "new_session": new_session}) + "\n"
        socket.send_fds(conn, [request.encode()], theirs)
        return ZygoteChild(conn, ours[0], ours[1])
    except (OSError, EOFError, ValueError) as exc:
        conn.close()
        for f in ours:
            if f is not None:
                f.close()
        raise OSError(f"zygote at {path}: {exc}") from exc
    finally:
        for fd in theirs:
            os.close(fd)


def start_zygote(python: Path, path: Path, *, env: dict[str, str], log: IO[str] | None = None,
                 timeout_s: float = 300.0, preload: list[str] | None = None) -> subprocess.Popen:
    """Start a zygote in vLLM's environment listening on `path`, and wait until it has imported vLLM
    (its socket appears). `preload`: other modules to import first than vLLM's (zygote.PRELOAD).
    Raises RuntimeError if it exits first or times out."""
    extra = [] if preload is None else [",".join(preload)]
    proc = subprocess.Popen([str(python), str(ZYGOTE), str(path), *extra], env=with_omp_threads(env), stdin=subprocess.DEVNULL,
                            stdout=log or subprocess.DEVNULL, stderr=log or subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"vLLM zygote did not start (exit {proc.poll()})")
        time.sleep(0.2)
    return proc

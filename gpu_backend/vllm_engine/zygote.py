"""A warm vLLM process that forks each vLLM run, so vLLM's import is paid once (runs in .venv-vllm).

Importing vLLM takes ~25 s of CPU on a 2-core machine, most of a short run's start. This process
imports what a worker (worker.py) and the OpenAI server import, then listens on a Unix socket.
Each connection sends one JSON line {"python", "argv", "env", "cwd"} with three file descriptors
(the run's stdin, stdout and stderr). The zygote forks a child that runs `argv` as `python argv...`
would (a script path, "-m module" or "-c code"), with that environment and folder, and answers
"pid N". A request for another interpreter than this one is refused: the connection closes with
no pid. When the child ends it writes "exit S" on the connection (either line may come first); a
child killed by a signal writes nothing, and the client reads the connection's end as a kill. The
child is a fresh fork of an idle, imported process: vLLM itself forks its workers after importing
itself in the same way.

Stdlib only before the preload, like worker.py: it runs in vLLM's environment, not the project's.
Started by gpu_backend/vllm_engine/spawn.py (`start_zygote`); `make test` uses one per pytest worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import signal
import socket
import sys
import traceback

PRELOAD = ("vllm", "vllm.v1.engine.llm_engine", "vllm.inputs", "vllm.entrypoints.openai.api_server")


def preload(names: tuple[str, ...] | list[str]) -> None:
    """Import what the runs import, in this process, before any fork."""
    import importlib

    for name in names:
        importlib.import_module(name)


def run_child(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: take the run's descriptors, environment and folder, run its argv, and
    report the exit status on `conn`. Never returns."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote ignores it; a run waits for its own children
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115  # rebound to the new descriptors
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        if request.get("new_session"):
            os.setsid()  # its own process group, as Popen(start_new_session=True): killpg stops it and its children
        argv = list(request["argv"])
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102  # as `python -c`
        else:
            sys.argv = argv
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))  # as `python script.py` does
            runpy.run_path(argv[0], run_name="__main__")
        status = 0
    except SystemExit as exc:
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if not isinstance(code, int) and code is not None:
            print(code, file=sys.stderr)
    except BaseException:  # noqa: BLE001  # the run's own failure: its traceback on its stderr, status 1
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001, S110  # a closed pipe: nothing left to flush into
            pass
        with contextlib.suppress(OSError):
            conn.sendall(f"exit {status}\n".encode())
        os._exit(status)


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    os.rename(path + ".tmp", path)  # the socket appears only once the preload is done
    listener.listen(16)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    while True:
        conn, _ = listener.accept()
        fds: list[int] = []
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            buf = data
            while not buf.endswith(b"\n"):
                more = conn.recv(1 << 20)
                if not more:
                    break
                buf += more
            request = json.loads(buf)
            if len(fds) != 3:
                raise ValueError(f"expected 3 descriptors, got {len(fds)}")
            if os.path.abspath(request.get("python", "")) != os.path.abspath(sys.executable):
                raise ValueError(f"asked for {request.get('python')}, this is {sys.executable}")
        except (OSError, ValueError) as exc:  # refused: the connection closes with no pid, and the client starts the run itself
            print(f"zygote: request refused: {exc}", file=sys.stderr, flush=True)
            for fd in fds:
                os.close(fd)
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            run_child(conn, request, fds)
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(f"pid {pid}\n".encode())
        conn.close()


def main() -> None:
    """zygote.py SOCKET [MODULE,MODULE...]: the modules to import first (default PRELOAD; "" for none)."""
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: zygote.py SOCKET_PATH [MODULES]")
    preload(PRELOAD if len(sys.argv) == 2 else [m for m in sys.argv[2].split(",") if m])
    serve(sys.argv[1])


if __name__ == "__main__":
    main()

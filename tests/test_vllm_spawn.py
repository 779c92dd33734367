"""The warm zygote that forks vLLM's processes (gpu_backend/vllm_engine/spawn.py, zygote.py): a
forked run must behave as the process `spawn` would otherwise start. Checked here with this
interpreter and nothing preloaded, so no vLLM is needed; the vLLM tests run through it in `make test`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_backend.vllm_engine.spawn import (
    OMP_THREADS_ENV,
    ZYGOTE_ENV,
    ZygoteChild,
    run_captured,
    spawn,
    start_zygote,
)

PY = Path(sys.executable)


@pytest.fixture
def zygote(tmp_path, monkeypatch):
    sock = tmp_path / "z.sock"
    proc = start_zygote(PY, sock, env=dict(os.environ), preload=[], timeout_s=60)
    monkeypatch.setenv(ZYGOTE_ENV, str(sock))
    yield sock
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_a_forked_run_gets_its_argv_env_folder_and_streams(zygote, tmp_path):
    code = "import os, sys; print(sys.argv[1:], os.environ['ONLY_HERE'], os.getcwd(), sys.stdin.read().upper())"
    proc = spawn(["-c", code, "a", "b"], env={"ONLY_HERE": "yes"}, cwd=tmp_path, stdin=subprocess.PIPE,
                 stdout=subprocess.PIPE, python=PY)
    assert isinstance(proc, ZygoteChild) and proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("piped in")
    proc.stdin.close()
    assert proc.stdout.read().strip() == f"['a', 'b'] yes {tmp_path} PIPED IN"
    assert proc.wait(timeout=30) == 0


def test_exit_status_stderr_and_a_script_path(zygote, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('to stderr', file=sys.stderr)\nsys.exit(3)\n")
    rc, out, err = run_captured([str(script)], python=PY, cwd=tmp_path)
    assert (rc, out, err.strip()) == (3, "", "to stderr")
    rc, _, err = run_captured(["-c", "raise ValueError('boom')"], python=PY, cwd=tmp_path)
    assert rc == 1 and "ValueError: boom" in err  # an uncaught exception: its traceback, status 1, as python's


def test_a_killed_run_reads_as_killed_and_its_session_is_its_own(zygote, tmp_path):
    proc = spawn(["-c", "import os, time; print(os.getpgid(0) == os.getpid(), flush=True); time.sleep(60)"],
                 env=dict(os.environ), cwd=tmp_path, stdout=subprocess.PIPE, python=PY, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "True"  # killpg(proc.pid) stops it
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def test_without_a_running_zygote_the_process_is_started_directly(tmp_path, monkeypatch):
    monkeypatch.setenv(ZYGOTE_ENV, str(tmp_path / "gone.sock"))
    proc = spawn(["-c", "print('direct')"], env=dict(os.environ), cwd=tmp_path, stdout=subprocess.PIPE, python=PY)
    assert isinstance(proc, subprocess.Popen) and proc.communicate(timeout=30)[0].strip() == "direct"
    (tmp_path / "dead.sock").touch()  # a socket file nobody listens on: also direct
    monkeypatch.setenv(ZYGOTE_ENV, str(tmp_path / "dead.sock"))
    assert isinstance(spawn(["-c", "pass"], env={}, cwd=tmp_path, python=PY), subprocess.Popen)


def test_a_run_for_another_interpreter_is_not_forked_from_this_zygote(zygote, tmp_path):
    other = tmp_path / "python"
    other.symlink_to(PY)  # the same interpreter under another path, as another venv's would be
    proc = spawn(["-c", "import sys; print(sys.executable)"], env=dict(os.environ), cwd=tmp_path,
                 stdout=subprocess.PIPE, python=other)
    assert isinstance(proc, subprocess.Popen) and proc.communicate(timeout=30)[0].strip() == str(other)
    assert isinstance(spawn(["-c", "pass"], env={}, cwd=tmp_path, python=PY), ZygoteChild)  # still serving


def test_a_zygote_that_cannot_start_says_so(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start"):
        start_zygote(PY, tmp_path / "z.sock", env=dict(os.environ), preload=["no_such_module_here"], timeout_s=60)
    assert time.monotonic() - t0 < 30


def test_vllm_processes_take_the_omp_thread_count_when_one_is_set(zygote, tmp_path, monkeypatch):
    code = "import os; print(os.environ.get('OMP_NUM_THREADS'))"
    monkeypatch.delenv(OMP_THREADS_ENV, raising=False)
    assert run_captured(["-c", code], python=PY, cwd=tmp_path, env={"A": "1"})[1].strip() == "None"
    monkeypatch.setenv(OMP_THREADS_ENV, "1")
    assert run_captured(["-c", code], python=PY, cwd=tmp_path, env={"A": "1"})[1].strip() == "1"
    monkeypatch.setenv(ZYGOTE_ENV, "")  # started directly: the same
    assert run_captured(["-c", code], python=PY, cwd=tmp_path, env={"A": "1"})[1].strip() == "1"

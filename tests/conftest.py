"""Fixtures shared by every test module: where the repo, the samples and the shared traces live."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
SHARED_TRACES = Path(os.environ.get("KVSIM_SHARED_TRACES") or REPO.parent / "shared" / "traces")  # worktrees: set it


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """../shared/traces when present (CI has it beside the clone); tests that need it skip otherwise."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"shared traces not found at {SHARED_TRACES}")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def vllm_env(tmp_path_factory) -> Iterator[Path]:
    """vLLM's own environment (.venv-vllm, built by `make vllm-env` / `make test`). Tests that run
    real vLLM skip without it, except under KVSIM_REQUIRE_VLLM=1 (`make test` sets it: there they
    must run). A warm zygote (gpu_backend/vllm_engine/spawn.py) forks every vLLM process this
    pytest process starts, its children's included, so vLLM's import is paid once per worker;
    KVSIM_VLLM_ZYGOTE set beforehand ("" for none) is left as it is. Each vLLM process runs one
    OpenMP thread (KVSIM_VLLM_OMP_THREADS, unless set beforehand)."""
    from gpu_backend.vllm_engine.client import VllmError, vllm_python

    try:
        python = vllm_python()
    except VllmError as exc:
        if os.environ.get("KVSIM_REQUIRE_VLLM") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    os.environ.setdefault("KVSIM_VLLM_OMP_THREADS", "1")  # spawn.py: tiny models beside other tests' work
    with _vllm_zygote(python, tmp_path_factory.mktemp("vllm-zygote")):
        yield python


@contextmanager
def _vllm_zygote(python: Path, folder: Path) -> Iterator[None]:
    import signal
    import warnings

    from gpu_backend.vllm_engine.client import WORKER_ENV
    from gpu_backend.vllm_engine.spawn import ZYGOTE_ENV, start_zygote

    if ZYGOTE_ENV in os.environ:
        yield
        return
    sock = folder / "zygote.sock"
    env = {**os.environ, **WORKER_ENV, "VLLM_LOGGING_LEVEL": "WARNING"}  # worker.py's own default level
    with (folder / "zygote.log").open("w") as log:
        try:
            proc = start_zygote(python, sock, env=env, log=log)
        except RuntimeError as exc:  # every run then starts vLLM itself, as without a zygote
            warnings.warn(f"{exc}: {(folder / 'zygote.log').read_text()[-500:]}", stacklevel=1)
            yield
            return
    os.environ[ZYGOTE_ENV] = str(sock)
    try:
        yield
    finally:
        del os.environ[ZYGOTE_ENV]
        os.killpg(proc.pid, signal.SIGKILL)  # the zygote and any run still going
        proc.wait(timeout=30)


def pytest_collection_modifyitems(config, items) -> None:
    """Files with slow or browser tests run first, each file's tests kept together and in order: `make test`
    hands whole files to two pytest-xdist workers in this order, and the longest jobs started first
    leave no single worker finishing a long file alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") or item.get_closest_marker("browser")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: collection order otherwise

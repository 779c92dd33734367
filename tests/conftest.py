"""Fixtures shared by every test module: where the repo, the samples and the shared traces live."""

from __future__ import annotations

import os
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
def vllm_env() -> Path:
    """vLLM's own environment (.venv-vllm, built by `make vllm-env` / `make test`). Tests that run
    real vLLM skip without it, except under KVSIM_REQUIRE_VLLM=1 (`make test` sets it: there they
    must run)."""
    import os

    from gpu_backend.vllm_engine.client import VllmError, vllm_python

    try:
        return vllm_python()
    except VllmError as exc:
        if os.environ.get("KVSIM_REQUIRE_VLLM") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def pytest_collection_modifyitems(config, items) -> None:
    """Files with slow or browser tests run first, each file's tests kept together and in order: `make test`
    hands whole files to two pytest-xdist workers in this order, and the longest jobs started first
    leave no single worker finishing a long file alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") or item.get_closest_marker("browser")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: collection order otherwise

"""Fixtures for the real-browser tests: a `streamlit run app.py` server on 127.0.0.1 and Debian's
Chromium driven by Playwright. Without Chromium the tests skip with a message, unless
KVSIM_REQUIRE_BROWSER=1 (CI), where a missing browser is a failure."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("KVSIM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
START_TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium_or_skip() -> str:
    path = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if path:
        return path
    message = f"no Chromium at {CHROMIUM} (install Debian's chromium: make browser-deps)"
    if os.environ.get("KVSIM_REQUIRE_BROWSER") == "1":
        pytest.fail(message + " and KVSIM_REQUIRE_BROWSER=1")
    pytest.skip(message)


@pytest.fixture(scope="module")
def app_server(tmp_path_factory) -> Iterator[str]:
    """Serve the dashboard on a free local port with its own snapshot store; yield the base URL."""
    chromium_or_skip()
    port = _free_port()
    db = tmp_path_factory.mktemp("browser") / "snapshots.sqlite"
    env = dict(os.environ, KVSIM_SNAPSHOT_DB=str(db))
    log = tmp_path_factory.mktemp("browser-log") / "streamlit.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start in {START_TIMEOUT_S} s: {log.read_text()[-2000:]}")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def browser():
    path = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()

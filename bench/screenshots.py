"""Retake docs/screenshots/: every dashboard page on the bundled default, and on a loaded scenario.

A real `streamlit run app.py` on 127.0.0.1 and Debian's Chromium (Playwright), as in the browser
tests. `make screenshots` runs it (about 3 minutes). Two sets:

- `<page>.png`: each page as a first-time visitor opens it (the bundled default of ui/defaults.py).
- `loaded-<page>.png`: the same pages under load: the Azure 2023 conversation trace uploaded
  (../shared/traces/AzureLLMInferenceTrace_conv.csv, 19,366 requests; the bundled slice of it when
  ../shared is absent) replayed at Load x 3 with max_model_len 4,096, so the overloaded verdict, the
  rejected requests and their fix, and the growing queue all show; Compare on its allocator preset
  (four scenarios); Plan's search on the trace's first 4,000 requests (the whole trace, four
  configurations, is over the page work budget and takes many minutes on a shared VM); Capacity for 5,000 users at 32K tokens; a snapshot of the loaded run reopened from
  its link; Validate on the shared measured vLLM run when present.

Usage: .venv/bin/python bench/screenshots.py [--out DIR] [--only default|loaded]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402  (streamlit's own dependency)

from ui.pages import PAGES  # noqa: E402

SHARED = ROOT.parent / "shared"
AZURE_CONV = SHARED / "traces" / "AzureLLMInferenceTrace_conv.csv"
AZURE_SLICE = ROOT / "samples" / "azure_conv_slice.csv"
SHARED_RUN = SHARED / "fidelity"
CHROMIUM = os.environ.get("KVSIM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1440, "height": 1800}
WAIT_MS = 600_000  # a ceiling: the loaded Plan search over the full Azure trace takes minutes on a shared VM
LOAD, MAX_LEN = "3", "4096"
PLAN_FIRST = "4000"  # the loaded Plan searches the trace's first requests: under the page work budget (ui/work_budget.py)
# what each page shows once it has its answer (the screenshot waits for it)
READY = {"plan": "text=/^Best.*serves/",  # "Best (lowest $ ...): <config> serves ..." "simulate": '[data-testid="stMetric"]', "compare": "text=In words",
         "trace": '[data-testid="stMetric"]', "capacity": "text=Concurrent sequences that fit",
         "validate": '[data-testid="stMetric"]', "snapshots": '[data-testid="stSidebarNav"]',
         "gpu": '[data-testid="stSidebarNav"]'}


@contextmanager
def server() -> Iterator[str]:
    """The dashboard on a free loopback port with a throw-away snapshot store; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = Path(tempfile.mkdtemp(prefix="kvsim-shots-"))
    env = dict(os.environ, KVSIM_SNAPSHOT_DB=str(tmp / "snapshots.sqlite"))
    log = (tmp / "streamlit.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.port", str(port), "--server.address", "127.0.0.1",
                             "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"streamlit did not start: {(tmp / 'streamlit.log').read_text()[-2000:]}") from None
                time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def wait_idle(page) -> None:
    """Until Streamlit has no script run in progress (the status widget is gone)."""
    page.wait_for_timeout(400)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=WAIT_MS)


def settle(page, ready: str | None) -> None:
    """Until the page shows `ready` with no script run in progress, and still does a moment later
    (a rerun that starts right after a run, as a page's widgets settle, must not be what is shot)."""
    for _ in range(20):
        if ready:
            page.wait_for_selector(ready, timeout=WAIT_MS)
        wait_idle(page)
        page.wait_for_timeout(800)  # plotly draws after the script ends
        busy = page.locator('[data-testid="stStatusWidget"]').count()
        if not busy and (not ready or page.locator(ready).count()):
            return
    raise SystemExit(f"the page did not settle: {page.url}")


def shoot(page, out: Path, name: str, ready: str | None = None) -> None:
    settle(page, ready)
    for pane in ('[data-testid="stSidebarContent"]', '[data-testid="stMain"]'):
        page.locator(pane).first.evaluate("el => el.scrollTo(0, 0)")
    page.wait_for_timeout(200)
    errors = page.locator('[data-testid="stException"]').count()
    if errors:
        raise SystemExit(f"{name}: the page shows an exception")
    path = out / f"{name}.png"
    page.screenshot(path=str(path))
    # 256 colours: a page is flat colours and text, and the file a third of the size
    Image.open(path).convert("RGB").quantize(256, Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        path, optimize=True)
    print(f"wrote {path}", flush=True)


def nav(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
    wait_idle(page)


def start_large(page) -> None:
    """A run over the page work budget (ui/work_budget.py) waits for "Start it anyway": press it."""
    button = page.get_by_role("button", name="Start it anyway")
    if button.count():
        button.first.click()
        wait_idle(page)


def set_number(page, label: str, value: str, where: str = '[data-testid="stSidebar"]') -> None:
    """Type into the number input (in the sidebar, or `where`) whose label starts with `label`, then wait for the rerun."""
    box = page.locator(f'{where} [data-testid="stNumberInput"]', has_text=label).first
    field = box.locator("input")
    field.fill(value)
    field.press("Enter")
    wait_idle(page)


def default_pages(browser, base: str, out: Path) -> None:
    for entry in PAGES.values():
        if not entry.available():
            continue
        page = browser.new_context(viewport=VIEWPORT).new_page()
        page.goto(f"{base}/{entry.url_path}", wait_until="domcontentloaded")
        shoot(page, out, entry.url_path, READY.get(entry.url_path))
        page.context.close()


def loaded_pages(browser, base: str, out: Path) -> None:
    trace = AZURE_CONV if AZURE_CONV.exists() else AZURE_SLICE
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.goto(f"{base}/trace?trace_src=upload", wait_until="domcontentloaded")
    page.wait_for_selector('input[type="file"]', state="attached", timeout=WAIT_MS)
    page.set_input_files('input[type="file"]', str(trace))
    page.wait_for_selector("text=azure format", timeout=WAIT_MS)
    shoot(page, out, "loaded-trace")

    nav(page, "Simulate")
    set_number(page, "Load x K", LOAD)
    set_number(page, "max_model_len", MAX_LEN)
    start_large(page)
    shoot(page, out, "loaded-simulate", "text=Overloaded")
    page.get_by_label("Snapshot name").fill(f"Azure conv at load x {LOAD}")
    page.get_by_role("button", name="Save snapshot and get a link").click()
    page.wait_for_selector("text=Anyone with this read-only link can open it", timeout=WAIT_MS)
    link = page.locator('[data-testid="stCode"]').filter(has_text="?snapshot=").last.inner_text().strip()

    nav(page, "Compare")
    start_large(page)
    shoot(page, out, "loaded-compare", "text=In words")
    nav(page, "Plan")
    set_number(page, "Use only the first N requests", PLAN_FIRST, '[data-testid="stMain"]')
    run_search = page.get_by_role("button", name="Run the search")  # changed inputs wait for it
    if run_search.count():
        run_search.first.click()
        wait_idle(page)
    start_large(page)
    shoot(page, out, "loaded-plan", READY["plan"])
    if PAGES["gpu"].available():  # a run of the loaded scenario's first requests (the tiny model on a CPU)
        nav(page, "GPU run")
        page.get_by_role("button", name="Run on").first.click()
        shoot(page, out, "loaded-gpu", "text=vs simulated")
    page.context.close()

    other = browser.new_context(viewport=VIEWPORT).new_page()
    other.goto(link, wait_until="domcontentloaded")
    shoot(other, out, "loaded-snapshots", f"text=Azure conv at load x {LOAD}")
    other.context.close()

    cap = browser.new_context(viewport=VIEWPORT).new_page()
    cap.goto(f"{base}/capacity?cap_users=5000&cap_ctx=32768", wait_until="domcontentloaded")
    shoot(cap, out, "loaded-capacity", READY["capacity"])
    cap.context.close()

    validate_loaded(browser, base, out)


def validate_loaded(browser, base: str, out: Path) -> None:
    """The shared measured vLLM run (all its requests) uploaded as one .zip; the bundled sample without it."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.goto(f"{base}/validate", wait_until="domcontentloaded")
    meta = next(iter(sorted(SHARED_RUN.glob("*/run/meta.json"))), None) if SHARED_RUN.is_dir() else None
    if meta is not None:  # the shared layout: <run>/run/{meta.json, requests.jsonl, timeseries.csv}, <run>/model/config.json
        bundle = Path(tempfile.mkdtemp(prefix="kvsim-run-")) / f"{meta.parent.parent.name}.zip"
        with zipfile.ZipFile(bundle, "w") as z:
            for f in (*meta.parent.glob("*.*"), meta.parent.parent / "model" / "config.json"):
                if f.name in ("meta.json", "requests.jsonl", "timeseries.csv", "config.json") and f.is_file():
                    z.write(f, f.name)
        page.get_by_text("upload a run").first.click()
        page.wait_for_selector('input[type="file"]', state="attached", timeout=WAIT_MS)
        page.set_input_files('input[type="file"]', str(bundle))
    shoot(page, out, "loaded-validate", READY["validate"])
    page.context.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--only", choices=("default", "loaded"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    chromium = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if not chromium:
        print(f"no Chromium at {CHROMIUM} (make browser-deps)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with server() as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            if args.only != "loaded":
                default_pages(browser, base, args.out)
            if args.only != "default":
                loaded_pages(browser, base, args.out)
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

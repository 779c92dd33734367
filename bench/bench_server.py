"""Load benchmark of one dashboard server shared by 1/4/8/16 visitors (issue 18), browser-free.

A real `streamlit run app.py` server on 127.0.0.1 (the same code, config and worker pool as `make
run`), and N visitors as websocket clients (bench/st_session.py) in this process: the frames a
browser sends, no rendering. Why a real server rather than AppTest sessions: the issue's question
is what one server does for many people at once, which is the server's threads, its GIL and its
worker pool under concurrent sessions; AppTest runs each script on its own in the test's process.

Each visitor does, all N at the same moment for each step (a barrier before every action):
  open      a fresh session of /simulate?trace_src=upload (the page load)
  upload    the Azure conversation trace (../shared/traces, else the bundled slice) and its run
            on the default scenario (already computed by the warm-up: shared by everyone)
  toggle*   the load dial to a value of this visitor's own (N different runs)
  toggle    the load dial to a value every visitor of this level picks too (one shared run)
  compare   the Compare page, KV-dtype preset, with the sidebar as it is (that shared load):
            4 runs, the same for every visitor of the level
  save      back on Simulate, save a snapshot (the form's button)
Latency is from sending the rerun to `script_finished` (loopback: the server's time for that run);
server CPU is user+system time over the level (/proc) of the server process (its page threads) and
of its simulation workers, apart.
Each level uses load values no earlier level used, so its runs are computed, not cached.

Then the page-load check: while one visitor's long Compare (the paging preset, 4 runs) or a Plan
sweep (on a grid nobody searched) goes on, fresh visitors open /plan, /simulate and /capacity.
Last, the queue check: with every worker busy, one more visitor's run must show its place in line
and a cancel button that drops it.

The fleet check (issue 29, `--fleet`): 8 visitors each start a fleet-sized run (8 replicas, the
trace at load x8, each visitor at a load of their own so all 8 are computed) at the same moment,
while a ninth person keeps opening /plan, /simulate and /capacity; every page load is timed (the
bar: under 2 s), every run must finish without an error, and the server's memory (RSS of the server
process and its simulation workers, sampled every 0.25 s) is recorded before, at its peak and after.

Usage: python bench/bench_server.py [--users 1,4,8,16] [--trace PATH] [--json OUT]
       python bench/bench_server.py --fleet [--fleet-users 8] [--replicas 8] [--router NAME] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from st_session import RunResult, Session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
SAMPLE_TRACE = ROOT / "samples" / "azure_conv_slice.csv"
ACTIONS = ("open", "upload", "toggle*", "toggle", "compare", "save")
COMPARE_PRESET = "KV dtype: fp16 vs fp8 vs int8 vs int4"
LONG_PRESET = "paging: contiguous max / pow2 / oracle vs paged"
TICK = os.sysconf("SC_CLK_TCK")


def _proc_stats() -> dict[int, list[str]]:
    """Every live process's /proc/PID/stat fields after the command name (Linux)."""
    out: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
    return out


def _process_tree(root_pid: int, stats: dict[int, list[str]]) -> set[int]:
    """`root_pid` and all its live descendants (field 1 of stat is the parent's pid)."""
    parents = {pid: int(fields[1]) for pid, fields in stats.items()}
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    return tree


def tree_cpu_s(root_pid: int) -> tuple[float, float]:
    """User + system CPU seconds of a process, and of all its live descendants (Linux /proc)."""
    stats = _proc_stats()
    ticks = {pid: int(fields[11]) + int(fields[12]) for pid, fields in stats.items()}
    tree = _process_tree(root_pid, stats)
    return ticks.get(root_pid, 0) / TICK, sum(ticks.get(pid, 0) for pid in tree - {root_pid}) / TICK


def tree_rss_mib(root_pid: int) -> float:
    """Resident memory (MiB) of a process and all its live descendants (Linux /proc)."""
    tree = _process_tree(root_pid, _proc_stats())
    kib = 0
    for pid in tree:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        kib += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return kib / 1024


class Server:
    """`streamlit run app.py` on a free loopback port with a private snapshot store."""

    def __init__(self, port: int, workdir: Path, env: dict[str, str]) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.workers = int(env.get("KVSIM_RUN_WORKERS") or os.cpu_count() or 1)
        log = (workdir / "server.log").open("w")
        full_env = dict(os.environ, KVSIM_SNAPSHOT_DB=str(workdir / "snapshots.sqlite"), **env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true"],
            cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/_stcore/health", timeout=2).ok:
                    return
            except requests.RequestException:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the server did not answer on {self.url} within 120 s (log: {workdir / 'server.log'})")

    def cpu_s(self) -> tuple[float, float]:
        """(the server process: its page threads; its simulation workers)."""
        return tree_cpu_s(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _check(result: RunResult, what: str) -> RunResult:
    if result.status != "FINISHED_SUCCESSFULLY" or result.errors():
        raise RuntimeError(f"{what}: {result.status} {result.errors()}")
    return result


class Visitor:
    """One person's session and the latency of each of their actions."""

    def __init__(self, server: Server, trace: Path) -> None:
        self.server, self.trace = server, trace
        self.session: Session | None = None
        self.page: RunResult | None = None
        self.times: dict[str, float] = {}

    async def _timed(self, action: str, run: Any) -> RunResult:
        start = time.perf_counter()
        result = _check(await run, action)
        self.times[action] = time.perf_counter() - start
        self.page = result
        return result

    async def open(self) -> None:
        async def go() -> RunResult:
            self.session = await Session.open(self.server.url)
            return await self.session.run("simulate", "trace_src=upload")
        await self._timed("open", go())

    async def upload(self) -> None:
        assert self.session is not None and self.page is not None
        await self._timed("upload", self._upload())

    async def _upload(self) -> RunResult:
        assert self.session is not None and self.page is not None
        await self.session.upload(self.page.widget("file_uploader", "Trace file"), self.trace)
        return await self.session.run("", "trace_src=upload")

    async def toggle(self, action: str, load: float) -> None:
        assert self.session is not None and self.page is not None
        self.session.set_number(self.page.widget("number_input", "Load x K"), load)
        result = await self._timed(action, self.session.run("", "trace_src=upload"))
        if not result.has_text(f"replayed at {load:g}x"):
            raise RuntimeError(f"{action}: the page does not show the load {load:g}")

    async def compare(self, preset: str = COMPARE_PRESET, action: str = "compare") -> None:
        """The Compare page with this visitor's sidebar (the session keeps it, load dial included)."""
        assert self.session is not None
        self.session.widgets.clear()  # another page: its own widget ids (the upload stays in the session)
        query = urlencode({"trace_src": "upload", "preset": preset})
        result = await self._timed(action, self.session.run("compare", query))
        if not result.has_text("Using the uploaded"):
            raise RuntimeError(f"{action}: the Compare page did not use the uploaded trace")

    async def save(self, load: float, name: str) -> None:
        assert self.session is not None
        self.session.widgets.clear()
        page = _check(await self.session.run("simulate", urlencode({"trace_src": "upload", "load": f"{load:g}"})),
                      "back to simulate")
        self.session.set_text(page.widget("text_input", "Snapshot name"), name)
        button = page.widget("button", "Save snapshot")
        self.session.click(button)
        result = await self._timed("save", self.session.run("", urlencode({"trace_src": "upload"})))
        self.session.unclick(button)
        if not result.has_text("Saved."):
            raise RuntimeError("save: no 'Saved.' on the page")

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


async def _all(visitors: list[Visitor], make: Any) -> None:
    """Every visitor starts the same action at the same moment."""
    await asyncio.gather(*(make(i, v) for i, v in enumerate(visitors)))


async def level(server: Server, trace: Path, users: int, k: int) -> dict[str, Any]:
    """One level: `users` visitors through the six actions; latencies and the server's CPU."""
    visitors = [Visitor(server, trace) for _ in range(users)]
    shared = round(1.0 + 0.01 * (k + 1), 4)
    cpu0, client0, wall0 = server.cpu_s(), time.process_time(), time.perf_counter()
    try:
        await _all(visitors, lambda i, v: v.open())
        await _all(visitors, lambda i, v: v.upload())
        await _all(visitors, lambda i, v: v.toggle("toggle*", round(0.99 - 0.0005 * (16 * k + i), 4)))
        await _all(visitors, lambda i, v: v.toggle("toggle", shared))
        await _all(visitors, lambda i, v: v.compare())  # the sidebar keeps the load: the same base for all
        await _all(visitors, lambda i, v: v.save(shared, f"bench-{users}-{i}"))
    finally:
        await asyncio.gather(*(v.close() for v in visitors))
    cpu1 = server.cpu_s()
    out: dict[str, Any] = {"users": users, "server_cpu_s": round(cpu1[0] - cpu0[0], 2),
                           "workers_cpu_s": round(cpu1[1] - cpu0[1], 2),
                           "client_cpu_s": round(time.process_time() - client0, 2),
                           "wall_s": round(time.perf_counter() - wall0, 2), "actions": {}}
    for action in ACTIONS:
        times = sorted(v.times[action] for v in visitors)
        out["actions"][action] = {"p50": round(statistics.median(times), 3), "p95": round(_p95(times), 3),
                                  "max": round(times[-1], 3)}
    out["status_line"] = _status_line(visitors[0].page)
    return out


def _p95(sorted_times: list[float]) -> float:
    """Nearest-rank 95th percentile (with 1-16 samples: the largest but rarely one)."""
    return sorted_times[max(0, -(-95 * len(sorted_times) // 100) - 1)]


def _status_line(page: RunResult | None) -> str:
    if page is None:
        return ""
    return next((e.text for e in page.elements if e.text.startswith("Server:")), "")


async def page_loads_during(server: Server, trace: Path, busy: str) -> dict[str, Any]:
    """Fresh visitors open /plan, /simulate and /capacity while one visitor's long run goes on
    (`busy`: "compare" = the paging preset on a new load, "plan" = a Plan sweep on a new grid)."""
    async def load_page(path: str) -> float:
        return await _open_page(server, path)

    quiet = {path: await load_page(path) for path in ("plan", "simulate", "capacity")}  # warm and idle figures
    worker = Visitor(server, trace)
    await worker.open()
    await worker.upload()
    if busy == "compare":
        await worker.toggle("toggle", 1.5)  # the paging variants at x1.5: three contiguous runs nobody made yet
        job = asyncio.create_task(worker.compare(LONG_PRESET, action="busy"))
    else:
        job = asyncio.create_task(_plan_sweep(worker))
    await asyncio.sleep(1.0)
    loads: list[tuple[str, float]] = []
    while not job.done():
        for path in ("plan", "simulate", "capacity"):
            loads.append((path, await load_page(path)))
    await job
    await worker.close()
    times = sorted(t for _, t in loads)
    return {"busy": busy, "busy_s": round(worker.times["busy"], 2), "quiet_s": {k: round(v, 3) for k, v in quiet.items()},
            "loads": len(loads), "p50": round(statistics.median(times), 3), "max": round(times[-1], 3),
            "worst_page": max(loads, key=lambda pt: pt[1])[0]}


async def queue_and_cancel(server: Server, trace: Path) -> dict[str, Any]:
    """Two visitors' new runs fill the workers; a third visitor's run must show its place in line and
    a cancel button that works (the run is dropped: a fresh page then shows nothing queued)."""
    people = [Visitor(server, trace) for _ in range(server.workers + 1)]
    for person in people:
        await person.open()
        await person.upload()
    busy = people[:-1]
    for i, person in enumerate(busy):  # new loads: runs nobody has made
        assert person.session is not None and person.page is not None
        person.session.set_number(person.page.widget("number_input", "Load x K"), 3.0 + 0.01 * i)
        await person.session.send_rerun("", "trace_src=upload")
    await asyncio.sleep(1.0)
    last = people[-1]
    assert last.session is not None and last.page is not None
    last.session.set_number(last.page.widget("number_input", "Load x K"), 3.5)
    await last.session.send_rerun("", "trace_src=upload")
    seen = await last.session.read(lambda r: any(e.kind == "button" and e.label.startswith("Cancel") for e in r.elements), 120)
    place = next((e.text for e in seen.elements if "in line" in e.text), "")
    last.session.click(next(e for e in seen.elements if e.kind == "button" and e.label.startswith("Cancel")))
    cancelled = await last.session.run("", "trace_src=upload")
    check = await Session.open(server.url)
    after = _check(await check.run("capacity", ""), "open /capacity")
    await check.close()
    for person in busy:
        assert person.session is not None
        await person.session.read(lambda r: False, 600)
    for person in people:
        await person.close()
    return {"place_shown": place, "cancelled_shown": cancelled.has_text("cancelled"),
            "status_after_cancel": _status_line(after)}


async def _open_page(server: Server, path: str) -> float:
    """Seconds for a fresh visitor to open /path (a new session: the page load)."""
    start = time.perf_counter()
    session = await Session.open(server.url)
    try:
        _check(await session.run(path, ""), f"open /{path}")
    finally:
        await session.close()
    return time.perf_counter() - start


class RssSampler:
    """The server tree's RSS every 0.25 s while a check runs (memory bounded: before, peak, after)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.samples = pid, [tree_rss_mib(pid)]
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append(tree_rss_mib(self.pid))
            await asyncio.sleep(0.25)

    async def stop(self) -> dict[str, int]:
        self._stop.set()
        await self._task
        await asyncio.sleep(2.0)  # let finished runs' memory go back
        return {"before": round(self.samples[0]), "peak": round(max(self.samples)), "after": round(tree_rss_mib(self.pid))}


async def _fleet_run(i: int, v: Visitor, replicas: int, router: str, errors: list[str], round_no: int) -> None:
    """One visitor's fleet-sized run: the uploaded trace on `replicas` replicas at its own load."""
    assert v.session is not None
    v.session.widgets.clear()
    load = round(replicas + 0.01 * (i + 1) + 0.1 * round_no, 4)  # its own load: every run computed, none cached
    query = {"trace_src": "upload", "replicas": str(replicas), "load": f"{load:g}"} | ({"router": router} if router else {})
    try:
        result = await v._timed("fleet", v.session.run("simulate", urlencode(query)))
        if not result.has_text(f"replayed at {load:g}x"):
            errors.append(f"visitor {i}: the page does not show the load {load:g}")
        if result.has_text("The link's"):  # a link value the form refused (ui/bounded.py): not the run asked for
            errors.append(f"visitor {i}: the page refused a link value: {query}")
    except (TimeoutError, RuntimeError) as exc:
        errors.append(f"visitor {i}: {exc}"[:200])


async def _pages_until(job: asyncio.Future, server: Server, errors: list[str]) -> list[tuple[str, float]]:
    """Fresh visitors open /plan, /simulate and /capacity in turn until `job` is done."""
    loads: list[tuple[str, float]] = []
    while not job.done():
        for path in ("plan", "simulate", "capacity"):
            try:
                loads.append((path, await _open_page(server, path)))
            except (TimeoutError, RuntimeError) as exc:
                errors.append(f"page /{path}: {exc}"[:200])
    return loads


async def fleet_load(server: Server, trace: Path, users: int, replicas: int, router: str,
                     round_no: int = 0) -> dict[str, Any]:
    """`users` visitors start a fleet-sized run each at the same moment; meanwhile fresh visitors open
    pages. Returns the run and page-load times (and idle page loads just before, on the same machine
    load), the errors, the server's memory and CPU."""
    idle = sorted([await _open_page(server, path) for path in ("plan", "simulate", "capacity") for _ in range(2)])
    visitors = [Visitor(server, trace) for _ in range(users)]
    errors: list[str] = []
    await _all(visitors, lambda i, v: v.open())
    await _all(visitors, lambda i, v: v.upload())
    rss, cpu0 = RssSampler(server.proc.pid), server.cpu_s()
    job = asyncio.gather(*(_fleet_run(i, v, replicas, router, errors, round_no) for i, v in enumerate(visitors)))
    await asyncio.sleep(0.5)
    loads = await _pages_until(job, server, errors)
    await job
    cpu1 = server.cpu_s()
    memory = await rss.stop()
    await asyncio.gather(*(v.close() for v in visitors))
    times = sorted(t for _, t in loads) or [0.0]
    runs = sorted(v.times.get("fleet", float("nan")) for v in visitors)
    return {"users": users, "replicas": replicas, "router": router or "(form default)", "errors": errors,
            "runs_s": {"min": round(runs[0], 2), "p50": round(statistics.median(runs), 2), "max": round(runs[-1], 2)},
            "idle_page_p50_s": round(statistics.median(idle), 3), "idle_page_max_s": round(idle[-1], 3),
            "load_average": round(os.getloadavg()[0], 1),
            "page_loads": len(loads), "page_p50_s": round(statistics.median(times), 3),
            "page_max_s": round(times[-1], 3), "pages_over_2s": sum(t > 2.0 for _, t in loads),
            "worst_page": max(loads, key=lambda pt: pt[1])[0] if loads else "", "rss_mib": memory,
            "server_cpu_s": round(cpu1[0] - cpu0[0], 1), "workers_cpu_s": round(cpu1[1] - cpu0[1], 1)}


async def fleet_bench(args: argparse.Namespace) -> dict[str, Any]:
    trace = Path(args.trace) if args.trace else (SHARED_TRACE if SHARED_TRACE.is_file() else SAMPLE_TRACE)
    with tempfile.TemporaryDirectory(prefix="kvsim-bench-fleet-") as tmp:
        env = {"KVSIM_RUN_WORKERS": str(args.workers)} if args.workers else {}
        server = Server(args.port, Path(tmp), env)
        try:
            warm = Visitor(server, trace)  # imports, the trace's parse and each page's default result:
            await warm.open()  # not part of the figures (a page load is then what a visitor waits for)
            await warm.upload()
            await warm.close()
            for path in ("plan", "simulate", "capacity"):
                await _open_page(server, path)
            idle = tree_rss_mib(server.proc.pid)
            rounds = []
            for k in range(args.rounds):
                rounds.append(await fleet_load(server, trace, args.fleet_users, args.replicas, args.router, k))
                print(f"round {k + 1}: {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)  # kept if stopped
        finally:
            server.stop()
    return {"trace": trace.name, "machine": _machine(), "workers": server.workers, "idle_rss_mib": round(idle),
            "rounds": rounds}


def fleet_report(result: dict[str, Any]) -> str:
    lines = [f"trace {result['trace']}; {result['machine']}; {result['workers']} simulation workers; "
             f"server RSS after warm-up {result['idle_rss_mib']} MiB", "",
             "| round | users x replicas (router) | run s min / p50 / max | page loads | page p50 / max s | "
             "pages > 2 s | idle pages p50 / max s | load avg | errors | RSS MiB before / peak / after | "
             "CPU s: page threads + workers |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for k, r in enumerate(result["rounds"], start=1):
        lines.append(f"| {k} | {r['users']} x {r['replicas']} ({r['router']}) | {r['runs_s']['min']:.1f} / "
                     f"{r['runs_s']['p50']:.1f} / {r['runs_s']['max']:.1f} | {r['page_loads']} | "
                     f"{r['page_p50_s']:.2f} / {r['page_max_s']:.2f} (/{r['worst_page']}) | {r['pages_over_2s']} | "
                     f"{r['idle_page_p50_s']:.2f} / {r['idle_page_max_s']:.2f} | {r['load_average']} | {len(r['errors'])} | {r['rss_mib']['before']} / {r['rss_mib']['peak']} / {r['rss_mib']['after']} | "
                     f"{r['server_cpu_s']:.1f} + {r['workers_cpu_s']:.1f} |")
        lines += [f"  error: {e}" for e in r["errors"]]
    return "\n".join(lines)


async def _plan_sweep(visitor: Visitor) -> None:
    """A Plan search over a grid no one has searched (int8 KV on the default GPUs): a fresh sweep."""
    assert visitor.session is not None
    visitor.session.widgets.clear()
    query = urlencode([("trace_src", "sample"), ("plan_kv", "int8")])
    await visitor._timed("busy", visitor.session.run("plan", query))


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    trace = Path(args.trace) if args.trace else (SHARED_TRACE if SHARED_TRACE.is_file() else SAMPLE_TRACE)
    with tempfile.TemporaryDirectory(prefix="kvsim-bench-server-") as tmp:
        env = {"KVSIM_RUN_WORKERS": str(args.workers)} if args.workers else {}
        server = Server(args.port, Path(tmp), env)
        try:
            warm = Visitor(server, trace)  # imports, the trace's parse and the default run: not any level's
            await warm.open()
            await warm.upload()
            await warm.toggle("toggle", 1.0 + 0.5)
            await warm.close()
            single = await level(server, trace, 1, 0)
            levels = [single]
            for k, users in enumerate(args.users[1:], start=1):
                levels.append(await level(server, trace, users, k))
            busy = [await page_loads_during(server, trace, what) for what in ("compare", "plan")]
            queue = await queue_and_cancel(server, trace)
        finally:
            server.stop()
    return {"trace": trace.name, "machine": _machine(), "levels": levels, "page_loads_during": busy,
            "queue_and_cancel": queue}


def _machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown cpu")
    return f"{os.cpu_count()} cores, {cpu}; load average before the run {os.getloadavg()[0]:.2f}"


def report(result: dict[str, Any]) -> str:
    lines = [f"trace {result['trace']}; {result['machine']}", "",
             "| users | " + " | ".join(f"{a} p50 / p95 s" for a in ACTIONS)
             + " | server CPU s: page threads + workers | client CPU s | wall s |",
             "|---|" + "---|" * (len(ACTIONS) + 3)]
    for lv in result["levels"]:
        cells = [f"{lv['actions'][a]['p50']:.2f} / {lv['actions'][a]['p95']:.2f}" for a in ACTIONS]
        lines.append(f"| {lv['users']} | " + " | ".join(cells)
                     + f" | {lv['server_cpu_s']:.1f} + {lv['workers_cpu_s']:.1f} | {lv['client_cpu_s']:.1f} | {lv['wall_s']:.1f} |")
    base = result["levels"][0]["actions"]
    for lv in result["levels"][1:]:
        ratio = {a: lv["actions"][a]["max"] / base[a]["max"] for a in ("toggle", "toggle*")}
        lines.append(f"{lv['users']} users: slowest re-run / single-user re-run = {ratio['toggle']:.2f}x "
                     f"(shared toggle), {ratio['toggle*']:.2f}x (each their own)")
    for lv in result["levels"]:
        lines.append(f"after {lv['users']} users: {lv['status_line']}")
    for busy in result["page_loads_during"]:
        lines.append(f"page loads during a {busy['busy_s']:.1f} s {busy['busy']}: {busy['loads']} loads, "
                     f"p50 {busy['p50']:.2f} s, max {busy['max']:.2f} s (/{busy['worst_page']}); "
                     f"idle: {busy['quiet_s']}")
    queue = result["queue_and_cancel"]
    lines.append(f"queued run: {queue['place_shown']!r}; after its cancel button: cancelled shown "
                 f"{queue['cancelled_shown']}; a fresh page then: {queue['status_after_cancel']!r}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", default="1,4,8,16", help="comma-separated visitor counts; the first is the baseline")
    parser.add_argument("--trace", default="", help="trace to upload (default: the shared Azure conv trace, else the sample)")
    parser.add_argument("--workers", type=int, default=0, help="KVSIM_RUN_WORKERS for the server (default: its own)")
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument("--json", default="", help="also write the figures to this file")
    parser.add_argument("--fleet", action="store_true", help="only the fleet check (issue 29): fleet-sized runs from many users")
    parser.add_argument("--fleet-users", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--router", default="", help="router for the fleet runs (a URL value; default: the form's)")
    parser.add_argument("--rounds", type=int, default=2, help="fleet rounds (each computes new runs)")
    args = parser.parse_args()
    args.users = [int(u) for u in args.users.split(",")]
    if args.fleet:
        result = asyncio.run(fleet_bench(args))
        print(fleet_report(result))
    else:
        result = asyncio.run(bench(args))
        print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

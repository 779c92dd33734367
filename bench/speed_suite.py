"""The simulator's speed suite: one table of replay speeds, kept in docs/PERFORMANCE.md.

Each case in CASES is one replay run in its own process (so its peak RSS is its own), timed by
process CPU time (time.process_time around `simulate`): on a shared machine that varies far less
than wall time. Reported per case: CPU seconds, simulated seconds, speed = simulated / CPU seconds
("x real time" on one core), steps, and the process's peak RSS.

  .venv/bin/python bench/speed_suite.py                   # run every case, print the table
  .venv/bin/python bench/speed_suite.py --write [--note T] # ... and replace the table in PERFORMANCE.md
  .venv/bin/python bench/speed_suite.py --compare         # ... and flag any case > 10% slower (CPU s)
                                                          #     than the table there (exit 1)
  .venv/bin/python bench/speed_suite.py --only azure_conv,synthetic_1m

`make bench` runs it with --compare. To add a case (fleets, tiers), append a Case to CASES: its
`scenario` holds Scenario fields, its `trace` a shared-trace file name or "synthetic:SPEC".

Machines differ, and so does one shared VM from day to day (the same commit measured 1.3 s and
3.9 s of CPU for azure_conv two days apart). So every run also times a fixed reference workload
(`reference_cpu_s`: the interpreter and small-numpy work a replay is made of) in its own child, and
the table records it. `--compare` scales the last table's CPU seconds by the ratio of the two
references before flagging, so a slower day is not read as a slower commit (and a faster day does
not hide a slowdown). A target in x real time still needs the baseline re-run beside the change.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TRACES = Path(os.environ.get("KVSIM_SHARED_TRACES") or next(
    (p for p in (ROOT.parent / "shared" / "traces", ROOT.parent.parent / "shared" / "traces") if p.is_dir()),
    ROOT.parent / "shared" / "traces"))  # main's checkout sits beside shared/, a worktree one level deeper
DOC = ROOT / "docs" / "PERFORMANCE.md"
BEGIN, END = "<!-- speed-suite:begin -->", "<!-- speed-suite:end -->"
SLOWER = 0.10  # a case more than 10% slower (CPU s) than the last table is flagged
REF_RE = re.compile(r"reference workload ([\d.]+) s CPU")


@dataclass(frozen=True)
class Case:
    name: str
    what: str  # one line for the table
    trace: str  # a file under TRACES, or "synthetic:SPEC"
    scenario: dict[str, Any] = field(default_factory=dict)


MILLION = "synthetic:n=1000000,rate=50,input=lognormal:mean=256:sigma=0.8,output=lognormal:mean=64:sigma=0.8,seed=0"
CASES: list[Case] = [
    Case("azure_conv", "Azure conv (19,366 req), llama-3-8b h100-sxm, measured step source",
         "AzureLLMInferenceTrace_conv.csv", {"model": "llama-3-8b", "gpu": "h100-sxm"}),
    Case("synthetic_1m", "1,000,000 synthetic requests (bench_sim.py's spec), llama-3-8b h100-sxm", MILLION,
         {"model": "llama-3-8b", "gpu": "h100-sxm"}),
    Case("mooncake_dense_prefix", "Mooncake conv (12,031 req), llama-3-8b h100-sxm, prefix caching",
         "mooncake_conversation_trace.jsonl", {"model": "llama-3-8b", "gpu": "h100-sxm", "prefix_caching": True}),
    Case("mooncake_hybrid_prefix", "Mooncake conv, gpt-oss-20b (sliding + full groups) h100-sxm, prefix caching",
         "mooncake_conversation_trace.jsonl", {"model": "gpt-oss-20b", "gpu": "h100-sxm", "prefix_caching": True}),
    Case("azure_conv_mla_moe", "Azure conv, deepseek-v3 (MLA + MoE) h200 TP8",
         "AzureLLMInferenceTrace_conv.csv", {"model": "deepseek-v3", "gpu": "h200", "tp": 8}),
    Case("fleet_kv_precise", "Azure conv at load x8, 8 replicas of llama-3-8b h100-sxm behind kv-precise (issue 25)",
         "AzureLLMInferenceTrace_conv.csv",
         {"model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 8, "router": "kv-precise", "speedup": 8.0}),
    Case("fleet_round_robin", "the same fleet behind round-robin", "AzureLLMInferenceTrace_conv.csv",
         {"model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 8, "router": "round-robin", "speedup": 8.0}),
    Case("mooncake_tiers", "Mooncake conv at load x0.25, llama-3.1-8b h100-sxm, prefix caching, 250 GiB CPU + "
         "2,000 GiB NVMe KV tiers (issue 26)", "mooncake_conversation_trace.jsonl",
         {"model": "llama-3.1-8b", "gpu": "h100-sxm", "prefix_caching": True, "max_model_len": 131072,
          "speedup": 0.25, "cpu_tier_gib": 250.0, "nvme_tier_gib": 2000.0}),
]


def run_case(case: Case) -> dict[str, Any]:
    """One replay in this process: its figures."""
    from sim.fleet.replay import simulate
    from sim.scenario import Scenario
    from sim.trace import load_trace, parse_synthetic_spec

    if case.trace.startswith("synthetic:"):
        trace = parse_synthetic_spec(case.trace).generate()
    else:
        trace = load_trace(TRACES / case.trace)
    scenario = Scenario(**case.scenario)
    c0 = time.process_time()
    result = simulate(trace, scenario)
    cpu = time.process_time() - c0
    s = result.summary
    return {"case": case.name, "requests": s["requests"], "cpu_s": round(cpu, 2), "simulated_s": round(s["duration_s"], 1),
            "speed_x": round(s["duration_s"] / cpu, 1), "steps": s["num_steps"],
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def reference_cpu_s(repeats: int = 5) -> float:
    """CPU seconds of a fixed workload shaped like a replay's (objects, dicts, lists, bisect, small
    numpy arrays), the least of `repeats` runs: the machine's speed for this kind of code today."""
    import bisect

    import numpy as np

    class Req:
        __slots__ = ("rid", "computed", "blocks")

        def __init__(self, rid: int) -> None:
            self.rid, self.computed, self.blocks = rid, 0, []

    def once() -> None:
        reqs = [Req(i) for i in range(256)]
        index: dict[int, int] = {}
        ends: list[float] = []
        tokens = np.arange(32, dtype=np.int64)
        for step in range(240_000):
            r = reqs[step & 255]
            r.computed += 1
            if r.computed % 16 == 0:
                r.blocks.append(step)
                index[step] = r.rid
                if len(index) > 4096:
                    index.pop(next(iter(index)))
            bisect.insort(ends, (step * 7919) % 1000 / 7.0)
            if len(ends) > 64:
                ends.pop(0)
            if step % 8 == 0:
                tokens += 1
                int((tokens // 16).sum())

    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        once()
        best = min(best, time.process_time() - c0)
    return best


def run_in_child(case: Case) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", case.name], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"case": case.name, "error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def reference_in_child() -> float:
    """The reference workload in a fresh process, as every case runs."""
    out = subprocess.run([sys.executable, __file__, "--child", "reference"], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["reference_cpu_s"])


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem = next(int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal"))
        return f"{model}, {os.cpu_count()} cores, {mem / 2**20:.0f} GiB, Python {platform.python_version()}"
    except (OSError, StopIteration):
        return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def table(rows: list[dict[str, Any]], note: str, ref_s: float) -> str:
    head = [f"Speed suite (bench/speed_suite.py), commit {commit()}, {time.strftime('%Y-%m-%d', time.gmtime())}; "
            f"machine: {machine()}; reference workload {ref_s:.3f} s CPU."
            + (f" {note}" if note else ""), "",
            "| case | what | requests | CPU s | simulated s | x real time (CPU) | steps | peak RSS MiB |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    by_name = {c.name: c for c in CASES}
    for r in rows:
        what = by_name[r["case"]].what if r["case"] in by_name else ""
        if "error" in r:
            head.append(f"| {r['case']} | {what} | failed: {r['error']} | | | | | |")
            continue
        head.append(f"| {r['case']} | {what} | {r['requests']:,} | {r['cpu_s']:.2f} | {r['simulated_s']:,.1f} | "
                    f"{r['speed_x']:,.1f} | {r['steps']:,} | {r['peak_rss_mib']:,} |")
    return "\n".join(head)


def last_table(text: str) -> tuple[dict[str, float], float | None]:
    """Case -> CPU s from the table between the markers in PERFORMANCE.md ({} if none), and the
    reference workload's CPU s that table was measured at (None for a table from before it)."""
    if BEGIN not in text:
        return {}, None
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    out = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and re.fullmatch(r"[\d.,]+", cells[3]):
            out[cells[0]] = float(cells[3].replace(",", ""))
    ref = REF_RE.search(block)
    return out, float(ref.group(1)) if ref else None


def slower(rows: list[dict[str, Any]], before: dict[str, float], scale: float = 1.0) -> list[str]:
    """One line per case more than SLOWER slower than `before` (CPU seconds) x `scale` (this run's
    reference workload over the last table's: how much slower the machine itself is today)."""
    lines = []
    for r in rows:
        if "error" in r or r["case"] not in before:
            continue
        expected = before[r["case"]] * scale
        if r["cpu_s"] > expected * (1 + SLOWER):
            lines.append(f"{r['case']}: {r['cpu_s']:.2f} s CPU vs {expected:.2f} s expected from the last table "
                         f"({before[r['case']]:.2f} s x machine factor {scale:.2f}; +{100 * (r['cpu_s'] / expected - 1):.0f}%)")
    return lines


def write(rows: list[dict[str, Any]], note: str, ref_s: float) -> None:
    text = DOC.read_text()
    block = f"{BEGIN}\n{table(rows, note, ref_s)}\n{END}"
    if BEGIN in text:
        text = text.split(BEGIN, 1)[0] + block + text.split(END, 1)[1]
    else:
        text = text.replace("\n## ", f"\n## Speed suite (bench/speed_suite.py)\n\n{block}\n\n## ", 1)
    DOC.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma list of case names")
    ap.add_argument("--write", action="store_true", help="replace the table in docs/PERFORMANCE.md")
    ap.add_argument("--note", default="", help="a sentence after the machine line (e.g. the machine was shared)")
    ap.add_argument("--compare", action="store_true", help="flag cases > 10%% slower than the last table (exit 1)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    by_name = {c.name: c for c in CASES}
    if args.child == "reference":
        print(json.dumps({"reference_cpu_s": reference_cpu_s()}))
        return 0
    if args.child:
        print(json.dumps(run_case(by_name[args.child])))
        return 0
    names = args.only.split(",") if args.only else list(by_name)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        print(f"speed_suite: unknown case(s) {', '.join(unknown)}; cases: {', '.join(by_name)}", file=sys.stderr)
        return 2
    ref_s = reference_in_child()
    print(json.dumps({"reference_cpu_s": ref_s}), flush=True)
    rows = []
    for name in names:
        rows.append(run_in_child(by_name[name]))
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows, args.note, ref_s))
    code = 0
    if args.compare:
        before, before_ref = last_table(DOC.read_text())
        scale = ref_s / before_ref if before_ref else 1.0
        if not before_ref:
            print("note: the last table has no reference workload; CPU seconds compared as they are")
        flagged = slower(rows, before, scale)
        for line in flagged:
            print(f"SLOWER: {line}")
        code = 1 if flagged else 0
    if args.write:
        write(rows, args.note, ref_s)
    return code


if __name__ == "__main__":
    sys.exit(main())

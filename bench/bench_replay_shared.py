"""Replay every shared trace (../shared/traces) through the real CLI, with both allocators and every
reserve policy, and check the five-way breakdown adds up to the capacity at every step.

This is the simulation engine's done-when, at full size (tests/test_cli_run.py runs the same
variants on 400-request subsamples). For each run: `python -m sim run --trace PATH --model
qwen2.5-7b --gpu h100-sxm --max-model-len 131072 <variant> --out DIR --json` (a 128K context, so
Mooncake's prompts of up to 126K tokens are served, not rejected), then the steps frame written to DIR is
read back and every row's token_states + reserved + internal + external + free is compared with
its capacity. Prints a markdown table (the one in docs/PERFORMANCE.md).

Run: .venv/bin/python bench/bench_replay_shared.py [--traces DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
TRACES = ("AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv", "mooncake_conversation_trace.jsonl")
VARIANTS = {
    "paged": ["--allocator", "paged"],
    "paged + prefix cache": ["--allocator", "paged", "--prefix-caching"],
    "contiguous max": ["--allocator", "contiguous", "--reserve", "max"],
    "contiguous pow2": ["--allocator", "contiguous", "--reserve", "pow2"],
    "contiguous oracle": ["--allocator", "contiguous", "--reserve", "oracle"],
}
MODEL = ["--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--max-model-len", "131072"]
PARTS = ("token_states_bytes", "reserved_bytes", "internal_frag_bytes", "external_frag_bytes", "free_bytes")


def replay(trace: Path, variant: list[str], out: Path) -> dict:
    cmd = [sys.executable, "-m", "sim", "run", "--trace", str(trace), *MODEL, *variant, "--out", str(out), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    summary = json.loads(proc.stdout)
    steps_file = out / "steps.parquet"
    steps = pd.read_parquet(steps_file) if steps_file.exists() else pd.read_csv(out / "steps.csv")
    off = (steps[list(PARTS)].sum(axis=1) - steps["capacity_bytes"]).abs().max()
    return {"summary": summary, "cli_wall_s": wall, "rows": len(steps), "max_breakdown_error_bytes": float(off)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in TRACES:
            path = args.traces / name
            if not path.exists():
                print(f"skipped: {path} missing", file=sys.stderr)
                continue
            for label, variant in VARIANTS.items():
                r = replay(path, variant, Path(tmp) / f"{name}-{label.replace(' ', '_')}")
                s = r["summary"]
                rows.append({"trace": name, "variant": label, "requests": s["requests"], "completed": s["completed"],
                             "rejected": s["rejected"], "unfinished": s["unfinished"],
                             "token_states": s["kv_breakdown_mean"]["token_states"],
                             "internal_frag": s["kv_breakdown_mean"]["internal_frag"],
                             "mean_batch": s["mean_batch_size"], "ttft_p99_s": s["ttft_s"]["p99"],
                             "preemptions": s["num_preemptions"], "step_rows": r["rows"],
                             "max_breakdown_error_bytes": r["max_breakdown_error_bytes"],
                             "sim_wall_s": s["sim_wall_s"]})
                print(json.dumps(rows[-1]) if args.json else rows[-1], flush=True)
    if not args.json and rows:
        print("\n| trace | variant | completed / requests | rejected | token states / internal frag (mean) |"
              " mean batch | TTFT p99 | preemptions | breakdown error (max over steps) | sim wall |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['trace']} | {r['variant']} | {r['completed']:,} / {r['requests']:,} | {r['rejected']} | "
                  f"{r['token_states']:.1%} / {r['internal_frag']:.1%} | {r['mean_batch']:.1f} | {r['ttft_p99_s']:.2f} s | {r['preemptions']} | "
                  f"{r['max_breakdown_error_bytes']:.0f} B over {r['step_rows']} rows | {r['sim_wall_s']:.1f} s |")
    bad = [r for r in rows if r["unfinished"] or r["max_breakdown_error_bytes"] > 0]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

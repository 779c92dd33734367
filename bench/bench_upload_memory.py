"""Memory to parse an uploaded trace, as a multiple of the file size (issue 13: <= 3x).

Each case runs in a fresh process: write a synthetic file of about --mb MB, read its bytes (what
Streamlit already holds for an upload), note the peak RSS, parse it with the dashboard's row cap,
and report (peak RSS after - peak RSS before) / file size. Usage: python bench/bench_upload_memory.py [--mb 100]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _make(path: Path, kind: str, mb: float) -> None:
    target = int(mb * 2**20)
    with path.open("w") as fh:
        if kind == "generic.csv":
            fh.write("arrival_s,input_tokens,output_tokens,session_id\n")
        i, written = 0, 0
        while written < target:
            if kind == "generic.csv":
                line = f"{i * 0.013:.3f},{100 + i % 3000},{20 + i % 500},s{i % 977}\n"
            elif kind == "generic.jsonl":
                line = json.dumps({"arrival_s": i * 0.013, "input_tokens": 100 + i % 3000,
                                   "output_tokens": 20 + i % 500, "session_id": f"s{i % 977}"}) + "\n"
            else:  # mooncake.jsonl: prefix hash ids, shared prefixes
                n = 1 + i % 12
                line = json.dumps({"timestamp": i * 13, "input_length": n * 512, "output_length": 20 + i % 500,
                                   "hash_ids": [(i % 50) * 100 + k for k in range(n)]}) + "\n"
            fh.write(line)
            written += len(line)
            i += 1


def _child(path: str) -> None:
    sys.path.insert(0, str(ROOT))
    from sim.guard.limits import MAX_UPLOAD_ROWS
    from sim.trace import load_trace_bytes

    data = Path(path).read_bytes()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    trace = load_trace_bytes(data, Path(path).name, max_rows=MAX_UPLOAD_ROWS)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"rows": len(trace), "size": len(data), "extra_bytes": after - before,
                      "capped": any("rows capped" in w for w in trace.warnings)}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        _child(args.child)
        return 0
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("generic.csv", "generic.jsonl", "mooncake.jsonl"):
            path = Path(tmp) / kind
            _make(path, kind, args.mb)
            out = subprocess.run([sys.executable, __file__, "--child", str(path)], capture_output=True, text=True)
            if out.returncode:
                print(f"{kind}: failed: {out.stderr.strip().splitlines()[-1:]}")
                return 1
            r = json.loads(out.stdout)
            ratio = r["extra_bytes"] / r["size"]
            worst = max(worst, ratio)
            print(f"{kind:15} {r['size'] / 2**20:7.1f} MiB  {r['rows']:>9,} rows{' (capped)' if r['capped'] else ''}  "
                  f"extra peak memory {r['extra_bytes'] / 2**20:7.1f} MiB = {ratio:.2f}x the file")
    print(f"worst: {worst:.2f}x (target <= 3x)")
    return 0 if worst <= 3.0 else 1


if __name__ == "__main__":
    sys.exit(main())

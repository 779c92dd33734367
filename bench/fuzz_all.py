"""The fuzz suite at a larger scale, with a report: python bench/fuzz_all.py [--scale 5] [--seed 13].

Runs every generator in tests/fuzz/cases.py (scale multiplies the random cases) and prints outcomes per
entry point: ok, one-line error, traceback, hang, crash, silent wrong result. Exit 1 on any bad outcome.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzz.cases import all_cases  # noqa: E402
from tests.fuzz.harness import run_all  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scale", type=int, default=5)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--limit-s", type=float, default=20.0, help="per case; longer is a hang")
    args = ap.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        report = run_all(all_cases(args.seed, Path(tmp), args.scale), limit_s=args.limit_s)
    print(report.table())
    slowest = max(report.outcomes, key=lambda o: o.seconds)
    print(f"{len(report.outcomes)} cases in {time.perf_counter() - start:.1f} s (seed {args.seed}, scale {args.scale}); "
          f"slowest {slowest.seconds:.2f} s: {slowest.case.entry} / {slowest.case.label}")
    return 1 if report.bad() else 0


if __name__ == "__main__":
    sys.exit(main())

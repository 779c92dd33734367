"""Run every benchmark in bench/ (make bench). Each prints its own figures. The speed suite runs
first and compares with the last table in docs/PERFORMANCE.md: a case over 10% slower is flagged
(SLOWER: ...) and makes the exit status 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    print("== speed_suite.py --compare", flush=True)
    code = subprocess.call([sys.executable, str(HERE / "speed_suite.py"), "--compare"])
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        code |= subprocess.call([sys.executable, str(script)])
    return code


if __name__ == "__main__":
    sys.exit(main())

"""Run every benchmark in bench/ (make bench). Each prints its own figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    code = 0
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        code |= subprocess.call([sys.executable, str(script)])
    return code


if __name__ == "__main__":
    sys.exit(main())

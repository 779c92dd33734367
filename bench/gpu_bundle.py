"""`make gpu-bundle`: the wheels bench/gpu_suite.py needs beyond torch and transformers, in one folder.

A lent GPU machine reaches no package registry; it has torch and transformers (and often more, but
nothing is assumed). This collects binary wheels of every other package the suite imports, at the
versions this environment runs (requirements.txt pins them), for the target Python and manylinux,
and checks the folder stays under the 64 MiB a device call may carry. On the GPU machine:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site gpu_bundle/*.whl
    PYTHONPATH=/tmp/site python3 bench/gpu_suite.py

`make gpu-bundle-check` (part of `make test`) proves it: a fresh venv with only torch and
transformers plus this bundle runs `bench/gpu_suite.py --device cpu --quick`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

# What the suite imports beyond torch/transformers (and their own dependencies), with pandas' needs.
PACKAGES = ("simpy", "pandas", "python-dateutil", "tzdata", "scipy", "nvidia-ml-py", "mypy-extensions")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
LIMIT_BYTES = 64 << 20


def collect(out: Path, python_version: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    pins = [f"{name}=={version(name)}" for name in PACKAGES]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--implementation", "cp",
           "--python-version", python_version, "-d", str(out), *[a for p in PLATFORMS for a in ("--platform", p)],
           *pins]
    subprocess.run(cmd, check=True)
    return sorted(out.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu_bundle")
    ap.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    args = ap.parse_args(argv)
    wheels = collect(Path(args.out), args.python_version)
    size = sum(w.stat().st_size for w in wheels)
    names = {w.name.split("-")[0].lower().replace("_", "-") for w in wheels}
    missing = {p.replace("_", "-") for p in PACKAGES} - names
    print(f"{args.out}: {len(wheels)} wheels, {size / 2**20:.1f} MiB for Python {args.python_version}")
    if missing:
        print(f"error: no wheel for {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    if size > LIMIT_BYTES:
        print(f"error: {size / 2**20:.1f} MiB is over the 64 MiB a device call carries", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

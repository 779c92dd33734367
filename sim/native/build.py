"""Compile the simulator's hot modules with mypyc, in place (`make native`; sim/native/__init__.py says why).

    .venv/bin/python sim/native/build.py          # build if any source changed since the last build
    .venv/bin/python sim/native/build.py --clean  # remove the compiled modules (run as source)

Idempotent and quick when nothing changed (it compares the sources' hashes with the manifest). Without a
C compiler or mypyc it says so in one line and leaves the simulator running as source: slower, the same
results.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

os.environ["KVSIM_PURE_PYTHON"] = "1"  # this process imports the source, never a half-built group
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from sim.native import GROUP, MANIFEST, NATIVE_MODULES, ROOT, extension_path, source_hash, source_path  # noqa: E402

_SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
paths = sys.argv[sys.argv.index("--paths") + 1].split(",")
del sys.argv[sys.argv.index("--paths"):]
setup(name="kvsim_native", packages=[], py_modules=[],
      ext_modules=mypycify(paths, opt_level="3", group_name={group!r}))
"""


def group_libraries() -> list[Path]:
    return sorted(ROOT.glob(f"{GROUP}__mypyc*"))


def clean() -> None:
    """Every compiled module under sim/, registered or not (one dropped from the list must not linger:
    the group's library would still hold its old code), the group's libraries and the manifest."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for lingering in (ROOT / "sim").rglob(f"*{suffix}"):
            lingering.unlink()
    for lib in group_libraries():
        lib.unlink()
    MANIFEST.unlink(missing_ok=True)


def current() -> bool:
    try:
        built = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return False
    return (built.get("python") == sys.version.split()[0] and built.get("modules") == {m: source_hash(m) for m in NATIVE_MODULES}
            and all(extension_path(m).exists() for m in NATIVE_MODULES) and bool(group_libraries()))


def _missing_toolchain() -> str:
    """What a build would lack on this machine ('' if nothing): a C compiler, Python's headers, mypyc."""
    if shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None:
        return "no C compiler found"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python.h (the python3-dev headers) found"
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc (part of mypy) is not installed"
    return ""


def build() -> int:
    if current():
        print("native: the compiled simulator is current")
        return 0
    missing = _missing_toolchain()
    if missing:
        print(f"native: {missing}: the simulator runs as Python source (slower, the same results)")
        return 0
    clean()
    paths = [str(source_path(m).relative_to(ROOT)) for m in NATIVE_MODULES]
    hashes = {m: source_hash(m) for m in NATIVE_MODULES}  # before the build: what was compiled
    with tempfile.TemporaryDirectory() as tmp:
        setup = Path(tmp) / "setup.py"
        setup.write_text(_SETUP.format(group=GROUP))
        cmd = [sys.executable, str(setup), "build_ext", "--inplace", "--build-temp", str(Path(tmp) / "temp"),
               "--build-lib", str(Path(tmp) / "lib"), "--paths", ",".join(paths)]
        print(f"native: compiling {len(paths)} modules with mypyc (about a minute) ...", flush=True)
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # mypyc's generated C
    if out.returncode != 0:
        clean()
        tail = [ln for ln in (out.stdout + out.stderr).splitlines() if "error" in ln.lower()][:5]
        print("native: the build failed, the simulator runs as Python source: " + (" | ".join(tail) or "see mypyc's output"))
        return 1
    MANIFEST.write_text(json.dumps({"python": sys.version.split()[0], "modules": hashes}, indent=1) + "\n")
    print(f"native: compiled {len(paths)} modules")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clean", action="store_true", help="remove the compiled modules")
    args = ap.parse_args(argv)
    if args.clean:
        clean()
        print("native: removed the compiled modules")
        return 0
    return build()


if __name__ == "__main__":
    sys.exit(main())

"""The compiled simulator (sim/native): the same frames as the source, and never a stale module run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sim
from sim import native

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, **env}, check=True)
    return out.stdout


def require_compiled() -> None:
    """`make test` builds the group (KVSIM_REQUIRE_NATIVE=1): there a missing build fails; elsewhere it skips."""
    if not sim.COMPILED:
        if os.environ.get("KVSIM_REQUIRE_NATIVE"):
            pytest.fail("the compiled simulator is not built or not current: run `make native`")
        pytest.skip("the compiled simulator is not built (make native)")


@pytest.mark.slow
def test_the_compiled_simulator_gives_the_sources_frames():
    """bench/hash_frames.py's five scenarios (dense under pressure, prefix caching, contiguous,
    hybrid groups, static batching with swap) hash the same compiled and as source."""
    require_compiled()
    code = "import json, sim; print(json.dumps({'compiled': sim.COMPILED}))"
    assert json.loads(run_python(code))["compiled"] is True
    assert json.loads(run_python(code, **{native.PURE_ENV: "1"}))["compiled"] is False
    hashes = [subprocess.run([sys.executable, "bench/hash_frames.py", "--json"], cwd=ROOT, capture_output=True, text=True,
                             timeout=600, env={**os.environ, **env}, check=True).stdout
              for env in ({}, {native.PURE_ENV: "1"})]
    assert json.loads(hashes[0]) == json.loads(hashes[1])


def test_every_registered_module_is_compiled_when_the_group_runs():
    require_compiled()
    for name in native.NATIVE_MODULES:
        module = sys.modules.get(name) or __import__(name, fromlist=["_"])
        assert Path(module.__file__).suffix == ".so", name


def test_the_source_runs_when_asked():
    out = run_python("import sim.core.scheduler as s, sim; print(s.__file__, sim.COMPILED)", KVSIM_PURE_PYTHON="1")
    path, compiled = out.split()
    assert path.endswith("scheduler.py") and compiled == "False"


def test_a_changed_source_makes_the_group_stale(tmp_path, monkeypatch):
    """A compiled module whose source changed since the build is stale, and so is one the manifest lacks."""
    present = [m for m in native.NATIVE_MODULES if native.extension_path(m).exists()]
    if not present:
        pytest.skip("the compiled simulator is not built (make native)")
    manifest = tmp_path / "manifest.json"
    hashes = {m: native.source_hash(m) for m in native.NATIVE_MODULES}
    monkeypatch.setattr(native, "MANIFEST", manifest)
    manifest.write_text(json.dumps({"modules": hashes}))
    assert native.stale_modules() == []
    changed = present[0]
    manifest.write_text(json.dumps({"modules": {**hashes, changed: "0" * 64}}))
    assert native.stale_modules() == [changed]
    manifest.write_text(json.dumps({"modules": {m: h for m, h in hashes.items() if m != changed}}))
    assert native.stale_modules() == [changed]
    manifest.unlink()
    assert native.stale_modules() == present  # no record of the build: every compiled module is suspect


def test_the_source_finder_loads_the_py_file():
    spec = native._SourceFinder({"sim.core.scheduler"}).find_spec("sim.core.scheduler")
    assert spec is not None and spec.origin is not None and spec.origin.endswith("scheduler.py")
    assert native._SourceFinder({"sim.core.scheduler"}).find_spec("sim.core.kv.paged") is None

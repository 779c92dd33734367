"""bench/gpu_suite.py --device cpu --quick: every section runs and reports; the table has a row per figure.
(make gpu-bundle-check runs the same command from a fresh venv with only torch, transformers and the bundle.)"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parent.parent / "bench" / "gpu_suite.py"
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def load_suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", SUITE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_suite"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_quick_suite_on_cpu(tmp_path):
    suite = load_suite()
    assert suite.main(["--device", "cpu", "--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_suite.json").read_text())
    s = report["sections"]
    assert not report["errors"]
    assert set(s) == {"pool", "decode", "throughput", "calibration", "overlay", "kv_dtypes", "vllm"}
    assert all(r["exact"] for r in s["pool"])
    assert [r["batch"] for r in s["decode"]["rows"]] == [1, 4, 16] and all(r["step_s"] > 0 for r in s["decode"]["rows"])
    assert s["throughput"]["ours_tok_s"] > 0 and s["throughput"]["hf_generate_tok_s"] > 0
    assert len(s["calibration"]["held_out"]) == 3 and (tmp_path / "profile.json").is_file()
    assert set(s["overlay"]) == {"azure2024_conv_small.csv", "azure_code_small.csv"}
    assert {r["kv_dtype"] for r in s["kv_dtypes"]} == {"int8", "fp8"}
    md = (tmp_path / "gpu_suite.md").read_text()
    assert md.count("\n| pool |") == 4 and "| throughput |" in md and "FAILED" not in md


def test_a_failing_section_is_reported_and_the_rest_run(tmp_path, monkeypatch):
    suite = load_suite()

    def boom(plan, loaded):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(suite, "section_pool", boom)
    assert suite.main(["--device", "cpu", "--quick", "--only", "pool,kv_dtypes", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "gpu_suite.json").read_text())
    assert report["errors"] == {"pool": "RuntimeError: out of memory"} and "kv_dtypes" in report["sections"]
    assert "| pool | FAILED | RuntimeError: out of memory |" in (tmp_path / "gpu_suite.md").read_text()

"""A measured run's prefix-cache retention interval: recorded, else its vLLM version's default, and
copied into the replay's scenario (sim/fidelity/run_retention.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sim.fidelity.run_record import RunError, load_run_dir
from sim.fidelity.run_retention import version_default
from sim.fidelity.validate import run_scenario

FIXTURE = Path(__file__).resolve().parent.parent / "samples" / "vllm_run"


@pytest.mark.parametrize(("version", "expected"), [("0.19.0", None), ("0.22.1", None), ("0.28.0", None),
                                                   ("v0.29.0", 0), ("0.32.0", 0), ("", 0), ("main", 0)])
def test_version_default(version, expected):
    assert version_default(version) == expected


def _run(tmp_path: Path, model: str, version: str, **kv_cache) -> object:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir)
    (run_dir / "config.json").unlink()  # the catalog model, not the fixture's config
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["vllm_version"] = version
    meta["kv_cache"].update(kv_cache)
    (run_dir / "meta.json").write_text(json.dumps(meta))
    return load_run_dir(run_dir, overrides={"model": model, "gpu": "h100-sxm"})


@pytest.mark.parametrize(("version", "kv_cache", "expected"), [
    ("0.25.0", {}, None),  # unset env var: dense
    ("0.32.0", {}, 0),
    ("0.25.0", {"prefix_cache_retention_interval": "0"}, 0),  # a cache_config_info label (text)
    ("0.32.0", {"prefix_cache_retention_interval": "None"}, None),
    ("0.32.0", {"prefix_cache_retention_interval": 512}, 512),
])
def test_hybrid_run_replays_with_its_interval(tmp_path, version, kv_cache, expected):
    run = _run(tmp_path, "gpt-oss-20b", version, **kv_cache)
    assert run.engine.retention_interval == expected
    assert run_scenario(run).prefix_cache_retention_interval == expected


def test_dense_run_keeps_the_default(tmp_path):
    """No sliding or state group: the interval changes nothing, and the scenario keeps its digest."""
    run = _run(tmp_path, "llama-3.1-8b", "0.25.0")
    assert run.engine.retention_interval is None and run_scenario(run).prefix_cache_retention_interval == 0


def test_bad_interval_is_one_line(tmp_path):
    with pytest.raises(RunError, match=r"meta.json: kv_cache.prefix_cache_retention_interval must be a whole "
                                       r"number of tokens >= 0 or None, got -16"):
        _run(tmp_path, "gpt-oss-20b", "0.32.0", prefix_cache_retention_interval=-16)


@pytest.mark.parametrize(("label", "expected"), [("None", None), ("0", 0), ("256", 256)])
def test_observe_copies_the_servers_label(label, expected):
    """`sim observe` keeps vllm:cache_config_info's prefix_cache_retention_interval (None included)."""
    from sim.fidelity.observe_record import EngineGuess, engine_meta
    from sim.fidelity.prom import cache_config
    from sim.fidelity.run_record import parse_engine

    page = ('vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0",'
            f'num_gpu_blocks="1000",prefix_cache_retention_interval="{label}"}} 1.0\n')
    meta = engine_meta(EngineGuess(model="gpt-oss-20b", gpu="h100-sxm"), "gpt-oss", 8192, cache_config(page), "0.32.0")
    assert parse_engine(meta, "meta.json").retention_interval == expected

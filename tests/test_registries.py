"""Registries: an allocator and a KV dtype registered from this module show up in the CLI choices, the
Scenario checks, the dashboard form, the docs table and a real run; docs/OPTIONS.md matches the code."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from models.kv_dtypes import KV_DTYPES, KVDtype, register_kv_dtype
from models.registry import Registry, UnknownOption
from sim.__main__ import build_parser
from sim.cli.scenario_args import scenario_from_args
from sim.core.kv.paged import PagedAllocator
from sim.core.kv.registry import ALLOCATORS, AllocatorKind, register_allocator
from sim.run.engine import simulate
from sim.scenario import Scenario, ScenarioError
from sim.trace import parse_synthetic_spec
from ui.options_doc import render

ROOT = Path(__file__).resolve().parent.parent


def _paged_no_prefix(layout, num_blocks, bytes_per_token, prefix_block_size):
    """A paged pool that never shares blocks, whatever the scenario's prefix_caching says."""
    return PagedAllocator(num_blocks, layout.block_size, bytes_per_token, prefix_caching=False)


@pytest.fixture
def plugins():
    """Register one allocator and one KV dtype from outside the project; unregister afterwards."""
    register_allocator(AllocatorKind("paged-noshare", _paged_no_prefix, "paged, prefix caching off"))
    register_kv_dtype(KVDtype("fp6", 6, None, "fp6 e3m2 (a test dtype)"))
    yield
    ALLOCATORS.unregister("paged-noshare")
    KV_DTYPES.unregister("fp6")


def _choices(parser, command: str, flag: str) -> tuple[str, ...]:
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return tuple(next(a for a in sub._actions if flag in a.option_strings).choices)


def test_registered_options_reach_the_cli(plugins):
    parser = build_parser()
    for command in ("run", "compare"):
        assert "paged-noshare" in _choices(parser, command, "--allocator")
        assert "fp6" in _choices(parser, command, "--kv-dtype")
    assert "fp6" in _choices(parser, "kv", "--kv-dtype") and "fp6" in _choices(parser, "capacity", "--kv-dtype")
    args = parser.parse_args(["run", "--synthetic", "n=5", "--model", "llama-3-8b",
                              "--allocator", "paged-noshare", "--kv-dtype", "fp6"])
    assert scenario_from_args(args) == Scenario(allocator="paged-noshare", kv_dtype="fp6")


def test_registered_options_reach_the_gpu_backend_cli(plugins):
    from gpu_backend.cli import build_parser as gpu_parser

    assert "paged-noshare" in _choices(gpu_parser(), "run", "--allocator")
    assert "fp6" in _choices(gpu_parser(), "run", "--kv-dtype")


def test_registered_options_pass_validation_and_are_named_in_its_messages(plugins):
    Scenario(allocator="paged-noshare", kv_dtype="fp6")
    with pytest.raises(ScenarioError, match="paged-noshare"):
        Scenario(allocator="slab")
    with pytest.raises(ScenarioError, match="fp6"):
        Scenario(kv_dtype="int3")


def test_unregistered_names_are_rejected():
    with pytest.raises(ScenarioError, match="allocator='paged-noshare'"):
        Scenario(allocator="paged-noshare")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--synthetic", "n=5", "--model", "x", "--kv-dtype", "fp6"])


def test_registered_options_reach_the_form(plugins):
    at = AppTest.from_file(str(ROOT / "app_pages" / "simulate.py"), default_timeout=120)
    at.query_params.update({"trace_first": "50", "paging": "paged-noshare", "kv_dtype": "fp6"})
    at.run()
    assert not at.exception, at.exception
    assert "paged-noshare" in at.radio(key="paging").options
    assert "fp6" in at.selectbox(key="kv_dtype").options
    assert at.radio(key="paging").value == "paged-noshare" and at.selectbox(key="kv_dtype").value == "fp6"
    assert not at.error


def test_registered_options_run_and_reach_the_docs_table(plugins):
    trace = parse_synthetic_spec("n=40,rate=20,seed=1").generate()
    result = simulate(trace, Scenario(allocator="paged-noshare", kv_dtype="fp6", kv_budget_gib=1.0))
    assert result.summary["completed"] == 40
    # llama-3-8b: 2 (K, V) x 32 layers x 8 kv heads x (128 x 6 bits = 96 bytes), no scales
    assert result.summary["bytes_per_token"] == 2 * 32 * 8 * 96
    doc = render()
    assert "| `paged-noshare` | paged, prefix caching off |" in doc and "| `fp6` | 6 | none |" in doc


def test_options_doc_is_current():
    assert (ROOT / "docs" / "OPTIONS.md").read_text(encoding="utf-8") == render(), (
        "docs/OPTIONS.md is stale: run `python -m ui.options_doc > docs/OPTIONS.md`")


def test_registry_rejects_duplicates_and_names_choices_for_unknowns():
    reg: Registry[int] = Registry("colour", [("red", 1), ("blue", 2)])
    with pytest.raises(ValueError, match="already registered"):
        reg.register("red", 3)
    with pytest.raises(UnknownOption, match="unknown colour 'green': choose one of red, blue"):
        reg.lookup("green")
    assert reg.names() == ("red", "blue") and ["x"] not in reg

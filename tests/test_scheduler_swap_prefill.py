"""Swap preemption never turns an unfinished prefill into a decode.

A request preempted while its prompt is still being prefilled in chunks has no sampled token yet;
resuming it as a one-token decode would count a generated token that was never sampled (it would
finish one token early and report a wrong TTFT). Such victims are recomputed instead.
"""

import numpy as np

from sim.core.request import SWAPPED
from sim.run.engine import Simulation, build
from sim.scenario import Scenario
from sim.trace import synthetic
from tests.resolved import kv_bytes_per_token_of


def swapped_victims(setup, step_s: float = 0.01) -> list[tuple[int, int, int]]:
    """(computed, prompt, generated) of every victim swapped out, read from each step's plan as the
    scheduler preempts it, on a fixed-step clock (arrivals join between steps)."""
    sched, table = setup.replicas[0].sched, setup.table
    order = np.argsort(table.arrival_s, kind="stable").tolist()
    now, out = 0.0, []
    while order or sched.has_work:
        while order and table.arrival_s[order[0]] <= now:
            sched.add_request(order.pop(0))
        plan = sched.schedule(now)
        if plan is None:
            now = float(table.arrival_s[order[0]]) if order else now + step_s
            continue
        out += [(int(table.computed[r]), int(table.prompt[r]), int(table.generated[r]))
                for r in plan.preempted if table.status[r] == SWAPPED]
        now += step_s
        sched.complete_step(plan, now)
    return out


def test_swapped_requests_have_finished_their_prompt_and_outputs_are_exact():
    trace = synthetic(60, 50.0, input="uniform:lo=100:hi=500", output="uniform:lo=100:hi=400", seed=4)
    sc = Scenario(model="tiny-llama", preemption="swap", max_batched_tokens=256, chunked_prefill=True)
    sc = sc.replace(kv_budget_gib=60 * 16 * kv_bytes_per_token_of(sc) / 2**30)  # 60 blocks: any one fits
    swapped_states = swapped_victims(build(trace, sc))
    assert swapped_states  # swaps happened
    for computed, prompt, generated in swapped_states:
        assert generated >= 1 and computed == prompt + generated - 1
    setup = build(trace, sc)
    sim = Simulation(setup, skip_ahead=False)
    sim.run()
    result = sim.result(trace.digest(), 0.0)
    assert result.summary["num_preemptions"] > 0
    req, table = result.requests, setup.table
    assert result.summary["rejected"] == 0 and result.summary["completed"] == len(req)
    assert (table.generated == table.output).all()  # every request produced exactly its output tokens
    assert np.all(req["first_token_s"] >= req["admitted_s"])

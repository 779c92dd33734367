"""The Plan's answer travels with it (issue 24): the HTML report and the snapshot of a Plan drill-down
lead with requests/s per replica, the SLO, what binds and what missed at the next rate up, GPUs for
the target with the fractional replica count, the alternatives and the workload with its load factor;
a Simulate report states its load factor."""

from __future__ import annotations

import re

import pytest

from sim.plan.config_search import SearchOptions
from sim.plan.grid import expand
from sim.plan.search import search
from sim.plan.slo import parse_slo
from sim.plan.workload import Workload
from sim.report.html_report import html_report
from sim.report.plan_answer import answer_lines, plan_answer
from sim.report.snapshot import Snapshot
from sim.run.engine import simulate
from sim.scenario import Scenario
from sim.trace import load_trace

TARGET = 30.0


@pytest.fixture(scope="module")
def drilled(samples_dir):
    trace = load_trace(samples_dir / "azure_conv_slice.csv")
    configs = expand(Scenario(model="llama-3-8b", gpu="rtx-4090"), {"kv_dtype": ["bf16", "fp8"]})
    plan = search(Workload(trace=trace), configs, SearchOptions(parse_slo("ttft_p99=2,tpot_p99=0.1"), 0.05,
                                                                 TARGET)).to_dict()
    row = plan["rows"][plan["best"]["row"]]
    run = simulate(Workload(trace=trace).at(row["level"]), Scenario.from_dict(row["scenario"]))
    snap = Snapshot.from_result(run, None).with_plan(plan)
    return plan, row, snap


def test_the_answer_in_words(drilled):
    plan, row, _ = drilled
    a = plan_answer(plan)
    assert a is not None and a.rate_per_replica == pytest.approx(row["max_rate_per_s"])
    assert a.replicas_exact == pytest.approx(TARGET / row["max_rate_per_s"])
    assert a.gpus_needed == row["gpus_for_target"]  # one GPU per replica: the table's count
    text = " ".join(answer_lines(a))
    assert f"{a.replicas_exact:.2f} replicas -> {a.replicas_needed} replicas = {a.gpus_needed} GPUs" in text
    assert "TTFT" in text and "What binds" in text and f"x{row['level']:g}" in text


def test_the_report_from_a_plan_leads_with_the_answer(drilled):
    plan, row, snap = drilled
    page = html_report(Snapshot.from_json(snap.to_json()))  # what the download carries, via the snapshot file
    answer = page[page.index('id="plan-answer"'):page.index("</section>")]
    assert re.search(r"\d requests/s \([\d.]+-[\d.]+\) per replica under", answer)  # with its 90% interval
    assert "90% interval" in answer
    assert "re-simulated, the largest rate meeting the SLO with step times x" in answer  # the best row's (sim/plan/rate_interval.py)
    cells = re.findall(r"<td>([\d.]+-[\d.]+ \((?:re-simulated|first order)\))</td>", answer)
    assert len(cells) == sum(1 for r in plan["rows"] if r["max_rate_interval"])  # each row names its method
    assert "p99" in answer and "What binds" in answer
    assert f"{TARGET:g} requests/s:" in answer and "replicas =" in answer and "GPUs" in answer
    if row["missed_above"]:
        assert "at the next rate up it misses" in answer
    assert "Alternatives" in answer and answer.count("<tr>") == len(plan["rows"]) + 1
    assert f"Load factor x{row['level']:g}" in page  # not "speedup 1": the run was made at the row's level


def test_a_simulate_report_states_its_load_factor(samples_dir):
    trace = load_trace(samples_dir / "azure_conv_slice.csv")
    page = html_report(simulate(trace, Scenario(gpu="rtx-4090", speedup=0.5)), trace="azure_conv_slice.csv")
    assert "Load factor x0.5: the trace&#x27;s arrivals 0.5 times as fast as recorded" in page
    assert 'id="plan-answer"' not in page


def test_tier_words_say_where_the_cpu_tier_is_shared():
    """The CPU tier is sized per replica either way; with the node scope the answer says it is pooled."""
    from sim.report.plan_answer import tier_words

    row = {"scenario": {"cpu_tier_gib": 64, "nvme_tier_gib": 0}}
    assert tier_words(row).startswith("KV tiers: CPU 64 GiB per replica; ")
    node = {"scenario": {"cpu_tier_gib": 64, "cpu_tier_scope": "node"}}
    assert tier_words(node).startswith("KV tiers: CPU 64 GiB per replica, pooled by the node's replicas; ")
    assert tier_words({"scenario": {}}) is None

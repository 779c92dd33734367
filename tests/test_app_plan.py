"""AppTest: the Plan page answers the default sweep (answer line, Pareto chart, table with what
binds, drill-down run), follows its URL-bound widgets, and saves a snapshot whose link reopens the
search and the run on the Snapshots page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from sim.report.snapshot import Snapshot, SnapshotError
from sim.report.snapshot_store import SnapshotStore

ROOT = Path(__file__).resolve().parent.parent
PLAN = str(ROOT / "app_pages" / "plan.py")
SNAPSHOTS = str(ROOT / "app_pages" / "snapshots.py")
BINDINGS = {"kv", "compute", "token_budget", "max_num_seqs"}


@pytest.fixture(autouse=True)
def snapshot_db(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(tmp_path / "snaps.sqlite"))
    return tmp_path / "snaps.sqlite"


def page(path: str, **params: str) -> AppTest:
    at = AppTest.from_file(path, default_timeout=240)
    at.query_params.update(params)
    return at.run()


@pytest.mark.slow
def test_default_sweep_is_answered_with_chart_table_and_drill_down():
    at = page(PLAN)
    assert not at.exception and not at.error
    answer = at.success[0].value
    assert answer.startswith("Best (lowest $ per million output tokens): ") and "What binds:" in answer
    df = at.dataframe[0].value
    assert len(df) == 4 and set(df["binds"]) <= BINDINGS and (df["max req/s"] > 0).all()
    methods = [str(c).rsplit("(", 1)[-1] for c in df["90% interval"]]  # each row names how (sim/plan/rate_interval.py)
    assert methods.count("re-simulated)") == 1 and methods.count("first order)") == 3
    assert any("re-simulated, the largest rate meeting the SLO with step times x" in m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) >= 2  # the Pareto chart and the drill-down's charts
    pareto = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert pareto["layout"]["xaxis"]["title"]["text"].startswith("tokens/s per user")
    metrics = {m.label: m.value for m in at.metric}
    assert any(label.startswith("completed (of") for label in metrics)


@pytest.mark.slow
def test_url_state_and_no_answer_warning():
    at = page(PLAN, plan_gpus="l40s", plan_kv="fp8", plan_ttft="0.001", plan_tpot="0", trace_first="60")
    assert not at.exception
    assert any("No configuration meets ttft_p99=0.001" in w.value for w in at.warning)
    assert len(at.dataframe[0].value) == 1 and at.dataframe[0].value["SLO met"].tolist() == [False]


@pytest.mark.slow
def test_snapshot_of_the_drill_down_carries_the_search(snapshot_db):
    at = page(PLAN, plan_gpus="l40s", plan_kv="bf16", trace_first="80")
    at.text_input(key="plan-save-name").set_value("plan run")
    next(b for b in at.button if "Save snapshot" in b.label).click().run()
    saved = SnapshotStore(snapshot_db).list()
    assert [s.name for s in saved] == ["plan run"]
    snap = SnapshotStore(snapshot_db).get(saved[0].id)
    assert snap.plan is not None and snap.plan["rows"][0]["gpu"] == "l40s"
    opened = page(SNAPSHOTS, snapshot=saved[0].id)
    assert not opened.exception and not opened.error
    assert any(s.value.startswith("Best (") and "): l40s" in s.value for s in opened.success)
    assert len(opened.dataframe[0].value) == 1


def test_snapshot_plan_is_checked():
    from sim.run.engine import simulate
    from sim.scenario import Scenario
    from sim.trace import synthetic

    trace = synthetic(20, 5.0)
    base = Snapshot.from_result(simulate(trace, Scenario()), trace).to_dict()
    row = {"binding": "kv", "scenario": {}, "max_rate_per_s": 1.0, "tok_s_per_gpu": 10.0}
    good = {"slo": "ttft_p99=1", "rows": [row], "best": {"row": 0}, "pareto": [{"row": 0}]}
    assert Snapshot.from_dict({**base, "plan": good}).plan == good
    for bad, words in [({"rows": "x", "slo": "a"}, "rows"), ({**good, "best": {"row": 3}}, "best"),
                       ({**good, "rows": [{**row, "tok_s_per_gpu": "many"}]}, "tok_s_per_gpu"),
                       ({**good, "pareto": [{"row": -1}]}, "pareto")]:
        with pytest.raises(SnapshotError, match=words):
            Snapshot.from_dict({**base, "plan": bad}, "f.json")


@pytest.mark.slow
def test_drill_down_link_opens_the_same_run_on_simulate():
    """The row's scenario and its load level travel in the Simulate page's URL state: same scenario
    (with speedup = the level), same figures as the Plan page's drill-down."""
    from urllib.parse import parse_qsl

    from ui.defaults import DEFAULT_SCENARIO

    at = page(PLAN, plan_gpus="rtx-4090", plan_kv="bf16")
    assert not at.exception
    link = next(m.value for m in at.markdown if "Open this run on the Simulate page" in m.value)
    query = dict(parse_qsl(link.split('href="simulate?', 1)[1].split('"', 1)[0]))  # the page run alone: a same-tab link
    drill = {m.label: m.value for m in at.metric}
    sim = AppTest.from_file(str(ROOT / "app_pages" / "simulate.py"), default_timeout=240)
    sim.query_params.update(query)
    sim.run()
    assert not sim.exception and not sim.error
    row = at.dataframe[0].value.iloc[0]
    level = float(query["load"])
    digest = next(c.value for c in sim.caption if "scenario" in c.value).rsplit("scenario ", 1)[1]
    assert row["binds"] == "kv" and 0.5 < level < 2  # the 4090 at bf16: KV-bound near the recorded rate
    assert digest == DEFAULT_SCENARIO.replace(speedup=level).digest()
    assert {m.label: m.value for m in sim.metric} == drill


@pytest.mark.slow
def test_tier_sizes_are_a_dimension_and_the_answer_prices_them():
    """A 64 GiB CPU tier per replica: 64 x 2^30 / 1e9 GB x $10 / 36 per GB-month / 730 h = $0.02615
    per GPU-hour on one GPU, shown in the table and in the answer; prefix caching is on for the row."""
    at = page(PLAN, plan_gpus="h100-sxm", plan_kv="bf16", plan_cpu_tier_gib="64", trace_first="60")
    assert not at.exception and not at.error
    df = at.dataframe[0].value
    assert df["tiers $ per GPU-h"].tolist() == [pytest.approx(64 * 2**30 / 1e9 * 10 / 36 / 730)]
    answer = "\n".join(m.value for m in at.markdown)
    assert "KV tiers: CPU 64 GiB per replica; their DRAM and NVMe add $0.0261 per GPU-hour" in answer
    from urllib.parse import parse_qsl

    link = next(m.value for m in at.markdown if "Open this run on the Simulate page" in m.value)
    query = dict(parse_qsl(link.split('href="simulate?', 1)[1].split('"', 1)[0]))
    assert (query["prefix"], query["cpu_tier"], query["nvme_tier"]) == ("true", "64", "0")  # the row's tiers travel
    sim = AppTest.from_file(str(ROOT / "app_pages" / "simulate.py"), default_timeout=240)
    sim.query_params.update(query)
    sim.run()
    assert not sim.exception and not sim.error
    assert {m.label: m.value for m in sim.metric} == {m.label: m.value for m in at.metric}  # the same run
    bad = page(PLAN, plan_gpus="h100-sxm", plan_kv="bf16", plan_cpu_tier_gib="lots")
    assert not bad.exception
    shown = [e.value.replace("\\", "") for e in bad.error]  # markdown-escaped by public_error
    assert shown == ["CPU tier sizes (GiB per replica): 'lots' is not a comma list of numbers"]

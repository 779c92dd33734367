"""The fleet in the report, the dashboard's Simulate page and the Compare presets."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from sim.fleet.replay import simulate
from sim.report.html_report import headline_metrics, html_report, human
from sim.scenario import Scenario
from sim.trace import synthetic
from ui.fleet_view import replica_table
from ui.presets import PRESETS, preset_variants

ROOT = Path(__file__).resolve().parent.parent
SIMULATE = str(ROOT / "app_pages" / "simulate.py")
BASE = Scenario(model="llama-3-8b", gpu="h100-sxm", kv_budget_gib=1.0, max_model_len=4096, replicas=3)


@pytest.fixture(autouse=True)
def snapshot_db(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(tmp_path / "snaps.sqlite"))


def test_report_and_table_show_each_replica():
    res = simulate(synthetic(n=90, rate=20.0, seed=4), BASE.replace(router="least-outstanding"))
    reps = res.summary["fleet"]["replicas"]
    assert sum(r["routed"] for r in reps) == 90
    tl = res.summary["fleet"]["timeline"]
    assert len(tl["kv_usage"]) == 3 and len(tl["kv_usage"][0]) == len(tl["t_s"]) > 0
    table = replica_table(reps)
    assert list(table["routed"]) == [r["routed"] for r in reps]
    page = html_report(res)
    assert "<h2>Fleet</h2>" in page and "least-outstanding" in page and page.count("<tr><td>") >= 3


def test_pd_report_names_the_link_and_the_bytes():
    res = simulate(synthetic(n=20, rate=2.0, seed=4, input="lognormal:mean=2000:sigma=0.3"),
                   BASE.replace(pd="1:1", kv_budget_gib=4.0, kv_link="rdma-200g"))
    page = html_report(res)
    assert "rdma-200g" in page and "KV moved (GB)" in page and "<td>least-outstanding</td>" in page
    assert len(res.summary["fleet"]["transfers"]) == 20
    found = res.summary["pd_decode_hit_tokens"]
    assert f"<th>prompt tokens found on the decode side (not sent)</th><td>{human(found)}</td>" in page
    labels = dict(headline_metrics(res.summary))  # each headline figure names the pool it comes from
    assert labels["preemptions, decode pool"] == str(res.summary["num_preemptions"])
    assert "prefix cache hits, prefill pool" in labels and "prefix cache hits" not in labels


def test_compare_presets_for_routing_and_pd():
    routing = preset_variants(PRESETS[4], BASE)
    assert {sc.router for sc in routing.values()} >= {"round-robin", "kv-precise", "least-outstanding"}
    pd = preset_variants(PRESETS[5], BASE)
    assert [sc.pd for sc in pd.values()] == [None, "1:2", "2:1"]


def test_simulate_page_shows_the_fleet_view():
    at = AppTest.from_file(SIMULATE, default_timeout=180)
    at.query_params.update({"trace_first": "100", "replicas": "2", "router": "least-outstanding"})
    at.run()
    assert not at.exception and not at.error
    assert any(s.value == "Fleet" for s in at.subheader)
    assert any(m.label.startswith("Routing imbalance") for m in at.metric)
    assert any(m.label == "Prefix-cache hit rate" for m in at.metric)  # one pool: no pool named


def test_simulate_page_takes_the_decode_router():
    at = AppTest.from_file(SIMULATE, default_timeout=180)
    at.query_params.update({"trace_first": "40", "serving": "disaggregated P/D", "pd_d": "2",
                            "decode_router": "round-robin"})
    at.run()
    assert not at.exception and not at.error
    assert at.selectbox(key="decode_router").value == "round-robin"
    assert any("decode router round-robin" in c.value for c in at.caption)
    assert any(m.label == "Routing imbalance, prefill / decode" for m in at.metric)  # each pool's own
    assert any(m.label == "Prefix-cache hit rate, prefill pool" for m in at.metric)  # the summary's rate is the prefill pool's


@pytest.mark.slow
def test_plan_page_answers_aggregated_or_disaggregated():
    at = AppTest.from_file(str(ROOT / "app_pages" / "plan.py"), default_timeout=400)
    at.query_params.update({"plan_gpus": "h100-sxm", "plan_kv": "bf16", "plan_replicas": "2", "plan_pd": "true",
                            "plan_router": "least-outstanding", "trace_first": "60"})
    at.run()
    assert not at.exception and not at.error
    df = at.dataframe[0].value
    assert len(df) == 2 and any("pd=1:1" in c for c in df["config"]) and (df["max req/s"] > 0).all()
    assert at.success[0].value.startswith("Best (lowest $ per million output tokens): ")


def test_a_pd_fleet_survives_a_snapshot_round_trip():
    from sim.report.snapshot import Snapshot

    trace = synthetic(n=20, rate=2.0, seed=4, input="lognormal:mean=2000:sigma=0.3")
    res = simulate(trace, BASE.replace(pd="1:2", kv_budget_gib=4.0))
    snap = Snapshot.from_result(res, trace)
    back = Snapshot.from_json(snap.to_json())
    assert back.scenario.pd == "1:2" and back.summary["fleet"] == res.summary["fleet"]
    assert back.summary["kv_transfer_bytes"] == res.summary["kv_transfer_bytes"]
    assert "<h2>Fleet</h2>" in html_report(back)


def test_pd_replicas_are_told_apart_by_pool():
    """Each pool numbers its replicas from 0: the table and the routed bars name the pool, so prefill 0
    and decode 0 are two rows and two bars, not one x position drawn twice."""
    from sim.report.fleet_charts import routed_bars

    trace = synthetic(n=20, rate=2.0, seed=4, input="lognormal:mean=2000:sigma=0.3")
    reps = simulate(trace, BASE.replace(pd="1:2", kv_budget_gib=4.0)).summary["fleet"]["replicas"]
    labels = ["prefill 0", "decode 0", "decode 1"]
    assert list(replica_table(reps)["replica"]) == labels
    assert list(routed_bars(reps).layout.xaxis.ticktext) == labels
    res = simulate(trace, BASE.replace(pd="1:2", kv_budget_gib=4.0))
    page = html_report(res)
    assert all(f"<tr><td>{label}</td>" in page for label in labels)  # the report's table too
    decode = next(p for p in res.summary["fleet"]["pools"] if p["role"] == "decode")
    assert f"<th>decode pool</th><td>2 x TP1 behind least-outstanding, routing imbalance {decode['routing_imbalance']:.3f}</td>" in page

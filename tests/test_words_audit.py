"""The words and defaults audit of issue 24: one test per item, each failing on the code before its
fix (the commit that added it says which)."""

from __future__ import annotations

from sim.run.deployment import Deployment
from sim.scenario import Scenario


def test_gpt_oss_120b_fits_one_h100_with_the_default_weight_dtype():
    """Weights default to the checkpoint's shipped dtype: gpt-oss-120b's mxfp4 experts fit one H100
    (bf16 needed 217.6 GiB and "did not fit" until one knew to pick mxfp4 or native)."""
    assert Scenario().weight_dtype == "native"
    dep = Deployment.resolve(Scenario(model="gpt-oss-120b", gpu="h100-sxm"))
    assert dep.kv_budget_bytes > 8 * 2**30 and dep.num_blocks > 0
    # a bf16 checkpoint ships bf16: the default leaves llama-3-8b exactly as before
    native, bf16 = Deployment.resolve(Scenario()), Deployment.resolve(Scenario(weight_dtype="bf16"))
    assert native.kv_budget_bytes == bf16.kv_budget_bytes and native.num_blocks == bf16.num_blocks


def test_best_states_its_criterion_and_offers_three():
    """"Best" meant cheapest and never said so; it now names its criterion, and fewest GPUs and
    highest requests/s per GPU are offered beside lowest $."""
    from sim.plan.rank import CRITERIA, best_row

    rows = [  # a cheap slow card and a dear fast one
        {"max_rate_per_s": 2.0, "gpus": 1, "gpus_for_target": 5, "usd_per_gpu_hour": 1.0, "tok_s_per_gpu": 400.0,
         "cost_per_mtok": 0.7},
        {"max_rate_per_s": 5.0, "gpus": 1, "gpus_for_target": 2, "usd_per_gpu_hour": 4.0, "tok_s_per_gpu": 1000.0,
         "cost_per_mtok": 1.1},
    ]
    assert set(CRITERIA) == {"cost", "gpus", "rate"}
    cost, gpus, rate = (best_row(rows, 10.0, by) for by in ("cost", "gpus", "rate"))
    assert (cost["row"], cost["criterion"]) == (0, "lowest $ per hour for 10 requests/s")  # $5/h against $8/h
    assert (gpus["row"], gpus["criterion"]) == (1, "fewest GPUs for 10 requests/s")
    assert (rate["row"], rate["criterion"]) == (1, "highest requests/s per GPU")
    assert best_row(rows)["criterion"] == "lowest $ per million output tokens"


def test_a_loopback_snapshot_link_says_how_colleagues_reach_it():
    from ui.result_view import loopback_note

    for link in ("http://127.0.0.1:8501/?snapshot=abc", "http://localhost:8501/?snapshot=abc"):
        note = loopback_note(link)
        assert note is not None and "KVSIM_PUBLIC_URL" in note and "only here" in note
    assert loopback_note("https://kvsim.example.com/tools/?snapshot=abc") is None
    assert loopback_note("http://gpu-box-7:8501/?snapshot=abc") is None


def test_one_save_per_intent(tmp_path, monkeypatch):
    """Enter in the name field submits the form; pressing the button after it must not save a
    second copy of the same result under the same name."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from sim.report.snapshot_store import SnapshotStore

    db = tmp_path / "snaps.sqlite"
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(db))
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app_pages" / "simulate.py"),
                           default_timeout=240)
    at.query_params.update({"trace_first": "40"})
    at.run()
    at.text_input(key="sim-save-name").set_value("one intent")
    save = lambda: next(b for b in at.button if "Save snapshot" in b.label).click().run()  # noqa: E731
    save()
    save()
    assert [s.name for s in SnapshotStore(db).list()] == ["one intent"]
    assert any("Anyone with this read-only link" in s.value for s in at.success)
    at.text_input(key="sim-save-name").set_value("another name")
    save()  # a new name is a new intent
    assert sorted(s.name for s in SnapshotStore(db).list()) == ["another name", "one intent"]


def test_bytes_per_token_is_per_gpu_all_groups_with_the_replica_total_beside_it():
    """The Simulate page once showed the replica's figure (327,680 for llama-3.1-70b TP4) while the
    Capacity page and the glossary said one GPU (81,920): one quantity now, the total beside it."""
    from sim.report.glossary import KV_BYTES
    from sim.report.html_report import kv_pool_line

    summary = {"bytes_per_token": 327_680, "kv_capacity_bytes": 100 * 2**30, "num_blocks": 1000, "block_size": 16}
    line = kv_pool_line(summary, "paged", "bf16", tp=4)
    assert "81,920 bytes per token per GPU, all layer groups (327,680 per replica of 4 GPUs)" in line
    assert "131,072 bytes per token per GPU, all layer groups;" in kv_pool_line(
        dict(summary, bytes_per_token=131_072), "paged", "bf16", tp=1)
    assert "one GPU" in dict(KV_BYTES)["KV bytes per token"] and "layer groups" in dict(KV_BYTES)["KV bytes per token"]


def test_the_gpu_page_compares_times_only_with_a_simulation_of_the_same_device():
    """A tiny model measured on the CPU was set against the H100 roofline (+108,008%): without a
    profile of the device that ran, only the device-independent rows are compared, and it says why."""
    from gpu_backend.overlay import overlay_table, times_not_comparable

    lat = {"mean": 2.0, "p50": 2.0, "p90": 4.0}
    m = {k: lat for k in ("ttft_s", "tpot_s", "e2e_s")} | {"throughput_tok_s": 13.0, "mean_batch_size": 3.0,
                                                             "num_preemptions": 2, "kv_cache_usage_perc": {"peak": 0.5},
                                                             "device": "cpu"}
    s = {k: {"mean": 0.002, "p50": 0.002, "p90": 0.004} for k in ("ttft_s", "tpot_s", "e2e_s")} | {
        "throughput_tok_s": 10000.0, "mean_batch_size": 3.0, "num_preemptions": 2, "kv_cache_usage_perc": {"peak": 0.5}}
    on_cpu = Scenario(gpu="h100-sxm")
    why = times_not_comparable(m, on_cpu)
    assert why is not None and "cpu" in why and "h100-sxm" in why and "profile" in why
    assert overlay_table(m, s, times=False)["metric"].tolist() == ["num_preemptions", "peak KV usage"]
    assert times_not_comparable(m | {"device": "cuda:0"}, on_cpu) is None  # measured on a GPU: compared
    assert times_not_comparable(m, on_cpu.replace(profile="cpu_profile.json")) is None  # a profile of this device


def test_sim_search_offers_the_three_criteria(capsys):
    import json

    from sim.__main__ import main

    assert main(["search", "--synthetic", "preset=sharegpt-like,n=200,rate=5,seed=2", "--model", "llama-3-8b",
                 "--gpu", "h100-sxm,l40s", "--slo", "ttft_p99=1", "--target-rate", "20", "--best-by", "rate",
                 "--tolerance", "0.1", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows, best = out["rows"], out["best"]
    assert best["criterion"] == "highest requests/s per GPU"
    assert rows[best["row"]]["max_rate_per_s"] == max(r["max_rate_per_s"] for r in rows)  # one GPU per row

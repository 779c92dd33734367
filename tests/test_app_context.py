"""Context kept between pages (issue 24): an uploaded trace lives on the server under an id that
travels in the URL, so "open on Simulate" (and a reload) shows the same trace."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from ui.trace_picker import upload_id

ROOT = Path(__file__).resolve().parent.parent


def test_a_link_with_an_upload_id_reopens_the_uploaded_trace(samples_dir):
    data = (samples_dir / "azure_conv_slice.csv").read_bytes()
    tid = upload_id("my_trace.csv", data)  # what the picker does with an upload
    at = AppTest.from_file(str(ROOT / "app_pages" / "simulate.py"), default_timeout=240)
    at.query_params.update({"trace_src": "upload", "trace_id": tid, "gpu": "rtx-4090"})
    at.run()
    assert not at.exception and not at.error
    assert any("Using the uploaded my_trace.csv" in c.value for c in at.caption)
    assert any("my_trace.csv" in c.value and "300" in c.value for c in at.caption)  # the run caption: its 300 requests


def test_an_unknown_upload_id_says_so():
    at = AppTest.from_file(str(ROOT / "app_pages" / "simulate.py"), default_timeout=240)
    at.query_params.update({"trace_src": "upload", "trace_id": "0123456789abcdef"})
    at.run()
    assert not at.exception
    assert any("no longer on the server" in i.value for i in at.info)


def test_a_changed_search_waits_for_run_and_a_cached_one_shows_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(tmp_path / "snaps.sqlite"))
    at = AppTest.from_file(str(ROOT / "app_pages" / "plan.py"), default_timeout=240)
    at.query_params.update({"plan_gpus": "l40s", "plan_kv": "bf16", "trace_first": "60"})
    at.run()  # the page's first search runs at once
    assert not at.exception and len(at.dataframe) >= 1
    assert any(s.value.startswith("1. Workload") for s in at.subheader)
    assert any(c.value.startswith("Workload: azure_conv_slice.csv: 60 requests") for c in at.caption)
    at.multiselect(key="plan_kv").set_value(["fp8"]).run()  # inputs changed: nothing starts
    assert not at.exception and len(at.dataframe) == 0
    assert any("press Run" in i.value for i in at.info)
    at.button(key="plan_run").click().run()
    assert not at.exception and at.dataframe[0].value["config"].tolist() == ["l40s"]
    at.multiselect(key="plan_kv").set_value(["bf16"]).run()  # back to an answer the server holds: at once
    assert not at.exception and len(at.dataframe) >= 1 and not any("press Run" in i.value for i in at.info)


def _uploaded_config(monkeypatch, tmp_path) -> str:
    """What the config.json uploader keeps: a validated copy, by content hash (sim.guard.uploads)."""
    from sim.guard.uploads import store_config

    monkeypatch.setenv("KVSIM_UPLOAD_DIR", str(tmp_path / "uploads"))
    config = (ROOT / "models" / "catalog" / "llama-3-8b.json").read_bytes()
    return str(store_config(config, "my-config.json")[0])


def test_plan_searches_an_uploaded_config(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(tmp_path / "snaps.sqlite"))
    path = _uploaded_config(monkeypatch, tmp_path)
    at = AppTest.from_file(str(ROOT / "app_pages" / "plan.py"), default_timeout=240)
    at.session_state["model_path"] = path  # the session's upload (made on any page)
    at.query_params.update({"plan_model_src": "upload config.json", "plan_gpus": "l40s", "plan_kv": "bf16",
                            "trace_first": "60"})
    at.run()
    assert not at.exception and not at.error
    assert at.dataframe[0].value["max req/s"].iloc[0] > 0


def test_capacity_takes_an_uploaded_config(tmp_path, monkeypatch):
    path = _uploaded_config(monkeypatch, tmp_path)
    at = AppTest.from_file(str(ROOT / "app_pages" / "capacity.py"), default_timeout=240)
    at.session_state["model_path"] = path
    at.run()
    assert not at.exception and not at.error
    shown = " ".join(str(v) for df in at.dataframe for v in df.value.get("model", []))
    assert path in shown

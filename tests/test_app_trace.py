"""AppTest: the Trace page (samples, uploads in every format, synthetic specs, URL binding, bad files)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

PAGE = str(Path(__file__).resolve().parent.parent / "app_pages" / "trace.py")
SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def trace_page(**params: str) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.query_params.update(params)
    return at.run()


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_default_sample_shows_stats_and_charts():
    at = trace_page()
    assert not at.exception
    assert metrics(at)["requests"] == "300"
    assert at.subheader[0].value == "azure_conv_slice.csv: azure format"  # the bundled default (ui/defaults.py)
    assert len(at.get("plotly_chart")) == 2


@pytest.mark.parametrize("name, fmt", [("azure_code_small.csv", "azure"), ("mooncake_small.jsonl", "mooncake"),
                                       ("burstgpt_small.csv", "burstgpt"), ("vidur_small.csv", "vidur"),
                                       ("splitwise_small.csv", "splitwise")])
def test_upload_detects_format(name, fmt):
    at = trace_page()
    at.radio(key="trace_src").set_value("upload").run()
    at.file_uploader(key="trace_file").upload(name, (SAMPLES / name).read_bytes(), "text/csv").run()
    assert not at.exception and not at.error
    assert f"{fmt} format" in at.subheader[0].value


def test_bad_upload_is_one_line_error_not_traceback():
    at = trace_page()
    at.radio(key="trace_src").set_value("upload").run()
    at.file_uploader(key="trace_file").upload("broken.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\nx,1,2\n").run()
    assert not at.exception
    assert len(at.error) == 1 and at.error[0].value.startswith("broken.csv") and "\n" not in at.error[0].value
    assert not at.metric


def test_synthetic_spec_and_bad_spec():
    at = trace_page(trace_src="synthetic", trace_synth="n=50,rate=2,seed=3")
    assert metrics(at)["requests"] == "50"
    at.text_input(key="trace_synth").set_value("n=50,bogus=1").run()
    assert not at.exception and "unknown key 'bogus'" in at.error[0].value


def test_url_params_choose_sample_and_first_n():
    at = trace_page(trace_sample="vidur_small.csv", trace_first="120")
    assert metrics(at)["requests"] == "120"
    assert "vidur format" in at.subheader[0].value


def test_shared_azure_code_trace(shared_traces):
    at = trace_page(trace_src="upload")
    data = (shared_traces / "AzureLLMInferenceTrace_code.csv").read_bytes()
    at.file_uploader(key="trace_file").upload("AzureLLMInferenceTrace_code.csv", data, "text/csv").run()
    assert metrics(at)["requests"] == "8,819"

"""AppTest: pages under hostile input (issue 13): crafted URLs, uploads, configs; one st.error line each."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
TRACE_PAGE = str(ROOT / "app_pages" / "trace.py")
SIM_PAGE = str(ROOT / "app_pages" / "simulate.py")


def test_crafted_synthetic_url_is_bounded() -> None:
    at = AppTest.from_file(TRACE_PAGE, default_timeout=60)
    at.query_params.update(trace_src="synthetic", trace_synth="n=50000000,rate=5")
    at.run()
    assert not at.exception
    assert len(at.error) == 1 and "over the dashboard's limit of 2,000,000" in at.error[0].value


def test_bad_upload_one_line_no_server_path() -> None:
    at = AppTest.from_file(TRACE_PAGE, default_timeout=60).run()
    at.radio(key="trace_src").set_value("upload").run()
    deep = b'{"arrival_s": 0, "input_tokens": ' + b"[" * 5000 + b"]" * 5000 + b', "output_tokens": 3}\n'
    at.file_uploader(key="trace_file").upload("deep.jsonl", deep, "application/json").run()
    assert not at.exception and len(at.error) == 1
    message = at.error[0].value
    assert "deep.jsonl: line 1: JSON nested too deeply" in message and "\n" not in message and str(ROOT) not in message


def test_uploaded_config_kept_outside_checkout(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KVSIM_UPLOAD_DIR", str(tmp_path / "configs"))
    at = AppTest.from_file(SIM_PAGE, default_timeout=120)
    at.query_params.update(model_src="upload config.json")
    at.run()
    bad = json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                      "vocab_size": 32000, "intermediate_size": 11008, "head_dim": 0}).encode()
    at.sidebar.file_uploader(key="model_file").upload("cfg.json", bad, "application/json").run()
    assert not at.exception
    assert any("cfg.json: head_dim must be a positive integer, got 0" in e.value for e in at.sidebar.error)
    assert not (tmp_path / "configs").exists() or not list((tmp_path / "configs").iterdir())  # nothing kept
    assert not (ROOT / "data" / "uploaded_configs").exists() or not list((ROOT / "data" / "uploaded_configs").iterdir())


GPU_PAGE = str(ROOT / "app_pages" / "gpu_run.py")


def test_gpu_runs_switched_off_by_configuration(monkeypatch) -> None:
    monkeypatch.setenv("KVSIM_GPU_RUNS", "off")
    at = AppTest.from_file(GPU_PAGE, default_timeout=120).run()
    assert not at.exception and not [b for b in at.button if b.key in ("gpu_go", "gpu_preset_go")]
    assert any("switched off on this server" in i.value for i in at.info)


def test_gpu_runs_single_flight_and_bounded() -> None:
    from ui import gpu_gate

    at = AppTest.from_file(GPU_PAGE, default_timeout=120).run()
    assert not at.exception
    assert at.number_input(key="gpu_n").max == gpu_gate.MAX_REQUESTS
    assert gpu_gate.try_start()  # another session's run holds the server's one slot
    try:
        next(b for b in at.button if b.key == "gpu_go").click().run()
        assert not at.exception and any("Another GPU run is in progress" in w.value for w in at.warning)
        assert not at.session_state["gpu_run"].thread  # nothing started
    finally:
        gpu_gate.finish()

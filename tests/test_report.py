"""The self-contained HTML report: every chart as inline SVG (no plotly.js), under 1 MB, text escaped."""

from __future__ import annotations

import re

import plotly.offline
import pytest

from sim.report.html_report import (
    TOKEN_SHARE_LABEL,
    headline_metrics,
    html_report,
    kv_pool_line,
    write_html_report,
)
from sim.report.snapshot import Snapshot
from sim.run.engine import simulate
from sim.scenario import Scenario
from sim.trace import load_trace
from tests.test_app_simulate import ROOT
from tests.test_charts import make_result

SAMPLES = ROOT / "samples"


def test_report_draws_every_chart_as_svg_without_scripts(tmp_path):
    result = make_result()
    text = html_report(result)
    assert plotly.offline.get_plotlyjs()[:200] not in text and "<script" not in text  # opens offline, no 4.8 MB bundle
    assert len(re.findall(r'<figure id="chart-\d"><svg ', text)) == 5
    for title in ("GPU memory over time", "Queue and running", "Latency CDFs", "Preemptions"):
        assert title in text
    assert "1,234 tok/s" in text or "1,235 tok/s" in text
    path = write_html_report(result, tmp_path / "r.html")
    assert path.read_text(encoding="utf-8") == text


def test_report_from_snapshot_escapes_names():
    snap = Snapshot.from_result(make_result(), None, name="<script>alert(1)</script>")
    text = html_report(snap)
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;" in text


def test_headline_metrics_formatting():
    rows = dict(headline_metrics(make_result().summary))
    assert rows["completed (of 8)"] == "7"
    assert rows["TTFT p50"] == "400.0 ms" and rows["TTFT p99"] == "800.0 ms"
    slow = dict(headline_metrics(dict(make_result().summary, ttft_s={"p50": 2054.392, "p99": 3713.2})))
    assert slow["TTFT p50"] == "2,054.39 s" and slow["TTFT p99"] == "3,713.20 s"  # thousands separated
    assert rows["peak KV usage"] == "40.0%"
    assert rows[TOKEN_SHARE_LABEL] == "20.0%" and "KV holding tokens (mean)" not in rows
    assert rows["prefix cache hits"] == "n/a"


def test_report_names_trace_and_snapshot_and_formats_values_for_people():
    snap = Snapshot.from_result(make_result(), None, name="peak hour")
    text = html_report(snap, trace="azure_conv.csv")
    assert "Snapshot <b>peak hour</b>" in text and "Trace <b>azure_conv.csv</b>" in text
    cells = re.findall(r"<td>(.*?)</td>", text)
    assert "None" not in cells and "False" not in cells and "True" not in cells
    assert "8,192" in cells  # max_batched_tokens with a thousands separator
    assert "internal fragmentation" in text.split("What the words mean")[1]  # the glossary travels along


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.iterdir() if p.suffix in (".csv", ".jsonl")))
def test_report_of_every_bundled_sample_is_under_a_megabyte(sample):
    """It was 5.4 MB: plotly.js inlined. Inline SVG keeps the same charts in a few hundred KB."""
    trace = load_trace(SAMPLES / sample)
    text = html_report(simulate(trace, Scenario()), trace=sample)
    assert len(text.encode()) < 1_000_000
    assert f"Trace <b>{sample}</b>" in text


def test_share_links_use_the_configured_public_url():
    from ui.result_view import public_link

    assert public_link("https://kvsim.example.com/tools/", "http://10.0.0.5:8501/simulate", "abc") == \
        "https://kvsim.example.com/tools/?snapshot=abc"
    assert public_link("", "http://10.0.0.5:8501/simulate", "abc") == "http://10.0.0.5:8501/?snapshot=abc"
    assert public_link("not a url", "http://h:1/x", "abc", "base") == "http://h:1/base/?snapshot=abc"


def _chat_run(**fields):
    return simulate(load_trace(SAMPLES / "chat_small.csv", max_rows=20), Scenario(**fields))


def test_kv_pool_line_counts_a_contiguous_pool_in_token_slots():
    """Issue 17: "28,006 blocks of 16 tokens" was shown for a contiguous run, which has no blocks."""
    contiguous = _chat_run(allocator="contiguous").summary
    line = kv_pool_line(contiguous, "contiguous")
    slots = contiguous["num_blocks"] * contiguous["block_size"]
    assert f"({slots:,} token slots per replica, reserved contiguously)" in line and "blocks of" not in line
    paged = _chat_run().summary
    assert f"({paged['num_blocks']:,} blocks of 16 tokens per replica)" in kv_pool_line(paged, "paged")


def test_quantised_kv_says_how_it_stores_its_scales():
    """Issue 17: int8 showed more bytes per token than fp8 with no word why."""
    int8, fp8 = _chat_run(kv_dtype="int8"), _chat_run(kv_dtype="fp8")
    assert int8.summary["bytes_per_token"] > fp8.summary["bytes_per_token"]
    int8_line = kv_pool_line(int8.summary, "paged", "int8")
    assert f"{int8.summary['bytes_per_token']:,} bytes per token (int8, " in int8_line
    assert "scale per token per kv head" in int8_line
    assert "one fp32 scale per layer" in kv_pool_line(fp8.summary, "paged", "fp8")
    assert "(bf16" not in kv_pool_line(_chat_run().summary, "paged", "bf16")  # nothing to explain without scales
    text = html_report(int8)
    assert "scale per token per kv head" in text and "int8 vs fp8 KV" in text.split("What the words mean")[1]


def test_downloads_are_named_after_the_snapshot():
    """Issue 17: a live run's downloads ignored the snapshot name typed in the form."""
    from ui.result_view import named_for_download

    live = Snapshot.from_result(make_result(), None)
    snap, stem = named_for_download(live, " peak hour / EU ")
    assert stem == "peak-hour-EU" and snap.name == "peak hour / EU"
    assert "Snapshot <b>peak hour / EU</b>" in html_report(snap)
    assert named_for_download(live.named("saved"), "")[1] == "saved"  # a reopened snapshot keeps its name
    model, allocator = live.scenario.model, live.scenario.allocator
    assert named_for_download(live, "")[1] == f"{model}-{allocator}-{live.scenario.digest()[:6]}"


def test_weight_bytes_follow_the_kv_heads_what_if():
    """The report's weight figure is the deployed model's (the K/V projections shrink with fewer
    KV heads), read from the resolved model, not the catalog entry."""
    from models.spec import load_spec
    from sim.report.html_report import weights_bytes

    full, fewer = _chat_run(), _chat_run(kv_heads=2)
    full.summary.pop("weights_bytes", None)
    fewer.summary.pop("weights_bytes", None)
    catalog = load_spec(full.scenario.model).weight_bytes(full.scenario.weight_dtype)
    assert weights_bytes(full) == catalog * full.scenario.replicas
    assert weights_bytes(fewer) < weights_bytes(full)

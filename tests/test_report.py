"""The self-contained HTML report: plotly.js inlined exactly once, every chart present, text escaped."""

from __future__ import annotations

import re

import plotly.offline

from sim.out.report import TOKEN_SHARE_LABEL, headline_metrics, html_report, write_html_report
from sim.out.snapshot import Snapshot
from tests.test_charts import make_result


def test_report_inlines_plotly_once_and_has_all_charts(tmp_path):
    result = make_result()
    text = html_report(result)
    js = plotly.offline.get_plotlyjs()
    assert text.count(js[:200]) == 1  # the library once, not once per chart
    assert "<script src=" not in text  # nothing fetched: opens offline
    assert len(re.findall(r'<div id="chart-\d" class="plotly-graph-div"', text)) == 5
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
    assert rows["peak KV usage"] == "40.0%"
    assert rows[TOKEN_SHARE_LABEL] == "20.0%" and "KV holding tokens (mean)" not in rows
    assert rows["prefix cache hits"] == "n/a"

"""Every supported format loads into the canonical Trace: bundled samples, shared public traces,
and the format-specific rules (timestamps, BurstGPT filters, Mooncake hash ids)."""

from __future__ import annotations

import csv
import json
import pickle
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from sim.trace import FORMATS, Trace, TraceError, load_trace, load_trace_bytes

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SHARED = ROOT.parent / "shared" / "traces"


def _data_rows(path: Path) -> int:
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    return len(lines) - (0 if path.suffix == ".jsonl" else 1)


def _assert_canonical(trace: Trace) -> None:
    df = trace.df
    assert list(df.columns[:3]) == ["arrival_s", "input_tokens", "output_tokens"]
    assert df["arrival_s"].dtype == np.float64
    assert df["input_tokens"].dtype == np.int64 and df["output_tokens"].dtype == np.int64
    assert df["arrival_s"].iat[0] == 0.0
    assert (np.diff(df["arrival_s"].to_numpy()) >= 0).all()
    assert (df["input_tokens"] > 0).all() and (df["output_tokens"] > 0).all()


SAMPLE_FORMATS = {
    "chat_small.csv": "generic",
    "generic_small.jsonl": "generic",
    "azure_code_small.csv": "azure",
    "azure2024_conv_small.csv": "azure",
    "azure_conv_slice.csv": "azure",
    "burstgpt_small.csv": "burstgpt",
    "burstgpt6_small.csv": "burstgpt",
    "mooncake_small.jsonl": "mooncake",
    "vidur_small.csv": "vidur",
    "splitwise_small.csv": "splitwise",
}


@pytest.mark.parametrize("name,fmt", sorted(SAMPLE_FORMATS.items()))
def test_every_sample_loads_detected_and_explicit(name: str, fmt: str) -> None:
    path = SAMPLES / name
    trace = load_trace(path)
    assert trace.format == fmt and trace.source == name
    _assert_canonical(trace)
    if fmt != "burstgpt":  # burstgpt drops failed rows; checked below
        assert trace.rows == _data_rows(path)
    assert load_trace(path, fmt).digest() == trace.digest()
    assert load_trace_bytes(path.read_bytes(), name).digest() == trace.digest()


def test_every_registered_format_has_a_sample() -> None:
    assert set(SAMPLE_FORMATS.values()) == set(FORMATS)


def test_dashboard_default_sample_shape() -> None:
    trace = load_trace(SAMPLES / "chat_small.csv")
    assert trace.rows == 300 and 50 <= trace.duration_s <= 70
    assert trace.has_sessions and trace.summary()["sessions"] > 10


def test_azure_timestamp_variants_all_parse() -> None:
    text = (
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
        b"2024-05-13 00:00:00+00:00,10,5\n"  # 2024, no fraction
        b"2024-05-13 00:00:00.5000000+00:00,12,7\n"  # 2024, 7 decimals
        b"2024-05-13 00:00:01.25+00:00,11,8\n"
        b"2024-05-13 00:00:03.0000001,9,9\n"  # 2023 style, naive (taken as UTC)
    )
    trace = load_trace_bytes(text, "mixed.csv")
    assert trace.format == "azure" and trace.warnings == ()
    np.testing.assert_allclose(trace.df["arrival_s"], [0.0, 0.5, 1.25, 3.0], atol=1e-6)
    assert trace.df["input_tokens"].tolist() == [10, 12, 11, 9]


def test_azure_2023_seven_decimals_differences() -> None:
    text = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n"
    trace = load_trace_bytes(text, "a.csv")
    assert trace.df["arrival_s"].tolist() == pytest.approx([0.0, 0.052], abs=1e-6)


def _burst_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("name", ["burstgpt_small.csv", "burstgpt6_small.csv"])
def test_burstgpt_drops_failed_rows_with_a_count(name: str) -> None:
    rows = _burst_rows(SAMPLES / name)
    failed = sum(r["Response tokens"] == "0" for r in rows)
    assert failed > 0
    trace = load_trace(SAMPLES / name)
    assert trace.rows == len(rows) - failed
    assert any(f"dropped {failed} failed" in w for w in trace.warnings)
    kept = load_trace(SAMPLES / name, keep_failed=True)
    assert kept.rows == len(rows) and (kept.df["output_tokens"] >= 1).all()
    assert int((kept.df["output_tokens"] == 1).sum()) >= failed


def test_burstgpt_filters_and_session_ids() -> None:
    rows = [r for r in _burst_rows(SAMPLES / "burstgpt_small.csv") if r["Response tokens"] != "0"]
    gpt4 = load_trace(SAMPLES / "burstgpt_small.csv", model="gpt-4")
    assert gpt4.rows == sum(r["Model"] == "GPT-4" for r in rows)
    api = load_trace(SAMPLES / "burstgpt_small.csv", log_type="api")
    assert api.rows == sum(r["Log Type"] == "API log" for r in rows)
    both = load_trace(SAMPLES / "burstgpt_small.csv", model="ChatGPT", log_type="Conversation log")
    assert both.rows == sum(r["Model"] == "ChatGPT" and r["Log Type"] == "Conversation log" for r in rows)
    assert gpt4.has_sessions and set(gpt4.df["session_id"]) <= {r["Session ID"] for r in rows}
    with pytest.raises(TraceError, match="no rows with Model matching 'llama'"):
        load_trace(SAMPLES / "burstgpt_small.csv", model="llama")


def test_burstgpt_columns_are_found_by_name_not_position() -> None:
    text = b"Log Type,Response tokens,Timestamp,Request tokens,Model,Total tokens\nAPI log,7,3,20,ChatGPT,27\nAPI log,9,1,30,ChatGPT,39\n"
    trace = load_trace_bytes(text, "shuffled.csv")
    assert trace.format == "burstgpt"
    assert trace.df["input_tokens"].tolist() == [30, 20] and trace.df["arrival_s"].tolist() == [0.0, 2.0]


def test_mooncake_keeps_hash_ids_and_block_size() -> None:
    path = SAMPLES / "mooncake_small.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    trace = load_trace(path)
    assert trace.prefix_block_size == 512 and trace.has_prefix_hashes
    assert trace.df["prefix_hashes"].tolist() == [r["hash_ids"] for r in records]  # already sorted by time
    np.testing.assert_allclose(trace.df["arrival_s"], [r["timestamp"] / 1000 for r in records])
    lengths = trace.df["prefix_hashes"].map(len).to_numpy()
    assert (lengths == -(-trace.df["input_tokens"].to_numpy() // 512)).all()
    assert trace.warnings == ()


def test_generic_json_array_and_case_insensitive_header() -> None:
    arr = json.dumps([{"arrival_s": 1.5, "input_tokens": 3, "output_tokens": 4}, {"arrival_s": 2, "input_tokens": 5, "output_tokens": 6}])
    trace = load_trace_bytes(arr.encode(), "a.json")
    assert trace.df["arrival_s"].tolist() == [0.0, 0.5]
    upper = load_trace_bytes(b"Arrival_S , INPUT_TOKENS,Output_Tokens\n0,1,2\n", "u.csv")
    assert upper.format == "generic" and upper.df["output_tokens"].tolist() == [2]


def test_session_ids_stay_text() -> None:
    trace = load_trace_bytes(b"arrival_s,input_tokens,output_tokens,session_id\n0,1,2,007\n1,3,4,12\n", "s.csv")
    assert trace.df["session_id"].tolist() == ["007", "12"]


def test_utf8_bom_is_accepted() -> None:
    trace = load_trace_bytes(b"\xef\xbb\xbfarrival_s,input_tokens,output_tokens\n0,1,2\n", "bom.csv")
    assert trace.rows == 1


def test_digest_is_stable_and_content_sensitive_and_trace_pickles() -> None:
    a = load_trace(SAMPLES / "chat_small.csv")
    b = load_trace(SAMPLES / "chat_small.csv")
    assert a.digest() == b.digest() and len(a.digest()) == 16
    df = a.df.copy()
    df.loc[5, "output_tokens"] += 1
    changed = Trace.build(df["arrival_s"], df["input_tokens"], df["output_tokens"], format="generic", source="x")
    assert changed.digest() != Trace.build(*a.arrays(), format="generic", source="x").digest()
    clone = pickle.loads(pickle.dumps(a))
    assert clone.digest() == a.digest() and clone.df.equals(a.df)


def test_summary_schema_and_values() -> None:
    trace = load_trace(SAMPLES / "vidur_small.csv")
    s = trace.summary()
    assert {"format", "rows", "duration_s", "rate_per_s", "input_tokens", "output_tokens"} <= set(s)
    _, inp, out = trace.arrays()
    assert s["rows"] == 200 and s["rate_per_s"] == pytest.approx(200 / s["duration_s"], rel=1e-5)
    assert s["input_tokens"]["mean"] == pytest.approx(inp.mean(), abs=1e-3)
    assert s["output_tokens"]["p50"] == float(np.median(out))
    assert s["input_tokens"]["p99"] == pytest.approx(np.percentile(inp, 99))
    json.dumps(s)  # JSON-serialisable as is


SHARED_COUNTS = {
    "AzureLLMInferenceTrace_code.csv": ("azure", 8819),
    "AzureLLMInferenceTrace_conv.csv": ("azure", 19366),
    "mooncake_conversation_trace.jsonl": ("mooncake", 12031),
}


@pytest.mark.parametrize("name", sorted(SHARED_COUNTS))
def test_shared_public_traces_load_with_exact_row_counts(name: str) -> None:
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    fmt, rows = SHARED_COUNTS[name]
    trace = load_trace(path)
    assert (trace.format, trace.rows) == (fmt, rows)
    _assert_canonical(trace)
    assert trace.warnings == ()
    if fmt == "mooncake":
        assert trace.prefix_block_size == 512
        assert trace.df["prefix_hashes"].map(len).sum() > trace.rows


@settings(max_examples=25, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=40),
    tokens=st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**6)), min_size=41, max_size=41),
)
def test_generic_csv_round_trip(gaps: list[float], tokens: list[tuple[int, int]]) -> None:
    arrival = np.concatenate([[0.0], np.cumsum(gaps)])
    inp, out = zip(*tokens[: len(arrival)], strict=True)
    trace = Trace.build(arrival, inp, out, format="generic", source="x.csv")
    back = load_trace_bytes(trace.to_csv().encode(), "x.csv")
    assert back.digest() == trace.digest()

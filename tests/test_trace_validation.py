"""Bad input: each case is a one-line TraceError naming the file, the row and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.trace import TraceError, load_trace, load_trace_bytes

DATA = Path(__file__).resolve().parent / "data" / "traces"
SAMPLES = Path(__file__).resolve().parent.parent / "samples"

# fixture -> the pieces the message must contain (file name is always checked)
CASES = {
    "missing_column.csv": ["header (line 1)", "missing column 'output_tokens'"],
    "non_numeric.csv": ["data row 3", "non-numeric", "'abc'", "input_tokens"],
    "non_positive.csv": ["data row 2", "non-positive", "output_tokens"],
    "empty_cell.csv": ["data row 4", "empty or missing value", "input_tokens"],
    "nan_value.csv": ["data row 2", "non-numeric", "'NaN'"],
    "fractional_tokens.csv": ["data row 2", "'12.5'", "not a whole number"],
    "empty.csv": ["empty file"],
    "header_only.csv": ["no data rows"],
    "latin1.csv": ["line 3", "not UTF-8", "0xe9"],
    "binary.csv": ["line 3", "binary data", "NUL"],
    "compressed.csv.gz": ["binary data", "gzip"],
    "malformed.jsonl": ["line 3", "malformed JSON"],
    "missing_key.jsonl": ["line 2", "empty or missing value", "output_length"],
    "bad_hash_ids.jsonl": ["line 2", "hash_ids", "list of integers"],
    "not_object.jsonl": ["line 2", "expected a JSON object"],
    "unknown_format.csv": ["unknown format", "time", "generic (arrival_s"],
    "bad_timestamp.csv": ["data row 2", "unparseable timestamp", "18:17:0x"],
    "ragged.csv": ["line 3", "malformed CSV", "4 fields"],
    # Issue 17: a text file that is no trace was reported as "line 3: malformed CSV (4 fields, the header has 2)"
    "random_text.txt": ["unknown format", "header ['Meeting notes'", "generic (arrival_s"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_file_gives_one_line_error_with_file_row_and_problem(name: str) -> None:
    with pytest.raises(TraceError) as info:
        load_trace(DATA / name)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{name}: ")
    for piece in CASES[name]:
        assert piece in message, (piece, message)


def test_a_text_file_that_is_no_trace_is_not_called_a_malformed_csv() -> None:
    """The header decides the format before any row is read, so the message names the formats."""
    for data in ((DATA / "random_text.txt").read_bytes(), b"just some words\nand, more, words\n"):
        with pytest.raises(TraceError) as info:
            load_trace_bytes(data, "notes.txt")
        assert "malformed" not in str(info.value) and "unknown format" in str(info.value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_uploads_give_the_same_errors(name: str) -> None:
    with pytest.raises(TraceError) as from_file:
        load_trace(DATA / name)
    with pytest.raises(TraceError) as from_bytes:
        load_trace_bytes((DATA / name).read_bytes(), name)
    assert str(from_bytes.value) == str(from_file.value)


def test_unsorted_timestamps_are_sorted_with_a_warning() -> None:
    trace = load_trace(DATA / "unsorted.csv")
    assert trace.df["arrival_s"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert trace.df["input_tokens"].tolist() == [10, 11, 12, 9]  # rows move with their timestamps
    assert len(trace.warnings) == 1 and "not sorted" in trace.warnings[0]


def test_file_over_the_size_limit_is_refused_before_parsing() -> None:
    path = SAMPLES / "chat_small.csv"
    size = path.stat().st_size
    with pytest.raises(TraceError, match=r"chat_small\.csv: file is .* MiB, over the .* MiB limit"):
        load_trace(path, max_bytes=size - 1)
    assert load_trace(path, max_bytes=size).rows == 300
    with pytest.raises(TraceError, match="over the"):
        load_trace_bytes(path.read_bytes(), "up.csv", max_bytes=1000)


def test_unknown_format_name_option_and_kind_mismatch() -> None:
    path = SAMPLES / "chat_small.csv"
    with pytest.raises(TraceError, match="unknown format 'parquet'; known formats: azure"):
        load_trace(path, "parquet")
    with pytest.raises(TraceError, match="option 'model' does not apply to format generic"):
        load_trace(path, model="gpt-4")
    assert load_trace(path, model=None, keep_failed=False).rows == 300  # options asking for nothing
    with pytest.raises(TraceError, match="format mooncake is jsonl, but the file looks like csv"):
        load_trace(path, "mooncake")
    with pytest.raises(TraceError, match="missing column 'TIMESTAMP' for format azure"):
        load_trace(path, "azure")


def test_missing_file_and_directory() -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_trace(DATA / "does_not_exist.csv")
    with pytest.raises(TraceError, match="not a file"):
        load_trace(DATA)


def test_empty_arrival_and_whitespace_only_file() -> None:
    with pytest.raises(TraceError, match=r"e\.csv: data row 2: empty or missing arrival time in 'arrival_s'"):
        load_trace_bytes(b"arrival_s,input_tokens,output_tokens\n0,1,2\n,3,4\n", "e.csv")
    with pytest.raises(TraceError, match="w.csv: empty file"):
        load_trace_bytes(b"  \n\n \n", "w.csv")


def test_short_row_is_a_missing_value() -> None:
    with pytest.raises(TraceError, match=r"s\.csv: data row 2: empty or missing value in 'output_tokens'"):
        load_trace_bytes(b"arrival_s,input_tokens,output_tokens\n0,1,2\n1,3\n", "s.csv")


def test_implausibly_large_token_count() -> None:
    with pytest.raises(TraceError, match=r"h\.csv: data row 2: token count .* in 'output_tokens' is implausibly large"):
        load_trace_bytes(b"arrival_s,input_tokens,output_tokens\n0,1,2\n1,3,1e30\n", "h.csv")


def test_never_a_silent_partial_load() -> None:
    # one bad row at the very end of an otherwise valid large file still fails the whole load
    good = "".join(f"{i * 0.1},{i + 1},{i + 2}\n" for i in range(5000))
    data = ("arrival_s,input_tokens,output_tokens\n" + good + "500.1,7,-3\n").encode()
    with pytest.raises(TraceError, match="data row 5001: non-positive token count -3"):
        load_trace_bytes(data, "big.csv")

"""Transforms return new, re-zeroed Traces, leave the input untouched and record what they did."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.trace import TraceError, clamp_context, load_trace, speedup, subsample, window

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(scope="module")
def chat():
    return load_trace(SAMPLES / "chat_small.csv")


@pytest.fixture(scope="module")
def mooncake():
    return load_trace(SAMPLES / "mooncake_small.jsonl")


def test_speedup_divides_arrivals(chat) -> None:
    before = chat.df.copy()
    fast = speedup(chat, 4)
    np.testing.assert_allclose(fast.df["arrival_s"], chat.df["arrival_s"] / 4)
    assert fast.df["input_tokens"].equals(chat.df["input_tokens"])
    assert fast.history == ("speedup x4",) and fast.digest() != chat.digest()
    assert chat.df.equals(before) and chat.history == ()
    with pytest.raises(TraceError, match="speedup factor must be > 0"):
        speedup(chat, 0)


def test_subsample_fraction_and_n_are_seeded_subsets(chat) -> None:
    rows = set(zip(chat.df["input_tokens"], chat.df["output_tokens"], chat.df["session_id"], strict=True))
    part = subsample(chat, 0.25, seed=1)
    assert part.rows == 75 and part.df["arrival_s"].iat[0] == 0.0
    assert set(zip(part.df["input_tokens"], part.df["output_tokens"], part.df["session_id"], strict=True)) <= rows
    assert (np.diff(part.df["arrival_s"]) >= 0).all()
    assert subsample(chat, 0.25, seed=1).digest() == part.digest()
    assert subsample(chat, 0.25, seed=2).digest() != part.digest()
    assert subsample(chat, n=10).rows == 10 and "subsample 10 of 300" in subsample(chat, n=10).history[0]
    with pytest.raises(TraceError, match="either a fraction or n"):
        subsample(chat)
    with pytest.raises(TraceError, match="between 1 and 300"):
        subsample(chat, n=301)


def test_subsample_keeps_relative_timing(chat) -> None:
    part = subsample(chat, n=50, seed=3)
    original = chat.df.set_index(["input_tokens", "output_tokens", "session_id"])["arrival_s"]
    key = list(zip(part.df["input_tokens"], part.df["output_tokens"], part.df["session_id"], strict=True))
    offsets = original.loc[key].to_numpy() - part.df["arrival_s"].to_numpy()
    np.testing.assert_allclose(offsets, offsets[0])  # one common shift: re-zeroed, not rescaled


def test_clamp_context_truncates_input_first(mooncake) -> None:
    limit = 4096
    clamped = clamp_context(mooncake, limit)
    inp, out = mooncake.df["input_tokens"].to_numpy(), mooncake.df["output_tokens"].to_numpy()
    new_in, new_out = clamped.df["input_tokens"].to_numpy(), clamped.df["output_tokens"].to_numpy()
    over = inp + out > limit
    assert over.any() and (new_in + new_out <= limit).all()
    assert (new_out == out).all()  # every output here is < limit, so only inputs are cut
    np.testing.assert_array_equal(new_in[over], limit - out[over])
    np.testing.assert_array_equal(new_in[~over], inp[~over])
    hashes = clamped.df["prefix_hashes"].tolist()
    assert [len(h) for h in hashes] == list(-(-new_in // 512))
    assert all(h == o[: len(h)] for h, o in zip(hashes, mooncake.df["prefix_hashes"], strict=True))
    assert f"truncated {int(over.sum())} requests" in clamped.history[0]


def test_clamp_context_cuts_output_only_when_it_alone_is_too_long(chat) -> None:
    clamped = clamp_context(chat, 200)
    out = chat.df["output_tokens"].to_numpy()
    assert (clamped.df["output_tokens"].to_numpy() == np.minimum(out, 199)).all()
    assert (clamped.df["input_tokens"] >= 1).all()
    assert (clamped.df["input_tokens"] + clamped.df["output_tokens"] <= 200).all()


def test_clamp_context_drop_mode(chat) -> None:
    total = chat.df["input_tokens"] + chat.df["output_tokens"]
    kept = clamp_context(chat, 1000, mode="drop")
    assert kept.rows == int((total <= 1000).sum())
    assert f"dropped {int((total > 1000).sum())} requests" in kept.history[0]
    with pytest.raises(TraceError, match="max_tokens >= 2"):
        clamp_context(chat, 1)


def test_window_cuts_and_rezeroes(chat) -> None:
    arrival = chat.df["arrival_s"].to_numpy()
    cut = window(chat, 10, 30)
    inside = arrival[(arrival >= 10) & (arrival < 30)]
    assert cut.rows == len(inside)
    np.testing.assert_allclose(cut.df["arrival_s"], inside - inside[0])
    assert window(chat, 30).rows == int((arrival >= 30).sum())
    with pytest.raises(TraceError, match="holds no requests"):
        window(chat, 1000, 2000)
    with pytest.raises(TraceError, match="0 <= start < end"):
        window(chat, 5, 5)


def test_history_accumulates_across_transforms(mooncake) -> None:
    result = clamp_context(speedup(window(mooncake, 0, 20), 2), 8192)
    assert [h.split()[0] for h in result.history] == ["window", "speedup", "clamp_context"]
    assert result.summary()["history"] == list(result.history)


def test_all_at_once_zeroes_arrivals_and_keeps_lengths():
    from sim.trace import all_at_once, synthetic

    t = synthetic(50, 2.0, seed=3)
    off = all_at_once(t)
    assert (off.df["arrival_s"] == 0.0).all()
    assert (off.df["input_tokens"].to_numpy() == t.df["input_tokens"].to_numpy()).all()
    assert off.history[-1] == "all at once (offline)"

"""Synthetic traces: arrival statistics, length distributions, presets, seeding and the text spec."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.trace import PRESET_TARGETS, TraceError, load_trace, parse_synthetic_spec, synthetic

N = 200_000


def _gaps(trace):
    return np.diff(trace.arrays()[0])


@pytest.mark.parametrize("arrival,cv", [("poisson", 1.0), ("gamma", 2.0), ("gamma", 0.5), ("gamma", 4.0)])
def test_rate_and_burstiness_within_tolerance(arrival: str, cv: float) -> None:
    trace = synthetic(N, rate=5.0, arrival=arrival, cv=cv, seed=7)
    gaps = _gaps(trace)
    assert (N - 1) / trace.duration_s == pytest.approx(5.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)
    assert trace.df["arrival_s"].iat[0] == 0.0


def test_constant_arrivals_are_evenly_spaced() -> None:
    gaps = _gaps(synthetic(1000, rate=4.0, arrival="constant"))
    np.testing.assert_allclose(gaps, 0.25)


def test_same_seed_same_trace_other_seed_differs() -> None:
    spec = "n=5000,rate=3,arrival=gamma,cv=2,input=lognormal:mean=512:sigma=0.8,output=zipf:a=1.1:hi=900,seed=11"
    a, b = parse_synthetic_spec(spec).generate(), parse_synthetic_spec(spec).generate()
    assert a.digest() == b.digest() and a.df.equals(b.df)
    c = parse_synthetic_spec(spec.replace("seed=11", "seed=12")).generate()
    assert c.digest() != a.digest()


def test_length_distributions() -> None:
    fixed = synthetic(100, input="fixed:value=333", output="77")
    assert set(fixed.df["input_tokens"]) == {333} and set(fixed.df["output_tokens"]) == {77}

    uni = synthetic(N, input="uniform:lo=16:hi=48", seed=1).df["input_tokens"]
    assert uni.min() == 16 and uni.max() == 48 and uni.mean() == pytest.approx(32, rel=0.01)

    logn = synthetic(N, input="lognormal:mean=512:sigma=0.8", seed=2).df["input_tokens"].to_numpy()
    assert logn.mean() == pytest.approx(512, rel=0.01)
    assert np.log(logn).std() == pytest.approx(0.8, rel=0.02)

    z = synthetic(N, output="zipf:a=1.5:lo=1:hi=1000", seed=3).df["output_tokens"].to_numpy()
    assert z.min() >= 1 and z.max() <= 1000
    assert (z == 1).sum() / (z == 2).sum() == pytest.approx(2**1.5, rel=0.05)


def test_max_len_clips_every_length() -> None:
    trace = synthetic(10_000, input="lognormal:mean=3000:sigma=1.5", output="uniform:lo=1:hi=5000", max_len=2048)
    assert trace.df["input_tokens"].max() == 2048 and trace.df["output_tokens"].max() == 2048


@pytest.mark.parametrize("name", sorted(PRESET_TARGETS))
def test_presets_match_the_vllm_paper_means(name: str) -> None:
    trace = parse_synthetic_spec(f"preset={name},n=400000,rate=2,seed=5").generate()
    (in_mean, _), (out_mean, _) = PRESET_TARGETS[name]
    _, inp, out = trace.arrays()
    assert inp.mean() == pytest.approx(in_mean, rel=0.015)
    assert out.mean() == pytest.approx(out_mean, rel=0.015)
    assert inp.max() <= 2048 and out.max() <= 2048 and inp.min() >= 1


def test_preset_targets_are_the_paper_figures() -> None:
    assert PRESET_TARGETS["sharegpt-like"][0][0] == 161.31 and PRESET_TARGETS["sharegpt-like"][1][0] == 337.99
    assert PRESET_TARGETS["alpaca-like"][0][0] == 19.31 and PRESET_TARGETS["alpaca-like"][1][0] == 58.45


def test_resample_from_a_trace_keeps_pairs() -> None:
    source = load_trace(Path(__file__).resolve().parent.parent / "samples" / "vidur_small.csv")
    pairs = set(zip(*source.arrays()[1:], strict=True))
    trace = synthetic(5000, rate=10, input="resample", output="resample", seed=4, source=source)
    assert set(zip(*trace.arrays()[1:], strict=True)) <= pairs
    half = synthetic(5000, input="resample", output="fixed:value=9", source=source)
    assert set(half.df["input_tokens"]) <= set(source.df["input_tokens"])
    with pytest.raises(TraceError, match="needs a source trace"):
        synthetic(10, input="resample")


def test_a_million_requests_generate() -> None:
    trace = parse_synthetic_spec("n=1000000,rate=50,arrival=gamma,cv=2,input=lognormal:mean=512:sigma=0.8").generate()
    assert trace.rows == 1_000_000


def test_spec_text_round_trips() -> None:
    for text in [
        "n=1000,rate=5,arrival=gamma,cv=2,input=lognormal:mean=512:sigma=0.8,output=uniform:lo=16:hi=512,seed=1",
        "preset=sharegpt-like,n=300,rate=2,arrival=gamma,cv=3",
        "preset=alpaca-like,output=zipf:a=1.2:hi=500,max_len=1024",
        "synthetic:n=10,input=64,output=8",
    ]:
        spec = parse_synthetic_spec(text)
        assert parse_synthetic_spec(spec.text()) == spec
        assert spec.generate().source == f"synthetic:{spec.text()}"


@pytest.mark.parametrize(
    "text,message",
    [
        ("n=abc", "n='abc' is not a number"),
        ("n=1.5", "must be a whole number"),
        ("n=0", "n=0 must be between 1"),
        ("rate=-1", "rate=-1.0 must be between 1e-06 and 1e+09"),
        ("cv=0,arrival=gamma", "cv=0.0 must be between 0.001 and 1000"),
        ("arrival=weibull", "arrival='weibull'"),
        ("foo=1", "unknown key 'foo'"),
        ("rate", "'rate' is not key=value"),
        ("n=5,n=6", "'n' given twice"),
        ("input=gauss:mean=3", "unknown length distribution 'gauss'"),
        ("input=lognormal:mean=3:k=2", "lognormal takes mean=, sigma=, mu=; got 'k=2'"),
        ("output=uniform:lo=9:hi=2", "output=uniform:lo=9:hi=2 has out-of-range parameters"),
        ("preset=shakespeare", "unknown preset 'shakespeare'"),
    ],
)
def test_spec_errors_are_one_line(text: str, message: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_synthetic_spec(text)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("synthetic spec: ")

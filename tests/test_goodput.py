"""Goodput (sim/plan/goodput.py, `sim run --slo`): a five-request frame computed by hand, and the CLI."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from sim.plan.goodput import goodput_summary
from sim.plan.slo import parse_slo

NAN = math.nan
# r0 meets both limits; r1 misses TTFT; r2 has one output token (no TPOT to miss); r3 was rejected;
# r4 misses TPOT. The SLO below: TTFT <= 1 s and TPOT <= 50 ms per request.
FRAME = pd.DataFrame({
    "ttft_s": [0.5, 1.5, 0.2, NAN, 0.8],
    "tpot_s": [0.04, 0.03, NAN, NAN, 0.06],
    "finish_s": [10.0, 12.0, 3.0, NAN, 15.0],
    "output_tokens": [100, 50, 1, 80, 40],
})
FRAME["e2e_s"] = FRAME["finish_s"]  # all arrived at 0
SLO = parse_slo("ttft_p99=1.0,tpot_p99=0.05")


def test_fleet_goodput_by_hand():
    g = goodput_summary(SLO, FRAME, {"duration_s": 20.0})
    # met: r0 and r2 -> 2 of 5 requests; 100 + 1 output tokens over the 20 s run
    assert (g["met"], g["share"], g["tokens_per_s"], g["req_per_s"]) == (2, 0.4, 101 / 20, 2 / 20)
    assert g["slo"] == "ttft_p99=1,tpot_p99=0.05" and "pools" not in g


def test_pd_pools_are_held_to_their_own_objectives():
    summary = {"duration_s": 20.0, "fleet": {"pools": [{"role": "prefill"}, {"role": "decode"}]}}
    g = goodput_summary(SLO, FRAME, summary)
    prefill, decode = g["pools"]
    assert prefill["role"] == "prefill" and prefill["slo"] == "ttft_p99=1"
    assert (prefill["met"], prefill["share"], prefill["tokens_per_s"]) == (3, 0.6, 141 / 20)  # r0, r2, r4
    assert decode["role"] == "decode" and decode["slo"] == "tpot_p99=0.05"
    assert (decode["met"], decode["share"], decode["tokens_per_s"]) == (3, 0.6, 151 / 20)  # r0, r1, r2
    only_e2e = goodput_summary(parse_slo("e2e_p99=11"), FRAME, summary)
    assert only_e2e["met"] == 2 and [p["share"] for p in only_e2e["pools"]] == [None, None]  # r0, r2


def test_unfinished_requests_miss():
    frame = FRAME.assign(finish_s=[NAN, 12.0, 3.0, NAN, 15.0])  # r0 never finished
    assert goodput_summary(SLO, frame, {"duration_s": 20.0})["met"] == 1


def _run(capsys, *extra):
    from sim.__main__ import main

    rc = main(["run", "--synthetic", "n=20,rate=4", "--model", "llama-3.1-8b", "--no-progress", *extra])
    return rc, capsys.readouterr()


def test_cli_run_slo_adds_goodput_and_pools(capsys):
    rc, cap = _run(capsys, "--pd", "1:1", "--slo", "ttft_p99=1000,tpot_p99=1000", "--json")
    g = json.loads(cap.out)["goodput"]
    assert rc == 0 and (g["met"], g["share"]) == (20, 1.0) and [p["share"] for p in g["pools"]] == [1.0, 1.0]
    rc, cap = _run(capsys, "--slo", "ttft_p99=0.000001", "--json")
    g = json.loads(cap.out)["goodput"]
    assert rc == 0 and (g["met"], g["tokens_per_s"]) == (0, 0.0)
    rc, cap = _run(capsys, "--slo", "ttft_p99=1")
    assert rc == 0 and "goodput (ttft_p99=1):" in cap.out


@pytest.mark.parametrize("spec, why", [("ttft_p99=x", "not KEY=NUMBER"), ("ttft_p99=1,goodput=0.9", "goodput=F")])
def test_cli_bad_slo_is_one_line(capsys, spec, why):
    rc, cap = _run(capsys, "--slo", spec)
    assert rc != 0 and why in cap.err and "Traceback" not in cap.err and cap.err.count("\n") <= 1

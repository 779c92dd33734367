"""One step-time source per comparison (issue 24): int8/int4 KV are timed from the fp8 tables with
decode attention scaled by the bytes read ("derived"), never silently by the roofline next to
measured rows; a comparison the tables cannot cover whole falls back to the roofline together."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.spec import load_spec
from sim.__main__ import main
from sim.plan.config_search import SearchOptions
from sim.plan.grid import expand
from sim.plan.one_source import one_source, source_of
from sim.plan.search import search
from sim.plan.slo import parse_slo
from sim.plan.workload import Workload
from sim.scenario import Scenario
from sim.timing import measured_db
from tests.resolved import cost_of

SYN = "preset=sharegpt-like,n=150,rate=10,seed=3"


def test_int8_and_int4_kv_are_derived_from_the_fp8_tables():
    spec = load_spec("llama-3-8b")
    fp8 = cost_of(Scenario(kv_dtype="fp8"))
    for kv, bits in (("int8", 8), ("int4", 4)):
        cm = cost_of(Scenario(kv_dtype=kv))
        assert cm.source == "derived" and "derived" in cm.warnings[-1]
        scale = spec.kv_bytes_per_token(kv) / spec.kv_bytes_per_token("fp8")
        # bytes per token: int8 2x32x8x(128+4), int4 2x32x8x(64+4), fp8 2x32x8x128
        assert scale == pytest.approx((128 + 4) / 128 if bits == 8 else (64 + 4) / 128)
        np.testing.assert_allclose(cm.table.gen_attn, fp8.table.gen_attn * scale)
        np.testing.assert_array_equal(cm.table.ctx_attn, fp8.table.ctx_attn)  # prefill attention as fp8's
    assert measured_db.nearest_measured_kv("fp32") is None  # no measured kernel reads 4-byte K/V
    assert cost_of(Scenario(kv_dtype="fp32")).source == "roofline"


def test_one_source_keeps_measured_and_derived_together():
    chosen = one_source([Scenario(kv_dtype=k) for k in ("bf16", "fp8", "int8")])
    assert [source_of(s) for s in chosen.scenarios] == ["measured-db", "measured-db", "derived"]
    assert chosen.source == "measured kernels" and "1 row(s) derived" in chosen.note


def test_a_mix_the_tables_cannot_cover_falls_back_together():
    chosen = one_source([Scenario(kv_dtype="bf16"), Scenario(kv_dtype="fp32")])
    assert {s.cost_source for s in chosen.scenarios} == {"roofline"}
    assert chosen.source == "roofline" and "fp32" in chosen.note
    asked = one_source([Scenario(kv_dtype="bf16"), Scenario(kv_dtype="fp32", cost_source="roofline")])
    assert asked.source == "mixed (as asked)"  # the scenarios asked for it: kept, and said


def test_plan_over_bf16_fp8_int8_kv_reports_one_source():
    configs = expand(Scenario(), {"kv_dtype": ["bf16", "fp8", "int8"]})
    result = search(Workload.from_ref(f"synthetic:{SYN}"), configs, SearchOptions(parse_slo("ttft_p99=2"), 0.1))
    sources = [r["step_time_source"] for r in result.rows]
    assert sources == ["measured-db", "measured-db", "derived"]
    assert result.to_dict()["step_times"].startswith("Step times: measured kernels for every row")


def test_sim_compare_of_bf16_fp8_int8_reports_one_source(capsys):
    assert main(["compare", "--synthetic", SYN, "--model", "llama-3-8b", "--variants",
                 "kv_dtype=bf16;kv_dtype=fp8;kv_dtype=int8", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["step_time_source"] for r in rows] == ["measured-db", "measured-db", "derived"]
    assert {r["step_times"] for r in rows} == {rows[0]["step_times"]}
    assert rows[0]["step_times"].startswith("Step times: measured kernels for every row")

"""The Plan page's answer and table read for people: the SLO as limits, the binding resource in words,
no column of "None", the KV peak in percent (issue 17, seen on the loaded screenshots)."""

from __future__ import annotations

from sim.plan.slo import parse_slo
from ui.plan_view import best_line, plan_table

ROW = {"config": "c", "gpu": "rtx-4090", "kv_dtype": "fp8", "max_rate_per_s": 2.92, "tok_s_per_gpu": 616.0,
       "tok_s_per_user": 33.5, "gpus_for_target": None, "cost_per_mtok": 0.153, "binding": "kv",
       "slo_met_at_max": True, "num_preemptions": 29, "kv_usage_peak": 1.0}


def test_slo_in_words():
    assert parse_slo("ttft_p99=2,tpot_p99=0.1").words() == "TTFT p99 <= 2 s, TPOT p99 <= 100 ms"
    assert parse_slo("e2e_p50=20,goodput=0.9").words() == "E2E p50 <= 20 s, goodput >= 90%"


def test_best_line_says_the_slo_and_the_binding_in_words():
    plan = {"slo": "ttft_p99=2,tpot_p99=0.1", "rows": [ROW], "best": {"row": 0}, "target_rate": 0.0}
    line = best_line(plan)
    assert "under TTFT p99 <= 2 s, TPOT p99 <= 100 ms (616 output tok/s per GPU, $0.153" in line
    assert line.endswith("What binds: KV cache memory.") and "ttft_p99=2" not in line


def test_table_leaves_out_empty_columns_and_gives_the_kv_peak_in_percent():
    plan = {"slo": "ttft_p99=2", "rows": [ROW, dict(ROW, kv_dtype="bf16", kv_usage_peak=0.83)], "target_rate": 0.0}
    table = plan_table(plan)
    assert "GPUs for target" not in table and "KV peak" not in table
    assert list(table["peak KV usage %"]) == [100.0, 83.0] and list(table["$ per M tokens"]) == [0.153, 0.153]
    targeted = plan_table({**plan, "rows": [dict(r, gpus_for_target=3) for r in plan["rows"]], "target_rate": 10.0})
    assert list(targeted["GPUs for target"]) == [3, 3]

"""Search under an SLO (sim/plan): the done-when checks (a `sim run` at the reported rate meets
the SLO, 1.15x misses it; the binding constraint on constructed cases) and the pieces."""

from __future__ import annotations

import json

import pytest

from models.gpus import GPUS
from sim.__main__ import main
from sim.plan.bracket import largest_passing
from sim.plan.config_search import SearchOptions, gpus_for_target
from sim.plan.executors import groups
from sim.plan.grid import expand, parse_grid
from sim.plan.prices import cost_per_mtok, default_price, parse_prices
from sim.plan.rank import best_row, pareto_rows
from sim.plan.search import search
from sim.plan.slo import SloError, parse_slo
from sim.plan.workload import Workload
from sim.run.verdict import BINDINGS
from sim.scenario import Scenario, ScenarioError
from sim.trace import load_trace, resolve_trace, speedup

SHAREGPT = "preset=sharegpt-like,n=600,rate=10,seed=1"


def run_summary(capsys, workload: str, *flags: str) -> dict:
    assert main(["run", "--synthetic", workload, "--model", "llama-3-8b", "--gpu", "h100-sxm", *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_reported_rate_meets_slo_and_115_percent_misses(capsys):
    """Done-when: ShareGPT-like on llama-3-8b / h100-sxm, ttft_p99=1.0."""
    code = main(["search", "--synthetic", SHAREGPT, "--model", "llama-3-8b", "--gpu", "h100-sxm",
                 "--slo", "ttft_p99=1.0", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    row = out["rows"][0]
    rate = row["max_rate_per_s"]
    assert row["slo_met_at_max"] and rate > 1
    assert row["workload"].startswith("synthetic:") and f"rate={rate:g}" in row["workload"]
    assert row["rate_interval_source"] == "re-simulated" and row["rate_interval_probes"] > 0  # --json says how
    assert row["max_rate_interval"][0] < rate < row["max_rate_interval"][1]
    at_max = run_summary(capsys, row["workload"].removeprefix("synthetic:"))
    assert at_max["ttft_s"]["p99"] <= 1.0
    assert at_max["ttft_s"]["p99"] == pytest.approx(row["ttft_p99_s"])
    above = run_summary(capsys, f"{SHAREGPT},rate={rate * 1.15:.6g}".replace("rate=10,", ""))
    assert above["ttft_s"]["p99"] > 1.0
    # the row's figures follow from the run at the max rate
    per_request = at_max["output_tokens"] / at_max["completed"]
    assert row["tok_s_per_gpu"] == pytest.approx(rate * per_request)
    assert row["tok_s_per_user"] == pytest.approx(1 / at_max["tpot_s"]["mean"])
    assert row["cost_per_mtok"] == pytest.approx(GPUS["h100-sxm"].usd_per_gpu_hour
                                                 / (row["tok_s_per_gpu"] * 3600) * 1e6)
    assert out["best"]["row"] == 0 and out["pareto"][0]["row"] == 0


@pytest.mark.parametrize(("flags", "slo", "expected"), [
    ({"kv_budget_gib": [1.0]}, "ttft_p99=1", "kv"),  # 8k tokens of KV: the pool fills, preemptions
    ({"max_num_seqs": [8]}, "ttft_p99=1", "max_num_seqs"),  # 8 seats, a pool 5% used
    ({}, "tpot_p99=0.012", "compute"),  # step time passes 12 ms before anything else is full
    pytest.param({"max_batched_tokens": [256]}, "ttft_p99=1", "token_budget",  # prompts wait for 256-token chunks
                 marks=pytest.mark.slow),
])
def test_binding_on_constructed_cases(flags, slo, expected):
    workload = Workload.from_ref(f"synthetic:{SHAREGPT}")
    result = search(workload, expand(Scenario(), flags), SearchOptions(parse_slo(slo)))
    row = result.rows[0]
    assert row["slo_met_at_max"] and row["binding"] == expected, row
    if expected == "kv":
        assert row["num_preemptions"] > 0 and row["kv_usage_peak"] == pytest.approx(1.0)
    if expected != "compute":
        assert row["binding_shares"][expected] >= 0.5
    else:
        assert row["kv_usage_peak"] < 0.5


def test_deployment_that_does_not_fit_is_a_row_not_an_error():
    workload = Workload.from_ref("synthetic:n=50,rate=5")
    configs = expand(Scenario(model="llama-3-70b"), parse_grid({"tp": "1,4"}))
    rows = search(workload, configs, SearchOptions(parse_slo("e2e_p99=60"))).rows
    assert rows[0]["binding"] == "does_not_fit" and "no room for KV" in rows[0]["missed_above"][0]
    assert rows[1]["max_rate_per_s"] > 0 and rows[1]["gpus"] == 4
    # every request rejected (a pool smaller than one reservation): no rate meets the SLO, a row says so
    tiny = search(workload, [Scenario(allocator="contiguous", kv_budget_gib=0.01)], SearchOptions(parse_slo("e2e_p99=60")))
    row = tiny.rows[0]
    assert row["max_rate_per_s"] == 0 and not row["slo_met_at_max"] and row["missed_above"] == ["no request completed"]
    assert tiny.to_dict()["best"] is None


def test_a_deployment_vllm_would_not_start_is_no_answer(capsys):
    """llama-3.1-8b at max_model_len 131,072: one request needs 16 GiB of KV per GPU. On an RTX 4090
    vLLM refuses to start it (kvsim's pool still runs the short requests), on an H100 it starts. The
    4090 is cheaper per hour, so without the check it would be the answer."""
    workload = Workload.from_ref("synthetic:n=40,rate=2")
    configs = expand(Scenario(model="llama-3.1-8b", max_model_len=131072), parse_grid({"gpu": "rtx-4090,h100-sxm"}))
    out = search(workload, configs, SearchOptions(parse_slo("e2e_p99=120"))).to_dict()
    refused, ok = out["rows"]
    assert refused["max_rate_per_s"] > 0 and "vLLM would not start" in refused["vllm_would_not_start"]
    assert ok["vllm_would_not_start"] is None and out["best"]["row"] == 1
    assert best_row([refused]) is None
    from sim.cli.search import format_table

    assert "rtx-4090: not a candidate: vLLM would not start" in format_table(out)
    # vLLM's pool (kv_pool='vllm'): the refused deployment is a does_not_fit row, and the search goes on
    pooled = search(workload, [configs[0].replace(kv_pool="vllm")], SearchOptions(parse_slo("e2e_p99=120"))).rows
    assert pooled[0]["binding"] == "does_not_fit" and "vLLM would not start" in pooled[0]["missed_above"][0]


def test_each_pd_pool_is_checked_at_its_own_tp():
    """llama-3.1-8b at max_model_len 131,072 on RTX 4090s: a TP2 replica holds one request's 8 GiB per
    GPU, a TP1 replica not its 16 GiB. The check follows each pool's TP, not the scenario's `tp`."""
    from sim.plan.config_search import vllm_refusal
    from sim.run.deployment import Deployment

    base = Scenario(model="llama-3.1-8b", gpu="rtx-4090", tp=2, max_model_len=131072, pd="1:1")
    assert vllm_refusal(Deployment.resolve(base)) is None
    refusal = vllm_refusal(Deployment.resolve(base.replace(prefill_tp=1)))
    assert refusal.startswith("the prefill pool: vLLM would not start")
    assert vllm_refusal(Deployment.resolve(base.replace(decode_tp=1))).startswith("the decode pool:")


def test_pd_pools_with_their_own_tp_ignore_the_base_tp():
    """llama-3-70b does not fit one H100, but a P/D fleet of TP4 pools never runs a TP1 replica."""
    workload = Workload.from_ref("synthetic:n=30,rate=1")
    sc = Scenario(model="llama-3-70b", pd="1:1", prefill_tp=4, decode_tp=4)
    row = search(workload, [sc], SearchOptions(parse_slo("e2e_p99=60"))).rows[0]
    assert row["binding"] != "does_not_fit" and row["max_rate_per_s"] > 0 and row["gpus"] == 8
    assert row["tp"] == 1  # the row shows the scenario as given


@pytest.mark.slow
def test_pool_gives_the_inline_rows():
    workload = Workload.from_ref("synthetic:preset=sharegpt-like,n=200,rate=10")
    configs = expand(Scenario(), parse_grid({"kv_dtype": "bf16,fp8", "kv_budget_gib": "0.5,1"}))
    options = SearchOptions(parse_slo("ttft_p99=1,tpot_p99=0.05"), target_rate=40)
    inline = search(workload, configs, options).to_dict()
    pooled = search(workload, configs, options, workers=2).to_dict()
    for out in (inline, pooled):  # CPU seconds of the best row's interval runs: a measurement, not a result
        for row in out["rows"]:
            row.pop("rate_interval_cpu_s", None)
        (out["best"] or {}).pop("rate_interval_cpu_s", None)
    assert pooled == inline and len(inline["rows"]) == 4


# ----- pieces ------------------------------------------------------------------------------------
def test_bracket_finds_threshold_within_tolerance_and_rounds():
    calls = []

    def probe(level: float) -> float:
        calls.append(level)
        return level

    found = largest_passing(probe, lambda x: x <= 7.3, start=1.0, tol=0.02)
    assert found.lo <= 7.3 < found.hi and found.hi / found.lo <= 1.02
    assert all(float(f"{c:.4g}") == c for c in calls)
    down = largest_passing(lambda x: x, lambda x: x <= 0.013, start=10.0)
    assert down.lo <= 0.013 < down.hi and down.hi / down.lo <= 1.02
    never = largest_passing(lambda x: x, lambda x: False, start=1.0)
    assert never.lo is None and never.hi is not None
    floored: list[float] = []
    never_above = largest_passing(lambda x: floored.append(x) or x, lambda x: False, start=1.0, floor=0.01)
    assert never_above.lo is None and min(floored) >= 0.01 and len(floored) == 7  # 1, 0.5, ... 0.01563
    always = largest_passing(lambda x: x, lambda x: True, start=1.0)
    assert always.capped and always.lo == 16380.0  # 2**14 to 4 significant digits


def test_slo_parse_check_and_goodput():
    slo = parse_slo("ttft_p99=1,tpot_p99=0.05,goodput=0.9")
    assert slo.text() == "ttft_p99=1,tpot_p99=0.05,goodput=0.9"
    for bad, words in [("ttft=1", "unknown objective"), ("ttft_p99=-1", "positive"), ("goodput=2", "fraction"),
                       ("goodput=0.9", "at least one"), ("ttft_p99=1,ttft_p99=2", "twice"), ("x", "KEY=NUMBER")]:
        with pytest.raises(SloError, match=words):
            parse_slo(bad)
    from sim.run.engine import simulate

    result = simulate(resolve_trace("synthetic:n=200,rate=50,input=2000,output=50"), Scenario(kv_budget_gib=0.5))
    s, req = result.summary, result.requests
    share = parse_slo(f"ttft_p99={s['ttft_s']['p50']}").goodput_share(req)
    assert share == pytest.approx((req["ttft_s"] <= s["ttft_s"]["p50"]).mean())
    assert 0.4 <= share <= 0.6
    assert parse_slo(f"ttft_p99={s['ttft_s']['p99'] * 1.001},goodput=0.95").violations(s, req) == []
    missed = parse_slo(f"ttft_p99={s['ttft_s']['p50']},goodput=0.95").violations(s, req)
    assert any(m.startswith("ttft_p99") for m in missed) and any(m.startswith("goodput") for m in missed)


def test_grid_types_and_errors():
    grid = parse_grid({"tp": "1,2,2", "kv_heads": "none,8", "prefix_caching": "on,off", "kv_budget_gib": "1.5"})
    assert grid == {"tp": [1, 2], "kv_heads": [None, 8], "prefix_caching": [True, False], "kv_budget_gib": [1.5]}
    configs = expand(Scenario(), grid)
    assert len(configs) == 8 and configs[-1].tp == 2 and configs[-1].kv_heads == 8
    with pytest.raises(ScenarioError, match="--tp: 'x' is not a valid int"):
        parse_grid({"tp": "1,x"})
    with pytest.raises(ScenarioError, match="kv_dtype"):
        expand(Scenario(), parse_grid({"kv_dtype": "bf16,fp9"}))


def test_prices_cost_and_target():
    assert parse_prices("h100=2.5, l4=0.8") == {"h100-sxm": 2.5, "l4": 0.8}
    with pytest.raises(ValueError, match="GPU=USD_PER_HOUR"):
        parse_prices("h100-sxm=cheap")
    priced = [p for p in map(default_price, GPUS) if p is not None]
    assert len(priced) >= 5 and all(p.source and p.usd_per_gpu_hour > 0 for p in priced)
    assert cost_per_mtok(3.6, 1000.0) == pytest.approx(1.0)  # 3.6 $/h over 3.6M tokens/h
    assert cost_per_mtok(None, 1000.0) is None and cost_per_mtok(3.0, 0.0) is None
    assert gpus_for_target(100, 30, 2) == 8 and gpus_for_target(90, 30, 2) == 6 and gpus_for_target(None, 30, 2) is None


def test_rank_best_and_pareto():
    def row(g, u, cost, target_gpus, price=1.0):
        return {"max_rate_per_s": 1.0, "tok_s_per_gpu": g, "tok_s_per_user": u, "cost_per_mtok": cost,
                "gpus_for_target": target_gpus, "usd_per_gpu_hour": price}

    rows = [row(100, 50, 3.0, 4), row(200, 20, 1.5, 2, price=3.0), row(90, 40, 4.0, 5), row(50, 80, 6.0, 8)]
    assert [p["row"] for p in pareto_rows(rows)] == [1, 0, 3]  # row 2 is beaten by row 0 on both axes
    assert best_row(rows)["row"] == 1  # cheapest per token
    assert best_row(rows, target_rate=10)["row"] == 0  # 4 x $1 beats 2 x $3 per hour
    assert best_row([{**rows[0], "max_rate_per_s": 0.0}]) is None


def test_workload_levels_reproduce_sim_run_and_speedup(samples_dir):
    syn = Workload.from_ref(f"synthetic:{SHAREGPT}")
    assert syn.start_level == 10 and syn.rate(12.5) == 12.5
    again = resolve_trace(syn.describe(12.5))
    assert again.digest() == syn.at(12.5).digest()
    trace = load_trace(samples_dir / "chat_small.csv")
    tw = Workload(trace=trace)
    assert tw.at(2.0).digest() == speedup(trace, 2.0).digest()
    assert tw.rate(2.0) == pytest.approx(2 * len(trace) / trace.duration_s)
    assert tw.describe(2.0).endswith("x2")


def test_cli_errors_are_one_line(capsys):
    base = ["search", "--synthetic", "n=20", "--model", "llama-3-8b"]
    for extra, words in [(["--slo", "ttft=1"], "unknown objective"), (["--slo", "ttft_p99=1", "--gpu", "h900"], "h900"),
                         (["--slo", "ttft_p99=1", "--price", "h100=x"], "USD_PER_HOUR"),
                         (["--slo", "ttft_p99=1", "--workers", "0"], "--workers")]:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and words in err and err.count("\n") == 1


def test_cli_text_table(capsys):
    code = main(["search", "--synthetic", "preset=sharegpt-like,n=400,rate=5", "--model", "llama-3-8b",
                 "--kv-dtype", "bf16,fp8", "--slo", "ttft_p99=1", "--target-rate", "20", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[2].startswith("h100-sxm kv_dtype=bf16") and lines[3].startswith("h100-sxm kv_dtype=fp8")
    assert float(lines[3].split()[2]) > 0 and lines[3].split()[-1] in BINDINGS
    assert lines[-1].startswith("best (lowest $ per hour for 20 requests/s): h100-sxm kv_dtype=")
    assert lines[-3].startswith("Step times: measured kernels for every row")
    assert lines[-2].startswith("90% interval of the best: ") and "re-simulated (step times x" in lines[-2]


@pytest.mark.parametrize("workers", [1, 2])
def test_cancel_keeps_finished_rows(workers):
    """Ctrl-C mid-sweep (KeyboardInterrupt, here raised from the progress callback after two rows).
    Six configurations in three chains of two (kv_dtype neighbours, sim.plan.executors.chains): the
    pool runs two chains at once and the interrupt comes with the first chain's two rows; the other
    chain (in flight) and the third (not started) are dropped."""
    workload = Workload.from_ref("synthetic:preset=sharegpt-like,n=150,rate=10")
    configs = expand(Scenario(), parse_grid({"kv_budget_gib": "0.5,1,2", "kv_dtype": "bf16,fp8"}))
    assert len(groups(configs)) == 3

    def interrupt(done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    result = search(workload, configs, SearchOptions(parse_slo("ttft_p99=1")), workers=workers, progress=interrupt)
    assert result.cancelled and len(result.rows) == 2 and result.configs == 6
    assert all(r["max_rate_per_s"] > 0 for r in result.rows)
    assert result.to_dict()["completed"] == 2

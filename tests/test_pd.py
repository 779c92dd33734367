"""Disaggregated prefill/decode (sim/fleet/pd.py): bytes, link speed, blocks across pools, TPOT."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.links import get_link
from sim.fleet.pd import PDFleet, transfer_bytes
from sim.fleet.replay import simulate
from sim.run.deployment import Deployment
from sim.scenario import Scenario
from sim.trace import synthetic

BASE = Scenario(model="llama-3.1-8b", gpu="h100-sxm", max_model_len=32768)


def long_prompts(n=120, rate=3.0, seed=1):
    return synthetic(n=n, rate=rate, input="lognormal:mean=6000:sigma=0.3", output="lognormal:mean=300:sigma=0.5",
                     seed=seed)


def test_transfer_bytes_are_the_prompts_kv_bytes_exactly():
    trace = long_prompts(n=40)
    res = simulate(trace, BASE.replace(pd="1:1"))
    # llama-3.1-8b bf16: 32 layers x 8 kv heads x 128 dims x 2 (K, V) x 2 bytes = 131,072 bytes per token
    per_token = 32 * 8 * 128 * 2 * 2
    assert res.summary["kv_transfer_bytes"] == int(trace.df["input_tokens"].sum()) * per_token
    assert res.summary["kv_transfers"] == 40


@pytest.mark.parametrize("tp, kv_dtype", [(1, "fp8"), (2, "bf16"), (16, "bf16")])
def test_transfer_bytes_follow_dtype_and_tp(tp, kv_dtype):
    dep = Deployment.resolve(BASE.replace(tp=tp, kv_dtype=kv_dtype))
    heads = max(1, 8 // tp) * tp  # heads replicated when tp > kv heads: each rank gets its copy
    elem = 1 if kv_dtype == "fp8" else 2
    assert transfer_bytes(dep, 1000) == 1000 * 32 * heads * 128 * 2 * elem


def test_sliding_window_model_sends_only_its_window():
    dep = Deployment.resolve(Scenario(model="gpt-oss-20b", gpu="h100-sxm", max_model_len=32768))
    short, long = transfer_bytes(dep, 100), transfer_bytes(dep, 20000)
    full = [g for g in dep.spec.groups if g.window_tokens is None]
    per_full = sum(g.bytes_per_token("bf16", 1) for g in full)
    # past the window only the full-attention layers keep growing
    assert transfer_bytes(dep, 20001) - long == per_full
    assert long < 20000 * sum(g.bytes_per_token("bf16", 1) for g in dep.spec.groups)
    assert short > 0


def test_ttft_rises_monotonically_as_the_link_slows():
    trace = long_prompts(n=60, rate=4.0)
    links = ["nvlink-h100", "rdma-400g", "rdma-200g", "rdma-100g", "ethernet-25g"]
    assert [get_link(n).bandwidth for n in links] == sorted((get_link(n).bandwidth for n in links), reverse=True)
    ttft = [simulate(trace, BASE.replace(pd="1:2", kv_link=n)).summary["ttft_s"]["mean"] for n in links]
    assert all(a < b for a, b in zip(ttft, ttft[1:], strict=False)), ttft


def test_tpot_p99_below_the_aggregated_fleet_at_equal_gpus():
    trace = long_prompts(n=200, rate=4.0)
    agg = simulate(trace, BASE.replace(replicas=4, router="least-outstanding"))
    pd_ = simulate(trace, BASE.replace(pd="2:2"))
    assert pd_.summary["gpus"] == 4
    assert pd_.summary["completed"] == agg.summary["completed"] == 200
    assert pd_.summary["tpot_s"]["p99"] < agg.summary["tpot_s"]["p99"]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), pd=st.sampled_from(["1:1", "2:1", "1:2"]),
       link=st.sampled_from(["rdma-100g", "ethernet-25g", "nvlink-h100"]), budget=st.sampled_from([1.5, 3.0, 8.0]),
       pipelined=st.booleans())
def test_blocks_are_conserved_across_pools_at_every_step(seed, pd, link, budget, pipelined):
    """Property: at every step of either pool, each replica's blocks in use are exactly the blocks of
    the requests it holds (running, loading, or finished and waiting for their KV to leave), a request
    holds blocks in the prefill pool only until its transfer completes, and both pools end empty."""
    trace = synthetic(n=60, rate=6.0, input="lognormal:mean=3000:sigma=0.6", output="lognormal:mean=80:sigma=0.6",
                      seed=seed)
    sc = BASE.replace(pd=pd, kv_budget_gib=budget, kv_link=link, kv_layer_pipelined=pipelined)
    fleet = PDFleet(trace, sc)
    checked = [0]

    def check(sim, rep):
        alloc, sched = rep.alloc, rep.sched
        bs = alloc.block_size
        held = list(sched.running) + [r for _, r, _ in sched.remote.loading] + list(sched.remote.held)
        need = sum(-(-alloc.num_tokens(r) // bs) for r in held)
        assert alloc.num_used_blocks == need
        checked[0] += 1

    for sim in (fleet.prefill, fleet.decode):
        step, run = sim.record_step, sim.book_run

        def wrapped_step(rep, plan, t_end, finished, _sim=sim, _orig=step):
            _orig(rep, plan, t_end, finished)
            check(_sim, rep)

        def wrapped_run(rep, decode_run, _sim=sim, _orig=run):
            _orig(rep, decode_run)
            check(_sim, rep)

        sim.record_step, sim.book_run = wrapped_step, wrapped_run
    fleet.run()
    res = fleet.result(trace.digest(), 0.0)
    assert checked[0] > 50
    for sim in (fleet.prefill, fleet.decode):
        for rep in sim.s.replicas:
            assert rep.alloc.num_used_blocks == 0
    done = {r: d for r, _, _, d, _, _ in fleet.log.rows}
    first = fleet.decode.s.table.first_token_s
    assert all(first[r] > done[r] for r in done)  # the decode side starts after the KV arrived
    assert res.summary["completed"] + res.summary["rejected"] == 60


@pytest.mark.parametrize("pd, link", [("1:2", "rdma-100g"), ("2:1", "ethernet-25g")])
def test_pd_skip_ahead_equals_stepping(pd, link):
    """Decode runs are cut where a transfer completes or a prefill replica's blocks come back: the
    requests are the same as when every step is taken one by one (a load due is applied by a
    general step, never skipped over)."""
    trace = long_prompts(n=60, rate=5.0, seed=3)
    sc = BASE.replace(pd=pd, kv_link=link, kv_budget_gib=4.0)
    fast, slow = simulate(trace, sc), simulate(trace, sc, skip_ahead=False)
    import pandas as pd_

    pd_.testing.assert_frame_equal(fast.requests, slow.requests)
    assert fast.summary["kv_transfer_s"] == slow.summary["kv_transfer_s"]
    assert fast.summary["sim_events"] < slow.summary["sim_events"]


def test_search_answers_aggregated_or_disaggregated_at_equal_gpus(capsys):
    import json

    from sim.__main__ import main

    rc = main(["search", "--synthetic", "n=60,rate=2,input=lognormal:mean=4000:sigma=0.3,output=lognormal:mean=100:sigma=0.3,seed=1",
               "--model", "llama-3.1-8b", "--replicas", "2", "--pd", "none,1:1", "--router", "least-outstanding",
               "--slo", "ttft_p99=2.0,tpot_p99=0.05", "--workers", "1", "--no-progress", "--json"])
    out = json.loads(capsys.readouterr().out)
    rows = out["rows"]
    assert rc == 0 and [r["pd"] for r in rows] == [None, "1:1"]
    assert [r["gpus"] for r in rows] == [2, 2]
    assert all(r["max_rate_per_s"] > 0 and r["cost_per_mtok"] for r in rows)
    assert out["best"]


def test_fleet_file_sets_pools_link_and_router(tmp_path, capsys):
    import json

    from sim.__main__ import main
    from sim.errors import ScenarioError
    from sim.fleet.fleet_file import apply_fleet_file

    f = tmp_path / "fleet.json"
    f.write_text(json.dumps({"router": "least-kv", "kv_link": "rdma-200g", "pools": [
        {"role": "prefill", "replicas": 1, "tp": 2}, {"role": "decode", "replicas": 3, "tp": 1}]}))
    sc = apply_fleet_file(BASE, str(f))
    assert (sc.pd, sc.prefill_tp, sc.decode_tp, sc.kv_link, sc.router) == ("1:3", 2, 1, "rdma-200g", "least-kv")
    agg = tmp_path / "agg.json"
    agg.write_text(json.dumps({"router": "kv-precise", "router_kv_weight": 4, "pools": [{"replicas": 4}]}))
    assert apply_fleet_file(BASE, str(agg)).replicas == 4
    for bad, why in (({"nope": 1}, "unknown key"), ({"pools": [{"role": "prefill"}]}, "one aggregated pool"),
                     ({"router": "x"}, "router='x'"), ({"pools": [{"role": "decode", "replicas": 1, "gpus": 2}]}, "pools\\[0\\]")):
        f.write_text(json.dumps(bad))
        with pytest.raises(ScenarioError, match=why):
            apply_fleet_file(BASE, str(f))
    f.write_text(json.dumps({"pools": [{"role": "prefill", "replicas": 1}, {"role": "decode", "replicas": 1}]}))
    rc = main(["run", "--synthetic", "n=10,rate=2", "--model", "llama-3.1-8b", "--fleet", str(f), "--json", "--no-progress"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["kv_transfers"] == 10 and out["gpus"] == 2
    f.write_text("{broken")
    rc = main(["run", "--synthetic", "n=10", "--model", "llama-3.1-8b", "--fleet", str(f), "--no-progress"])
    err = capsys.readouterr().err
    assert rc != 0 and str(f) in err and "Traceback" not in err


def test_pools_and_nodes_of_a_scenario():
    from sim.fleet.layout import fleet_gpus, pools_of

    agg = pools_of(BASE.replace(replicas=4, tp=2))
    assert [(p.role, p.replicas, p.tp) for p in agg] == [("aggregated", 4, 2)] and fleet_gpus(BASE.replace(replicas=4, tp=2)) == 8
    assert agg[0].replicas_per_node == 4 and [agg[0].node_of(i) for i in range(4)] == [0, 0, 0, 0]
    pd = pools_of(BASE.replace(pd="3:5", prefill_tp=4, decode_tp=1))
    assert [(p.role, p.replicas, p.tp) for p in pd] == [("prefill", 3, 4), ("decode", 5, 1)]
    assert [pd[0].node_of(i) for i in range(3)] == [0, 0, 1] and fleet_gpus(BASE.replace(pd="3:5", prefill_tp=4, decode_tp=1)) == 17


def test_pd_with_static_batching_is_one_line():
    from sim.errors import ScenarioError

    with pytest.raises(ScenarioError, match="needs continuous batching"):
        BASE.replace(pd="1:1", static_batch=8)


def test_gpus_per_node_sets_the_node_of_each_replica():
    from sim.errors import ScenarioError
    from sim.fleet.layout import pools_of

    assert BASE.replace(gpus_per_node=8).digest() == BASE.digest()  # the default: digests of older runs stand
    four = pools_of(BASE.replace(replicas=4, tp=2, gpus_per_node=4))[0]
    assert four.replicas_per_node == 2 and [four.node_of(i) for i in range(4)] == [0, 0, 1, 1]
    wide = pools_of(BASE.replace(pd="2:2", prefill_tp=8, decode_tp=2, gpus_per_node=4))
    assert [wide[0].node_of(i) for i in range(2)] == [0, 1]  # a replica wider than a node: one per node
    assert [wide[1].node_of(i) for i in range(2)] == [0, 0]
    for bad in (0, 73, 2.5):
        with pytest.raises(ScenarioError, match="gpus_per_node"):
            BASE.replace(gpus_per_node=bad)


def test_nvme_tier_is_shared_per_node_of_gpus_per_node():
    from sim.run.tier_setup import build_tiers

    sc = BASE.replace(replicas=4, tp=2, prefix_caching=True, nvme_tier_gib=1.0)
    dep = Deployment.resolve(sc)
    nodes = lambda s: sorted(n for n in build_tiers(s, dep, 4).tiers if n.startswith("nvme"))  # noqa: E731
    assert nodes(sc) == ["nvme/node0"]  # 4 replicas x TP 2 = one node of 8
    assert nodes(sc.replace(gpus_per_node=2)) == ["nvme/node0", "nvme/node1", "nvme/node2", "nvme/node3"]


def test_decode_router_picks_the_decode_replica():
    trace = long_prompts(n=30, rate=4.0)
    sc = BASE.replace(pd="1:3")
    assert sc.replace(decode_router="least-outstanding").digest() == sc.digest()
    default, rr = simulate(trace, sc), simulate(trace, sc.replace(decode_router="round-robin"))
    assert default.summary["fleet"]["decode_router"] == "least-outstanding"
    assert rr.summary["fleet"]["decode_router"] == "round-robin"
    picked = [t["decode"] for t in rr.summary["fleet"]["transfers"]]
    assert [picked.count(i) for i in range(3)] == [10, 10, 10]  # round-robin: 30 handoffs, 10 per decode replica
    base_decode = {t["req"]: t["decode"] for t in default.summary["fleet"]["transfers"]}
    assert base_decode != {t["req"]: t["decode"] for t in rr.summary["fleet"]["transfers"]}
    assert rr.summary["completed"] == default.summary["completed"] == 30


def test_each_pools_routing_imbalance_is_its_own():
    """The decode pool's imbalance is max/mean of what its own replicas took (it read the prefill
    pool's figure, set as the fleet's, before): 1P3D, one prefill replica, so the fleet's is 1.0."""
    res = simulate(long_prompts(n=30, rate=4.0), BASE.replace(pd="1:3", decode_router="random"))
    fleet = res.summary["fleet"]
    for pool in fleet["pools"]:
        routed = [r["routed"] for r in fleet["replicas"] if r["pool"] == pool["role"]]
        assert pool["routing_imbalance"] == pytest.approx(max(routed) / (sum(routed) / len(routed)))
    decode = next(p for p in fleet["pools"] if p["role"] == "decode")
    assert decode["routing_imbalance"] > 1.0  # random over 3 replicas: 30 handoffs not split 10/10/10
    assert res.summary["routing_imbalance"] == 1.0  # the prefill pool's (docs/METRICS.md)


def test_fleet_file_in_yaml(tmp_path):
    from sim.errors import ScenarioError
    from sim.fleet.fleet_file import apply_fleet_file

    f = tmp_path / "fleet.yaml"
    f.write_text("router: least-kv\nkv_link: rdma-200g\npools:\n  - {role: prefill, replicas: 1, tp: 2}\n"
                 "  - {role: decode, replicas: 3}\n")
    sc = apply_fleet_file(BASE, str(f))
    assert (sc.pd, sc.prefill_tp, sc.kv_link, sc.router) == ("1:3", 2, "rdma-200g", "least-kv")
    for text, why in (("router: [unclosed\n", "not valid YAML .* at line 2"), ("a: &x [1]\nb: *x\n", "aliases"),
                      ("- 1\n", "expected an object"), ("!!python/object:os.system {}\n", "not valid YAML"),
                      ("[" * 30000 + "]" * 30000, "nested too deeply"), ("router_kv_weight: .nan\n", "not a finite number"),
                      ("1: a\nrouter: x\n", "unknown key\\(s\\) 1 "),  # YAML keys need not be text
                      ("".join(f"k{i}: 1\n" for i in range(500)), "k104 and 492 more \\(known")):
        f.write_text(text)
        with pytest.raises(ScenarioError, match=f"{f}: .*{why}"):
            apply_fleet_file(BASE, str(f))


def test_a_pools_tp_error_names_the_pool():
    from models.spec import SpecError

    with pytest.raises(SpecError, match=r"^decode pool \(tp=3\): llama-3.1-8b: tp=3 must divide"):
        PDFleet(long_prompts(n=4), BASE.replace(pd="1:1", decode_tp=3))


def test_fleet_file_role_that_is_not_text_is_one_line(tmp_path):
    """A role such as 1 used to reach sorted() beside a string: a TypeError traceback."""
    import json

    from sim.errors import ScenarioError
    from sim.fleet.fleet_file import apply_fleet_file

    f = tmp_path / "fleet.json"
    f.write_text(json.dumps({"pools": [{"role": 1}, {"role": "decode"}]}))
    with pytest.raises(ScenarioError, match="one aggregated pool, or one prefill and one decode pool"):
        apply_fleet_file(BASE, str(f))


def test_single_engine_replay_refuses_pd():
    """sim.run.engine.simulate has no P/D handoff: a P/D scenario is refused, never run aggregated."""
    from sim.errors import ScenarioError
    from sim.run.engine import simulate
    from sim.trace import synthetic

    with pytest.raises(ScenarioError, match=r"pd='1:1' needs the fleet's replay \(sim.fleet.replay.simulate\)"):
        simulate(synthetic(n=4, rate=1.0), BASE.replace(pd="1:1", replicas=2))


def test_pd_prefix_hit_rate_and_its_counters_come_from_one_pool(samples_dir):
    """hits / queries is the summary's rate: all three are the prefill pool's (the queries were the
    decode pool's, whose look-ups are its local hits before a transfer)."""
    from sim.trace import load_trace

    trace = load_trace(samples_dir / "mooncake_small.jsonl").first(60)
    s = simulate(trace, BASE.replace(pd="1:2", prefix_caching=True)).summary
    assert s["prefix_cache_hits"] > 0
    assert s["prefix_cache_hits"] / s["prefix_cache_queries"] == pytest.approx(s["prefix_cache_hit_rate"])

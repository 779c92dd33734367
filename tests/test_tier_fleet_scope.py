"""A node's CPU KV tier shared by its replicas (Scenario.cpu_tier_scope, sim/core/tiers/scope.py)."""

from __future__ import annotations

import json

import pytest

from sim.fleet.replay import simulate
from sim.scenario import Scenario
from sim.trace import load_trace

# Two replicas of TP 1 on one 8-GPU node, round-robin: request 0 (replica 0) computes a 4-block
# prompt; request 1 (replica 1), 10 s later, repeats it. Tiny 1 GiB pools hold it on replica 0's GPU only.
BASE = Scenario(model="llama-3-8b", gpu="h100-sxm", kv_budget_gib=1.0, prefix_caching=True, replicas=2,
                cpu_tier_gib=1.0)


@pytest.fixture
def repeat_trace(tmp_path):
    path = tmp_path / "repeat.jsonl"
    rows = [{"timestamp": 0, "input_length": 2048, "output_length": 4, "hash_ids": [1, 2, 3, 4]},
            {"timestamp": 10_000, "input_length": 2048, "output_length": 4, "hash_ids": [1, 2, 3, 4]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_trace(path)


def test_a_prompt_stored_by_one_replica_hits_in_the_node_cpu_tier_for_the_other(repeat_trace):
    own = simulate(repeat_trace, BASE)
    shared = simulate(repeat_trace, BASE.replace(cpu_tier_scope="node"))
    assert [r["routed"] for r in shared.summary["fleet"]["replicas"]] == [1, 1]
    assert own.summary["tier_hit_tokens"]["cpu"] == 0  # replica 1's own tier never saw the prompt
    # 2048 tokens = 128 blocks of 16; the block of the last token is always computed: 127 x 16 hit
    assert shared.summary["tier_hit_tokens"]["cpu"] == 127 * 16
    occ = shared.summary["tier_occupancy"]
    assert list(occ) == ["cpu/node0"]  # one instance for the node
    assert occ["cpu/node0"]["capacity_bytes"] == own.summary["tier_occupancy"]["cpu/replica0"]["capacity_bytes"] * 2
    # each replica loads over its own PCIe link: the load went over replica 1's
    assert shared.summary["tier_link_utilisation"]["pcie-h2d/replica1"] > 0 == shared.summary["tier_link_utilisation"]["pcie-h2d/replica0"]


def test_replica_scope_is_the_default_and_leaves_the_digest_alone():
    assert BASE.cpu_tier_scope == "replica"
    assert BASE.replace(cpu_tier_scope="replica").digest() == BASE.digest()
    assert BASE.replace(cpu_tier_scope="node").digest() != BASE.digest()
    with pytest.raises(Exception, match="cpu_tier_scope"):
        BASE.replace(cpu_tier_scope="rack")

"""Scenario: validation messages, JSON round trip, and digest stability."""

import pytest

from sim.scenario import Scenario, ScenarioError


def test_json_round_trip_preserves_every_field():
    s = Scenario(model="qwen2.5-7b", allocator="contiguous", reserve="pow2", kv_heads=4, kv_budget_gib=12.0)
    assert Scenario.from_json(s.to_json()) == s


def test_digest_changes_with_results_affecting_fields_only():
    base = Scenario()
    assert base.digest() == Scenario().digest()
    assert base.digest() != base.replace(block_size=32).digest()


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"allocator": "slab"}, "allocator"),
        ({"block_size": 0}, "block_size"),
        ({"tp": -1}, "tp"),
        ({"gpu_mem_util": 1.5}, "gpu_mem_util"),
        ({"kv_dtype": "int3"}, "kv_dtype"),
        ({"kv_budget_gib": 0}, "kv_budget_gib"),
        ({"static_batch": 0}, "static_batch"),
    ],
)
def test_bad_values_give_one_line_errors_naming_the_field(changes, field):
    with pytest.raises(ScenarioError) as err:
        Scenario(**changes)
    message = str(err.value)
    assert field in message and "\n" not in message


def test_untrusted_json_rejects_unknown_fields_and_non_objects():
    with pytest.raises(ScenarioError, match="unknown field"):
        Scenario.from_dict({"model": "llama-3-8b", "evil": 1})
    with pytest.raises(ScenarioError, match="JSON object"):
        Scenario.from_json("[1, 2]")
    with pytest.raises(ScenarioError, match="not valid JSON"):
        Scenario.from_json("{")

"""Configs whose layers kvsim does not model are refused in one line (models/unmodelled.py), never
read as Llama; the same fields left inert are read as usual."""

from __future__ import annotations

import json

import pytest

from models.spec import CATALOG_DIR, MAX_CONFIG_BYTES, SpecError, load_spec, spec_from_config
from models.unmodelled import UNMODELLED

LLAMA = json.loads((CATALOG_DIR / "llama-2-7b.json").read_text())

# A value that changes the layers, per field (as the models named in the registry write it)
ACTIVE = {
    "block_configs": [{"attention": {"n_heads_in_group": 8}, "ffn": {"ffn_mult": 2.625}}],
    "layers_block_type": ["mamba", "attention"], "attn_layer_indices": [3, 7], "attn_layer_period": 8,
    "mamba_d_ssm": 1024, "linear_attn_config": {"kda_layers": [1, 2, 3]}, "attn_type_list": [0, 0, 1],
    "hybrid_layer_pattern": [0, 1, 1, 1], "num_kv_shared_layers": 10, "attention_k_eq_v": True,
    "num_global_key_value_heads": 2, "global_head_dim": 512, "compress_ratios": [0, 4, 128],
    "sparse_attention_config": {"use_sparse_attention": True},
}
# The same fields as configs of models kvsim does read write them
INERT = {"attn_type_list": [1, 1, 1], "num_kv_shared_layers": 0, "attention_k_eq_v": False,
         "num_global_key_value_heads": LLAMA["num_key_value_heads"], "compress_ratios": [0, 1, 0],
         "sparse_attention_config": {"use_sparse_attention": False}}


def test_every_registered_field_has_an_active_case():
    assert {e.key for e in UNMODELLED} == set(ACTIVE)


@pytest.mark.parametrize("key", sorted(ACTIVE))
def test_an_unmodelled_field_is_refused_in_one_line(key):
    with pytest.raises(SpecError, match=f"{key} .* is not modelled by kvsim") as exc:
        spec_from_config({**LLAMA, key: ACTIVE[key]}, source="config.json")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("config.json: ")


@pytest.mark.parametrize("key", sorted(INERT))
def test_an_inert_value_reads_as_the_plain_model(key):
    assert spec_from_config({**LLAMA, key: INERT[key]}).num_params == load_spec("llama-2-7b").num_params


def test_a_quantised_checkpoints_long_config_is_read(tmp_path):
    # nvidia/MiniMax-M3-NVFP4's config.json is 3.1 MB (its quantization_config lists every module it skips)
    ignore = [f"model.layers.{i}.mlp.experts.{j}.gate" for i in range(60) for j in range(512)]
    cfg = {**LLAMA, "quantization_config": {"quant_method": "modelopt", "ignore": ignore}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert 1 << 20 < path.stat().st_size < MAX_CONFIG_BYTES
    assert load_spec(str(path)).num_params == load_spec("llama-2-7b").num_params


@pytest.mark.parametrize("extra, field", [
    ({"num_total_experts": 64}, "num_total_experts = 64"),  # a name kvsim does not read (ERNIE's: models/ernie_moe.py)
    ({"ffn_config": {"moe_num_experts": 16, "moe_top_k": 4}}, "ffn_config.moe_num_experts = 16"),  # DBRX's
])
def test_experts_kvsim_does_not_read_are_not_dropped_silently(extra, field):
    with pytest.raises(SpecError, match=f"{field}: a mixture of experts whose experts kvsim does not read") as exc:
        spec_from_config({**LLAMA, **extra}, source="config.json")
    assert "\n" not in str(exc.value)


def test_a_dense_config_naming_no_experts_reads_as_before():
    assert spec_from_config({**LLAMA, "num_local_experts": 0, "num_experts_per_tok": 2}).moe is None

"""DeepSeek sparse attention's indexer, counted in weights and in KV where vLLM builds it.

DeepSeek-V3.2 and GLM-5 build an indexer in every layer; GLM-5.2's IndexCache
(index_topk_freq 4, index_skip_topk_offset 3) builds one only where a layer computes its own top-k
(vLLM 0.32 deepseek_v2.py: skip = max(i - offset + 1, 0) % freq != 0), and only those layers keep an
indexer cache. The indexer's weights per layer: wq_b (q_lora_rank x heads x dim), wk and
weights_proj (hidden x (dim + heads)), k_norm (a LayerNorm with bias, 2 x dim).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_backend.vllm_engine.spawn import run_captured
from models.kv_groups import indexer_layer_flags
from models.spec import SpecError, load_spec, spec_from_config
from sim.memory.vllm_pool import PoolLayoutError, pool_layout, stage_layout
from sim.memory.vllm_startup_check import request_peak_bytes

REPO = Path(__file__).resolve().parent.parent
V3 = json.loads((REPO / "models" / "catalog" / "deepseek-v3.json").read_text())
V32 = {**V3, "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}
INDEX_CACHE = {**V32, "index_topk_freq": 4, "index_skip_topk_offset": 3}  # GLM-5.2's IndexCache fields
INDEXED = [0, 1, 2] + list(range(6, 61, 4))  # layers 0-2, then every 4th from 6: 3 + 14 = 17
ROW_FP8, ROW_BF16, INDEXER_ROW = 656, 576 * 2, 128 + 4


def test_indexer_layers_by_hand():
    assert [i for i, f in enumerate(indexer_layer_flags(INDEX_CACHE, 61)) if f] == INDEXED
    assert all(indexer_layer_flags(V32, 61)) and not any(indexer_layer_flags(V3, 61))
    pattern = {**V32, "index_topk_pattern": "FFS" * 20 + "F"}
    assert sum(indexer_layer_flags(pattern, 61)) == 41


def test_indexer_weights_in_every_indexing_layer():
    per_layer = 1536 * 64 * 128 + 7168 * (128 + 64) + 2 * 128  # 13,959,424
    v3 = spec_from_config(V3).num_params
    assert spec_from_config(V32).num_params - v3 == 61 * per_layer == 851_524_864
    assert spec_from_config(INDEX_CACHE).num_params - v3 == len(INDEXED) * per_layer


def test_indexer_cache_only_where_an_indexer_is_built():
    spec = spec_from_config(INDEX_CACHE)
    assert spec.kv_bytes_per_token("fp8") == 61 * ROW_FP8 + len(INDEXED) * INDEXER_ROW
    assert spec.kv_bytes_per_token("bf16") == 61 * ROW_BF16 + len(INDEXED) * INDEXER_ROW
    layout = pool_layout(spec, "fp8", tp=8)
    assert layout.block_size == 64 and layout.bytes_per_block == 64 * (61 * ROW_FP8 + len(INDEXED) * INDEXER_ROW)
    row_sum = 61 * ROW_FP8 + len(INDEXED) * INDEXER_ROW
    assert request_peak_bytes(layout, 32768, 16384) == 32768 // 64 * 64 * row_sum  # vLLM's start-up need
    with pytest.raises(PoolLayoutError, match="IndexCache"):
        stage_layout(spec, layout, 0, 31)


def test_a_pipeline_stage_holds_its_own_indexers():
    spec = spec_from_config(INDEX_CACHE)
    first = spec.pipeline_stage(0, 31, first=True, last=False)
    assert first.mla.indexer_layers == sum(i < 31 for i in INDEXED) == 10
    assert first.kv_bytes_per_token("fp8") == 31 * ROW_FP8 + 10 * INDEXER_ROW


@pytest.mark.parametrize("extra, message", [
    ({"index_topk_freq": 0}, "index_topk_freq must be an integer of at least 1"),
    ({"index_topk_pattern": 7}, "index_topk_pattern must be a string or a list"),
])
def test_bad_index_fields_are_one_line(extra, message):
    with pytest.raises(SpecError, match=message) as exc:
        spec_from_config({**INDEX_CACHE, **extra}, source="config.json")
    assert "\n" not in str(exc.value)


# vLLM's grouping of the same per-layer specs: MLA rows in every layer, an indexer cache
# (DeepseekV32IndexerCache: MLAAttentionSpec of 132 uint8) in the indexing ones.
VLLM_SIDE = """
import json, sys
from types import SimpleNamespace
import torch
from vllm.v1.core.kv_cache_utils import get_kv_cache_groups
from vllm.v1.kv_cache_interface import MLAAttentionSpec
out = []
for a in json.loads(sys.argv[1]):
    specs = {}
    for i in range(a["layers"]):
        specs[f"model.layers.{i}.self_attn.attn"] = MLAAttentionSpec(
            block_size=64, num_kv_heads=1, head_size=576, max_tp_shards=1,
            dtype=torch.uint8 if a["fp8"] else torch.bfloat16, cache_dtype_str="fp8_ds_mla" if a["fp8"] else "auto",
            state_content_bytes=656 if a["fp8"] else None, is_index_group_leader=i in a["indexed"])
    for i in a["indexed"]:
        specs[f"model.layers.{i}.self_attn.indexer.k_cache"] = MLAAttentionSpec(
            block_size=64, num_kv_heads=1, head_size=132, dtype=torch.uint8)
    groups = get_kv_cache_groups(SimpleNamespace(scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False)), specs)
    out.append([g.kv_cache_spec.page_size_bytes for g in groups])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_block_bytes_equal_vllms_grouping(vllm_env):
    cases = [(INDEX_CACHE, True), (INDEX_CACHE, False), (V32, True)]
    args = [{"layers": 61, "fp8": fp8, "indexed": [i for i, f in enumerate(indexer_layer_flags(cfg, 61)) if f]}
            for cfg, fp8 in cases]
    rc, out, err = run_captured(["-c", VLLM_SIDE, json.dumps(args)], python=vllm_env, cwd=REPO, timeout_s=300)
    assert rc == 0, err
    vllm_pages = json.loads(out.strip().splitlines()[-1])
    ours = [[pool_layout(spec_from_config(cfg), "fp8" if fp8 else "bf16", tp=8).bytes_per_block] for cfg, fp8 in cases]
    assert vllm_pages == ours


def test_catalog_deepseek_unchanged():
    """V3 has no indexer: transformers' DeepseekV3ForCausalLM of this config counts 671,026,404,352 too."""
    assert load_spec("deepseek-v3").num_params == spec_from_config(V3).num_params == 671_026_404_352

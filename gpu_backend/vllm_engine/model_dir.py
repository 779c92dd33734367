"""A directory holding a config.json for vLLM (`load_format="dummy"`: random weights, no download).

vLLM loads a model from a directory. kvsim's --model is a catalog name, an HF id, a config.json or a
directory: the last is used as is, the others are written to a temporary directory.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from models.spec import ModelSpec, load_spec

_DIRS: dict[str, tempfile.TemporaryDirectory] = {}  # kept alive for the process


def model_dir(model: str, kv_heads: int | None = None) -> tuple[Path, ModelSpec]:
    """(directory with config.json, its ModelSpec) for a kvsim model reference; `kv_heads` is the
    GQA what-if (the written config gets that many key/value heads, so vLLM's KV pool is the one
    the simulator books)."""
    spec = load_spec(model)
    path = Path(model)
    if kv_heads is None and path.is_dir() and (path / "config.json").is_file():
        return path, spec
    if kv_heads is not None:
        spec = spec.with_kv_heads(kv_heads)
    key = f"{model}|{kv_heads}"
    if key not in _DIRS:
        tmp = tempfile.TemporaryDirectory(prefix="kvsim-vllm-model-")
        config = dict(spec.config)
        config.setdefault("bos_token_id", 1)  # vLLM needs these as numbers even without a tokenizer
        config.setdefault("eos_token_id", 2)
        if kv_heads is not None:
            config["num_key_value_heads"] = kv_heads
        (Path(tmp.name) / "config.json").write_text(json.dumps(config))
        _DIRS[key] = tmp
    return Path(_DIRS[key].name), spec

"""Every catalog model either passes the GPU backend's load checks or is refused in one line."""

from __future__ import annotations

import pytest

from models.spec import list_catalog, load_spec

pytest.importorskip("torch")
pytest.importorskip("transformers")

# Simulated only: their KV groups are not one full-attention pool (MLA, sliding, chunked, state).
GROUPED = {"deepseek-v3", "deepseek-r1", "gpt-oss-20b", "gpt-oss-120b", "gemma-2-9b-it", "gemma-3-27b", "llama-4-scout",
           "llama-4-maverick", "qwen3-next-80b-a3b", "nemotron-3-nano-30b-a3b",
           "mistral-7b"}  # Mistral-7B-v0.1: a 4,096-token window in every layer, as vLLM runs it


@pytest.mark.parametrize("name", list_catalog())
def test_catalog_model_runs_on_the_gpu_backend_or_is_refused_in_one_line(name):
    from gpu_backend.model_loader import ModelLoadError, preflight

    kinds = {g.kind for g in load_spec(name).groups}
    try:
        spec = preflight(name)
    except ModelLoadError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 400
        assert kinds != {"full"}, f"{name}: a full-attention model was refused: {message}"
        assert "full-attention models only" in message
        assert name in GROUPED
        return
    assert kinds == {"full"} and name not in GROUPED
    assert spec.name == name

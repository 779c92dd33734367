"""The engine of an imported run: what the user gave, else what vLLM does by default.

Benchmark files record the client's side; the engine configuration the simulator must copy is
mostly absent. In order: the user's flags (--model, --gpu, --num-gpu-blocks, ...), what the file
says (a model name), then vLLM 0.32's defaults — block size 16, prefix caching on, tensor
parallel 1, bf16, max_num_seqs / max_num_batched_tokens of the OpenAI server for the GPU's memory
(sim/fidelity/observe_record.vllm_defaults), and the KV pool (num_gpu_blocks) as kvsim's
accounting of vLLM sizes it at gpu_memory_utilization 0.9 (sim/memory/vllm_profile.py). The model
and the GPU cannot be assumed: without them the import stops with one line saying which flag to give.
"""

from __future__ import annotations

from typing import Any

from sim.fidelity.run_record import OVERRIDE_KEYS, RunError


def complete_engine(given: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(meta.json-shaped engine sections, assumed field -> why)."""
    from models.gpus import get_gpu
    from models.spec import load_spec
    from sim.fidelity.observe_record import vllm_defaults

    if not given.get("model"):
        raise RunError(f"{name}: the file does not name the model: give --model (catalog name, HF id or config.json)")
    if not given.get("gpu"):
        raise RunError(f"{name}: the file does not say which GPU served it: give --gpu (a GPU catalog name)")
    gpu = get_gpu(given["gpu"])
    spec = load_spec(str(given["model"]))
    assumed: dict[str, str] = {}
    seqs, batched, why = vllm_defaults(gpu.hbm_bytes)
    defaults: dict[str, tuple[Any, str]] = {
        "tp": (1, "1 (--tp)"), "block_size": (16, "16: vLLM's default on GPUs (--block-size)"),
        "prefix_caching": (True, "on: vLLM V1's default (--prefix-caching)"),
        "max_num_seqs": (seqs, f"{seqs}: {why} (--max-num-seqs)"),
        "max_batched_tokens": (batched, f"{batched}: {why} (--max-batched-tokens)"),
    }
    values = dict(given)
    values["gpu"] = gpu.name
    for key, (value, reason) in defaults.items():
        if values.get(key) is None:
            values[key] = value
            assumed[key] = reason
    if values.get("num_gpu_blocks") is None:
        values["num_gpu_blocks"], assumed["num_gpu_blocks"] = _pool(spec, gpu, values, name)
    meta: dict[str, Any] = {"engine_kwargs": {"dtype": "bfloat16", "kv_cache_dtype": "auto"}, "kv_cache": {},
                            "hardware": {"device_name": gpu.name}}
    assumed["dtype"] = "bfloat16 weights and KV cache"
    for key, value in values.items():
        section, field_name = OVERRIDE_KEYS[key]
        meta[section][field_name] = value
    return meta, assumed


def _pool(spec: Any, gpu: Any, values: dict[str, Any], name: str) -> tuple[int, str]:
    from sim.memory.vllm_profile import PoolLayoutError, vllm_memory_profile

    try:
        prof = vllm_memory_profile(spec, gpu, tp=values["tp"], max_batched_tokens=values["max_batched_tokens"],
                                   max_num_seqs=values["max_num_seqs"], block_size=values["block_size"])
    except (PoolLayoutError, ValueError) as exc:
        raise RunError(f"{name}: give --num-gpu-blocks (the KV pool cannot be derived: {exc})") from None
    return prof.num_gpu_blocks, (f"{prof.num_gpu_blocks}: vLLM's pool for this model on {gpu.name} at "
                                 "gpu_memory_utilization 0.9, by kvsim's accounting (--num-gpu-blocks)")

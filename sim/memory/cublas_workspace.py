"""PyTorch's cuBLAS workspace: torch memory that vLLM's profile run allocates with its first GEMM.

PyTorch gives each (cuBLAS handle, stream) pair a workspace from its caching allocator the first time a
GEMM runs there and keeps it (aten/src/ATen/cuda/CublasHandlePool.cpp `setWorkspaceForHandle` ->
`getNewWorkspace`, sized by `parseChosenWorkspaceSize`: ":4096:2:16:8 default, 32MiB for Hopper",
i.e. 32 MiB on compute capability 9.0 and 4096 KiB x 2 + 16 KiB x 8 = 8.125 MiB on every other CUDA
card unless CUBLAS_WORKSPACE_CONFIG says otherwise). Loading weights runs no GEMM, so the first one is
in vLLM's `profile_run()`, inside the window whose torch peak vLLM charges to the pool
(utils/mem_utils.py memory_profiling): the workspace is part of the logged "torch peak memory increase".
cuBLASLt's own 1 MiB (CUBLASLT_WORKSPACE_SIZE's default) is under the logs' 0.01 GiB and not counted.
"""

from __future__ import annotations

from models.gpus import GPUSpec

KiB = 1 << 10
HOPPER_WORKSPACE_BYTES = 4096 * 8 * KiB  # sm_90 (H100, H200, H20, GH200): 32 MiB
DEFAULT_WORKSPACE_BYTES = 4096 * KiB * 2 + 16 * KiB * 8  # every other CUDA card: 8.125 MiB
SOURCE = ("PyTorch's cuBLAS workspace, allocated by the profile run's first GEMM and kept (aten/src/ATen/cuda/"
          "CublasHandlePool.cpp parseChosenWorkspaceSize: 32 MiB on compute capability 9.0, 8.125 MiB elsewhere)")


def cublas_workspace_bytes(gpu: GPUSpec) -> int:
    """The workspace one (handle, stream) pair takes on this card; 0 where the catalog gives no compute
    capability (not a CUDA card, or not known)."""
    if not gpu.compute_capability:
        return 0
    return HOPPER_WORKSPACE_BYTES if gpu.compute_capability == "9.0" else DEFAULT_WORKSPACE_BYTES

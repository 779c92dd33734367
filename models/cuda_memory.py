"""The device memory CUDA reports (torch.cuda.mem_get_info()[1]), which vLLM multiplies by
gpu_memory_utilization, as opposed to the nvidia-smi total the GPU catalog's hbm_bytes holds.

The driver keeps part of the memory for itself: cudaMemGetInfo's total is 430-490 MiB below
nvidia-smi's on the cards measured below. vLLM sizes its KV pool from the CUDA figure
(vllm/v1/worker/utils.py request_memory: ceil(total_memory x gpu_memory_utilization), total_memory
from MemorySnapshot, vllm/utils/mem_utils.py), so a capacity that follows vLLM must start there.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class CudaTotal:
    """A measured cudaMemGetInfo total and where it was read."""

    bytes: int
    nvidia_smi_mib: int  # the catalog's hbm_bytes / MiB for the same card (the gap is the driver's reserve)
    source: str


# Each figure was printed by PyTorch/vLLM on the card itself; nvidia-smi's total beside it.
MEASURED: dict[str, CudaTotal] = {
    "rtx-4090": CudaTotal(25_250_627_584, 24_564,
                          "../shared/fidelity/rtx4090-llama-3.1-8b/run/meta.json hardware.device_total_memory_bytes "
                          "(torch.cuda, vLLM 0.19.0 run)"),
    "h100-sxm": CudaTotal(round(79.22 * GiB), 81_559,
                          "vLLM memory-profiling log 'total_gpu_memory 79.22GiB' on an H100 80GB HBM3 "
                          "(vllm-project/vllm PR #10511 and #12126 sanity checks)"),
    "rtx-3090": CudaTotal(round(23.58 * GiB), 24_576,
                          "vLLM log 'total_gpu_memory=23.58GiB' on an RTX 3090 (vllm-project/vllm issue #10517)"),
    "a100-40gb": CudaTotal(42_298_834_944, 40_960,
                           "deviceQuery 'Total amount of global memory: 40339 MBytes (42298834944 bytes)' on an "
                           "NVIDIA A100-SXM4-40GB (bottlerocket-os/bottlerocket PR #3873); PyTorch's OOM messages "
                           "print it as 'total capacity of 39.39 GiB'"),
}

# Median gap nvidia-smi total - CUDA total over MEASURED (483, 438, 430 and 621 MiB): used where a card
# has no measured CUDA total. Any single card may differ by 50-200 MiB (the A100 40GB keeps 621 MiB).
DRIVER_RESERVE_BYTES = 460 * MiB


def cuda_total_bytes(gpu_name: str, hbm_bytes: int) -> tuple[int, str]:
    """(bytes CUDA reports as the device total, where that figure comes from) for a catalog GPU."""
    known = MEASURED.get(gpu_name)
    if known is not None:
        return known.bytes, known.source
    return (max(hbm_bytes - DRIVER_RESERVE_BYTES, 0),
            "nvidia-smi total minus 460 MiB, the median driver reserve measured on RTX 4090, H100, RTX 3090 and "
            "A100 40GB (models/cuda_memory.py)")

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
    "h100-sxm": CudaTotal(round(79.19 * GiB), 81_559,
                          "vLLM 0.19.0 'Free memory on device (78.68/79.19 GiB) on startup' on H100 80GB "
                          "(llm-d-incubation/llm-d-planner d3121e0, 33 start-ups, 2026-04; 79.18 in llm-d-benchmark's "
                          "0.11.0 results, 79.22 in vllm-project/vllm PR #10511 and #12126, 2024)"),
    "rtx-3090": CudaTotal(round(23.58 * GiB), 24_576,
                          "vLLM log 'total_gpu_memory=23.58GiB' on an RTX 3090 (vllm-project/vllm issue #10517)"),
    "a100-40gb": CudaTotal(42_298_834_944, 40_960,
                           "deviceQuery 'Total amount of global memory: 40339 MBytes (42298834944 bytes)' on an "
                           "NVIDIA A100-SXM4-40GB (bottlerocket-os/bottlerocket PR #3873); PyTorch's OOM messages "
                           "print it as 'total capacity of 39.39 GiB'"),
    # The cards below: deviceQuery (exact bytes) or PyTorch's _CudaDeviceProperties total_memory (MiB) where
    # the same line or capture names the card. The figure moves with the driver by up to ~200 MiB (L4: 22,478
    # MiB at driver 550.90.07, 22,491 at 12.2, 22,518 at 525.105.17), so one sourced reading stands for a card.
    # The A10G is left to the default (22,568 MiB): its captures (22,515, 22,587, 22,723 MiB) straddle it.
    "l4": CudaTotal(23_570_219_008, 23_034,
                    "deviceQuery 'Total amount of global memory: 22478 MBytes (23570219008 bytes)' on an NVIDIA L4, "
                    "driver 550.90.07 (thamada/nvidia-smi gls/L4_deviceQuery.py)"),
    "t4": CudaTotal(15_843_721_216, 15_360,
                    "deviceQuery '15110 MBytes (15843721216 bytes)' on a Tesla T4, driver 11.0 "
                    "(chiemon.github.io 2024-12-25); later drivers report 14,918-15,110 MiB"),
    "a10": CudaTotal(23_609_475_072, 23_028,
                     "deviceQuery '21.99 GBytes (23609475072 bytes)' on an NVIDIA A10, driver 12.2 "
                     "(aalanwyr/face2cuda step2cuda/README.md)"),
    "l40s": CudaTotal(47_803_596_800, 46_068,
                      "deviceQuery '45589 MBytes (47803596800 bytes)' on an NVIDIA L40S, driver 550.127.05, nvidia-smi "
                      "46068MiB (thamada/nvidia-smi gls/L40S_deviceQuery.py)"),
    "a100-80gb": CudaTotal(85_100_068_864, 81_920,
                           "deviceQuery '81158 MBytes (85100068864 bytes)' on an A100-SXM4-80GB, driver 555.42.02, "
                           "nvidia-smi 81920MiB (thamada/nvidia-smi gls/A100SXMx4_deviceQuery.py)"),
    "a100-80gb-pcie": CudaTotal(81_049 * MiB, 81_920,
                                "mixbench 'Total global mem: 81049 MB' on an NVIDIA A100 80GB PCIe, CUDA 12.3 "
                                "(ekondis/mixbench issue #47)"),
    "h200": CudaTotal(143_156 * MiB, 143_771,
                      "PyTorch _CudaDeviceProperties(name='NVIDIA H200', ..., total_memory=143156MB) "
                      "(ai-bot-pro/achatbot deploy/modal/src/llm/vllm/vlm/skywork_r1v.py); vLLM logs 139.80-139.81 GiB"),
    "b200": CudaTotal(182_642 * MiB, 184_320,
                      "PyTorch _CudaDeviceProperties(name='NVIDIA B200', ..., total_memory=182642MB) (the same achatbot "
                      "file); 'a total capacity of 178.35 GiB' on 8 x B200 (LMCache PR #3171)"),
    "h20": CudaTotal(97_285 * MiB, 98_304,
                     "PyTorch _CudaDeviceProperties(name='NVIDIA H20', ..., total_memory=97285MB) "
                     "(alipay/PainlessInferenceAcceleration flood/flood/ops/seg_mla.py)"),
    "rtx-pro-6000": CudaTotal(round(95.01 * GiB), 97_887,
                              "'GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition 95.01 GiB sm_120' (torch's total, "
                              "vLLM 0.27.1; kubesimplify/website blog 'Running a single LLM across two GPUs with vLLM', "
                              "2026-08)"),
    "rtx-5090": CudaTotal(33_680_457_728, 32_607,
                          "deviceQuery '32120 MBytes (33680457728 bytes)' on a GeForce RTX 5090, driver 12.8 "
                          "(NVIDIA/nccl issue #1637)"),
    "rtx-a6000": CudaTotal(48_676 * MiB, 49_140,
                           "PyTorch _CudaDeviceProperties(name='NVIDIA RTX A6000', ..., total_memory=48676MB) "
                           "(pytorch/ao torchao/prototype/hqq/README.md); 48,790 MiB with ECC disabled"),
    "mi300x": CudaTotal(206_141_652_992, 196_288,
                        "HIP device query '196592: Total Global Memory (MB)' on an AMD Instinct MI300X "
                        "(thamada/nvidia-smi gls/MI300X_deviceQuery.py); 'total capacity of 191.98 GiB' (vllm#7951)"),
    "mi325x": CudaTotal(round(255.98 * GiB), 262_144,
                        "'GPU 0 has a total capacity of 255.98 GiB' on AMD MI325X (vllm-project/vllm issue #41962)"),
}

# Median gap nvidia-smi total - CUDA total over the first four cards of MEASURED (483, 438, 430 and 621 MiB;
# the cards added later, where nvidia-smi's total is known, run 250-870 MiB): used where a card
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

"""The KV budget from the device, as vLLM's profiling run does it.

After the weights are loaded and a warm-up forward ran at the largest batch the scheduler may
form, the driver's free memory says what is really left: the CUDA context, cuBLAS/NCCL workspaces
and anything else outside PyTorch's allocator are already taken out of it. From the share of the
device we may use (total x utilisation) we subtract everything in use (total - free, after
releasing PyTorch's cached blocks) and the activations the warm-up needed at its peak (freed by
then, needed again at every step) plus the attention workspace cap: the rest is KV.

`DeviceMemory` is the reader this needs; CudaMemory reads torch.cuda, tests pass a fake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from gpu_backend.batch import WORKSPACE_BYTES
from gpu_backend.paged_cache import cuda_kv_budget_bytes


class DeviceMemory(Protocol):
    def reset_peak(self) -> None: ...
    def synchronize(self) -> None: ...
    def empty_cache(self) -> None: ...
    def allocated(self) -> int: ...  # bytes held by live tensors (PyTorch's allocator)
    def peak_allocated(self) -> int: ...  # since reset_peak
    def free_and_total(self) -> tuple[int, int]: ...  # as the driver reports them


class CudaMemory:
    """torch.cuda's view of one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def allocated(self) -> int:
        return int(torch.cuda.memory_allocated(self.device))

    def peak_allocated(self) -> int:
        return int(torch.cuda.max_memory_allocated(self.device))

    def free_and_total(self) -> tuple[int, int]:
        free, total = torch.cuda.mem_get_info(self.device)
        return int(free), int(total)


@dataclass(frozen=True)
class BudgetReading:
    """What the profiling run saw and the budget it gives (bytes), for the run's summary."""

    total: int
    free_after_warmup: int
    activation_peak: int  # warm-up peak minus what stays allocated (weights)
    workspace: int
    utilisation: float
    kv_budget: int

    @property
    def non_kv(self) -> int:
        return (self.total - self.free_after_warmup) + self.activation_peak + self.workspace


def measure_kv_budget(warmup_forward, gpu_memory_utilization: float, mem: DeviceMemory,
                      workspace: int = WORKSPACE_BYTES) -> BudgetReading:
    """Run `warmup_forward()` (the largest batch through a scratch KV pool it frees before returning
    that pool's bytes), then size the KV budget from the driver's free memory."""
    mem.empty_cache()
    mem.reset_peak()
    scratch = warmup_forward()
    mem.synchronize()
    activation_peak = max(mem.peak_allocated() - mem.allocated() - scratch, 0)
    mem.empty_cache()  # cached activation blocks back to the driver: free memory then counts them as free
    free, total = mem.free_and_total()
    non_kv = (total - free) + activation_peak + workspace
    return BudgetReading(total, free, activation_peak, workspace, gpu_memory_utilization,
                         cuda_kv_budget_bytes(total, gpu_memory_utilization, non_kv))

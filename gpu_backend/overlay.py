"""Measured vs simulated: simulate what a measured run served, and the relative error per metric.

The GPU page and bench/gpu_suite.py both read these, so "error" means one thing everywhere:
(measured - simulated) / simulated, None where the simulated value is 0 or missing.
"""

from __future__ import annotations

import pandas as pd

from sim.trace import all_at_once

LATENCY_KEYS = ("ttft_s", "tpot_s", "e2e_s")
LATENCY_STATS = ("mean", "p50", "p90")
SCALAR_KEYS = ("throughput_tok_s", "mean_batch_size", "num_preemptions")
OVERLAY_COLUMNS = ("metric", "measured", "simulated", "error")


def simulate_like(measured, trace, offline: bool):
    """The simulator on the measured run's own scenario (its KV budget included) and trace; an
    offline run ignored arrival times, so the simulation does too."""
    from sim.run.engine import simulate

    return simulate(all_at_once(trace) if offline else trace, measured.scenario)


def relative_error(measured: float | None, simulated: float | None) -> float | None:
    if measured is None or simulated in (None, 0):
        return None
    return (measured - simulated) / simulated


def overlay_table(measured: dict, simulated: dict) -> pd.DataFrame:
    """One row per metric of two summaries: measured, simulated and the relative error."""
    rows = [(f"{key} {stat}", measured[key][stat], simulated[key][stat])
            for key in LATENCY_KEYS for stat in LATENCY_STATS]
    rows += [(key, measured[key], simulated[key]) for key in SCALAR_KEYS]
    rows.append(("peak KV usage", measured["kv_cache_usage_perc"]["peak"], simulated["kv_cache_usage_perc"]["peak"]))
    return pd.DataFrame([(name, m, s, relative_error(m, s)) for name, m, s in rows], columns=list(OVERLAY_COLUMNS))

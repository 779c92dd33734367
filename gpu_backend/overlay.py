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


def times_not_comparable(measured: dict, scenario) -> str | None:
    """Why the measured run's times cannot be set against its simulation (None: they can). A run
    measured on a CPU against the simulation's GPU roofline compared a tiny CPU model with an H100
    (+108,008%): times are compared only with a simulation of the same device, i.e. a calibration
    profile (fitted on the device that ran) or a run measured on a GPU the scenario names."""
    device = str(measured.get("device") or "")
    if scenario.profile or not device.startswith("cpu"):
        return None
    return (f"Measured on {device}, simulated on the {scenario.gpu} profile: step times of different devices, so "
            "times are not compared (memory is: same model, same KV pool). Fit a profile on this device "
            "(`python -m gpu_backend profile`) and set it in the scenario to compare times.")


TIME_FREE_KEYS = ("num_preemptions",)  # the scalars that do not depend on the device's speed


def overlay_table(measured: dict, simulated: dict, times: bool = True) -> pd.DataFrame:
    """One row per metric of two summaries: measured, simulated and the relative error; with
    times=False only the device-independent rows (preemptions, peak KV usage)."""
    rows = [(f"{key} {stat}", measured[key][stat], simulated[key][stat])
            for key in LATENCY_KEYS for stat in LATENCY_STATS] if times else []
    rows += [(key, measured[key], simulated[key]) for key in SCALAR_KEYS if times or key in TIME_FREE_KEYS]
    rows.append(("peak KV usage", measured["kv_cache_usage_perc"]["peak"], simulated["kv_cache_usage_perc"]["peak"]))
    return pd.DataFrame([(name, m, s, relative_error(m, s)) for name, m, s in rows], columns=list(OVERLAY_COLUMNS))

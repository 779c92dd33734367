"""View helpers of the GPU run page: the run's scenario, the live step chart, experiment figures.

Plain-word labels live here so the page stays a list of widgets and calls; no computation beyond
picking and renaming columns.
"""

from __future__ import annotations

import pandas as pd
import plotly.express as px

TINY_MODEL = "tiny-llama"  # the CPU stand-in: same code path, seconds instead of hours
LIVE_LABELS = {"t_end_s": "Time (s)", "blocks_in_use": "KV blocks in use", "batch_size": "Requests in the batch"}
PLAIN = {"prompt_tokens": "Prompt tokens", "batch": "Requests at once", "kv_heads": "KV heads",
         "requests": "Requests", "new_tokens": "New tokens in the step", "kind": "Step kind",
         "kv_bytes_measured": "KV bytes in use (measured)", "kv_bytes_formula": "KV bytes (formula)",
         "mean_batch": "Mean batch", "step_s": "Step time (s)"}


# overlay_table's metric keys -> (label with its unit, scale): the units the other pages use
OVERLAY_WORDS = {"ttft_s": ("TTFT (s)", 1.0), "tpot_s": ("TPOT (ms)", 1e3), "e2e_s": ("E2E (s)", 1.0),
                 "throughput_tok_s": ("throughput (tok/s)", 1.0), "mean_batch_size": ("running requests (avg)", 1.0),
                 "num_preemptions": ("preemptions", 1.0), "peak KV usage": ("peak KV usage (%)", 100.0)}


def overlay_display(table: pd.DataFrame) -> pd.DataFrame:
    """gpu_backend.overlay's table for people: plain metric names with units (TPOT in ms, as elsewhere),
    4 significant digits, the error in percent ("ttft_s p50" and an error of 3070.3 read as jargon)."""
    rows = []
    for r in table.itertuples():
        name = str(r.metric)  # "ttft_s p50", "throughput_tok_s" or "peak KV usage"
        key, stat = (name, "") if name in OVERLAY_WORDS or " " not in name else name.rsplit(" ", 1)
        label, scale = OVERLAY_WORDS.get(key, (name, 1.0))
        rows.append({"metric": label, "stat": stat, "measured": _sig(r.measured, scale),
                     "simulated": _sig(r.simulated, scale), "error": "n/a" if pd.isna(r.error) else f"{r.error:+,.1%}"})
    return pd.DataFrame(rows)


def _sig(value: float | None, scale: float) -> float | None:
    return None if value is None or pd.isna(value) else float(f"{float(value) * scale:.4g}")


MEASURED_BY = ("kvsim executor", "vLLM")  # who measures: kvsim's own executor or a real vLLM V1 engine


def source_label(result) -> str:
    """Who measured a run and where, e.g. "vLLM 0.32.0 on CPU" or "kvsim executor on cuda:0"."""
    s = result.summary
    where = "CPU" if str(s.get("device", "")).startswith("cpu") else str(s.get("device"))
    who = f"vLLM {s['vllm_version']}" if s.get("measured_by") == "vLLM" else "kvsim executor"
    return f"{who} on {where}"


def scenario_for_device(scenario, device: str, tiny: bool, vllm: bool = False):
    """The scenario the run serves: on CPU with `tiny`, the tiny test model (its own kv heads); for
    vLLM, what vLLM on CPU can serve (gpu_backend.vllm_engine.cpu_rules)."""
    if vllm:
        from gpu_backend.vllm_engine.cpu_rules import served_scenario

        return served_scenario(scenario, tiny)
    return scenario.replace(model=TINY_MODEL, kv_heads=None) if device == "cpu" and tiny else scenario


def live_frame(log: list[dict]) -> pd.DataFrame:
    """The executor's step records (named rows) -> the live chart's columns under plain labels."""
    df = pd.DataFrame(log, columns=list(LIVE_LABELS))
    return df.rename(columns=LIVE_LABELS)


def progress_text(log: list[dict]) -> str:
    blocks = log[-1]["blocks_in_use"] if log else 0
    return f"{len(log)} steps so far, {blocks} KV blocks in use"


def experiment_figure(experiment, df: pd.DataFrame):
    """The experiment's chart, or None when it has a single row (the table says it all)."""
    if len(df) < 2:
        return None
    df = df.rename(columns=PLAIN)
    x, y = PLAIN.get(experiment.x, experiment.x), [PLAIN.get(c, c) for c in experiment.y]
    if experiment.color:
        return px.scatter(df, x=x, y=y[0], color=PLAIN.get(experiment.color, experiment.color),
                          log_x=experiment.log_x, title=experiment.name)
    fig = px.line(df, x=x, y=y, markers=True, log_x=experiment.log_x, title=experiment.name)
    return fig.update_layout(yaxis_title=experiment.y_label, legend_title_text="")

"""Which searched configuration is best, and which are on the Pareto front.

best: with a target rate, the fewest dollars per hour to serve it (GPUs needed x price; GPUs
needed when a price is missing); without one, the lowest cost per million output tokens, else the
most tokens/s per GPU. Pareto: rows that meet the SLO somewhere (max rate > 0) and that no other
row beats on both tokens/s per GPU and tokens/s per user (aiconfigurator's two axes).
"""

from __future__ import annotations

from typing import Any


def _key(row: dict[str, Any], target_rate: float | None) -> tuple[float, float]:
    if target_rate is not None and row["gpus_for_target"] is not None:
        price = row["usd_per_gpu_hour"]
        return (row["gpus_for_target"] * price if price is not None else float(row["gpus_for_target"]),
                -row["tok_s_per_gpu"])
    cost = row["cost_per_mtok"]
    return (cost if cost is not None else float("inf"), -row["tok_s_per_gpu"])


def best_row(rows: list[dict[str, Any]], target_rate: float | None = None) -> dict[str, Any] | None:
    fit = [i for i, r in enumerate(rows) if r["max_rate_per_s"] > 0]
    if not fit:
        return None
    i = min(fit, key=lambda j: _key(rows[j], target_rate))
    return {"row": i, **{k: v for k, v in rows[i].items() if k != "scenario"}}


def pareto_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{row, tok_s_per_gpu, tok_s_per_user}] on the front, by tokens/s per user ascending."""
    pts = [(i, r["tok_s_per_gpu"], r["tok_s_per_user"]) for i, r in enumerate(rows)
           if r["max_rate_per_s"] > 0 and r["tok_s_per_user"] is not None]
    front = [(i, g, u) for i, g, u in pts
             if not any(g2 >= g and u2 >= u and (g2 > g or u2 > u) for _, g2, u2 in pts)]
    return [{"row": i, "tok_s_per_gpu": g, "tok_s_per_user": u} for i, g, u in sorted(front, key=lambda p: p[2])]

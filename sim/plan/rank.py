"""Which searched configuration is best, and which are on the Pareto front.

best: by one named criterion (CRITERIA; the answer says which): "cost" (the default) with a target
rate is the fewest dollars per hour to serve it (GPUs needed x price; GPUs needed when a price is
missing), without one the lowest cost per million output tokens, else the most tokens/s per GPU;
"gpus" the fewest GPUs for the target (without one: per request/s served); "rate" the most
requests/s per GPU. A row vLLM would refuse to start (`vllm_would_not_start`: its pool cannot hold
one request at max_model_len, sim/memory/vllm_startup_check.py) is never best. Pareto: rows that meet the SLO somewhere (max rate > 0) and that no other
row beats on both tokens/s per GPU and tokens/s per user (aiconfigurator's two axes).
"""

from __future__ import annotations

from typing import Any

CRITERIA = {"cost": "lowest $", "gpus": "fewest GPUs", "rate": "highest requests/s per GPU"}


def criterion_words(by: str, target_rate: float | None) -> str:
    """What "best" means, in words (the answer line names it)."""
    if by == "cost":
        return f"lowest $ per hour for {target_rate:g} requests/s" if target_rate else "lowest $ per million output tokens"
    if by == "gpus":
        return f"fewest GPUs for {target_rate:g} requests/s" if target_rate else "fewest GPUs per request/s"
    return "highest requests/s per GPU"


def _gpus(row: dict[str, Any]) -> int:
    return int(row.get("gpus") or 1)


def _by(row: dict[str, Any], target_rate: float | None, by: str) -> tuple[float, float]:
    if by == "gpus":
        need = row["gpus_for_target"] if target_rate is not None and row["gpus_for_target"] is not None \
            else _gpus(row) / row["max_rate_per_s"]
        return (float(need), -row["tok_s_per_gpu"])
    if by == "rate":
        return (-row["max_rate_per_s"] / _gpus(row), -row["tok_s_per_gpu"])
    return _key(row, target_rate)


def _key(row: dict[str, Any], target_rate: float | None) -> tuple[float, float]:
    if target_rate is not None and row["gpus_for_target"] is not None:
        price = row["usd_per_gpu_hour"]
        return (row["gpus_for_target"] * price if price is not None else float(row["gpus_for_target"]),
                -row["tok_s_per_gpu"])
    cost = row["cost_per_mtok"]
    return (cost if cost is not None else float("inf"), -row["tok_s_per_gpu"])


def best_row(rows: list[dict[str, Any]], target_rate: float | None = None, by: str = "cost") -> dict[str, Any] | None:
    """The best row by `by` (a CRITERIA key), with "criterion" saying what best meant."""
    if by not in CRITERIA:
        raise ValueError(f"best by {by!r}: choose one of {', '.join(CRITERIA)}")
    fit = [i for i, r in enumerate(rows) if r["max_rate_per_s"] > 0 and not r.get("vllm_would_not_start")]
    if not fit:  # a row vLLM would refuse to start is no answer, however fast it simulated
        return None
    i = min(fit, key=lambda j: _by(rows[j], target_rate, by))
    return {"row": i, "criterion": criterion_words(by, target_rate),
            **{k: v for k, v in rows[i].items() if k != "scenario"}}


def pareto_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{row, tok_s_per_gpu, tok_s_per_user}] on the front, by tokens/s per user ascending."""
    pts = [(i, r["tok_s_per_gpu"], r["tok_s_per_user"]) for i, r in enumerate(rows)
           if r["max_rate_per_s"] > 0 and r["tok_s_per_user"] is not None]
    front = [(i, g, u) for i, g, u in pts
             if not any(g2 >= g and u2 >= u and (g2 > g or u2 > u) for _, g2, u2 in pts)]
    return [{"row": i, "tok_s_per_gpu": g, "tok_s_per_user": u} for i, g, u in sorted(front, key=lambda p: p[2])]

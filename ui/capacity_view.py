"""Tables for the capacity page, assembled from sim.memory.capacity calls (no formula of its own).

Each model x GPU x KV dtype is a partial Scenario resolved once through sim.run.deployment.Sizing
(the model as it runs, the GPU, one GPU's memory budget); the tables read that one budget."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
import streamlit as st

from models.spec import load_spec
from sim.guard.text import public_error
from sim.memory.capacity import GiB, capacity_table, gpus_required, kv_groups_per_sequence
from sim.run.deployment import Sizing
from sim.scenario import Scenario
from ui.page_errors import INPUT_ERRORS

SEED_CONTEXTS = (2048, 8192, 32768, 131072)
CURVE_CONTEXTS = tuple(2**k for k in range(9, 18))  # 512 .. 131072
PER_TOKEN = "KV bytes per token (one GPU)"


def answer(need: pd.DataFrame, users: int, context: int) -> str:
    """The page's answer in one sentence, from the first GPUs-required row: sequences that fit at the
    user's context and the GPUs for that many users (the rows come from sim.memory.capacity)."""
    if need.empty:
        return ""
    row = need.iloc[0]
    tp, pp = int(row["tp"]), int(row.get("pp", 1))
    where = f"one {row['gpu']}" if tp == 1 else f"{tp} x {row['gpu']} (tensor parallel {tp})"
    if pp > 1:
        where = f"{tp * pp} x {row['gpu']} ({pp} pipeline stages" + (f" of tensor parallel {tp})" if tp > 1 else ")")
    per = int(row["sequences per replica"])
    head = f"{row['model']} on {where} at {context:,}-token context ({row['kv dtype']} KV): "
    if per < 1:
        return head + "not even one sequence fits; pick a larger GPU, more tensor parallelism or a shorter context."
    gpus = int(row["GPUs"])
    return (head + f"{per:,} concurrent sequence{'s' if per != 1 else ''}; {gpus:,} GPU{'s' if gpus != 1 else ''} "
            f"for {users:,} user{'s' if users != 1 else ''}.")


def seed_columns() -> dict[str, Any]:
    """Display headers for the seed-context columns ("at 8K" under the heading "Concurrent sequences that
    fit"): the full names made the table wider than the page and cut its last column off."""
    columns = {f"sequences at {c // 1024}K": st.column_config.NumberColumn(
        f"at {c // 1024}K", help=f"concurrent sequences of {c:,} tokens that fit", format="%d") for c in SEED_CONTEXTS}
    return {PER_TOKEN: st.column_config.NumberColumn(format="localized"), **columns}


def need_columns() -> dict[str, Any]:
    """Thousands separators on the GPUs-required table's counts (8,192 tokens, 5,000 users)."""
    return {c: st.column_config.NumberColumn(format="localized") for c in ("users", "context (tokens)", "GPUs")}


def planner_tables(models: Iterable[str], gpus: Iterable[str], kv_dtypes: Iterable[str], *, tp: int, gpu_mem_util: float,
                   weight_dtype: str, users: int, context: int,
                   pp: int = 1) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """(curves, seed-context table, GPUs-required table, one-line errors) for every model x GPU x KV dtype
    (`pp` > 1: one replica is that many pipeline stages, each figure its binding stage's GPU)."""
    curves, table, need, errors = [], [], [], []
    for m in models:
        for g in gpus:
            for d in kv_dtypes:
                label = f"{m} / {g} / {d}" + (f" / tp{tp}" if tp > 1 else "") + (f" / pp{pp}" if pp > 1 else "")
                try:
                    sizing = sizing_of(m, g, tp=tp, weight_dtype=weight_dtype, kv_dtype=d, gpu_mem_util=gpu_mem_util)
                    gpu, args = sizing.gpu, sizing.budget_args()
                    spec, budget, _ = sizing.pipeline_stage(pp)
                    rows = capacity_table(spec, gpu, sorted(set(CURVE_CONTEXTS) | set(SEED_CONTEXTS)), budget=budget,
                                          whole_model=sizing.spec, **args)["rows"]
                    plan = gpus_required(sizing.spec, gpu, users, context, budget=sizing.budget, pp=pp, **args)
                except INPUT_ERRORS as exc:
                    errors.append(f"{label}: {public_error(exc)}")
                    continue
                for r in rows:
                    if r["context"] in CURVE_CONTEXTS:
                        curves.append({"label": label, "context_tokens": r["context"], "max_concurrency": r["max_concurrent"]})
                seed = {r["context"]: r["max_concurrent"] for r in rows if r["context"] in SEED_CONTEXTS}
                per_tok = budget.kv_bytes_per_token  # not per-seq / context: with sliding or state
                # groups a sequence's KV is not proportional to its length
                table.append({"model": m, "gpu": g, "kv dtype": d, PER_TOKEN: per_tok,
                              "KV cache per GPU (GiB)": round(rows[0]["kv_budget_bytes"] / GiB, 2),
                              **{f"sequences at {c // 1024}K": seed[c] for c in SEED_CONTEXTS}})
                need.append({"model": m, "gpu": g, "kv dtype": d, "users": users, "context (tokens)": context,
                             "tp": plan.tp, "pp": plan.pp, "replicas": plan.replicas, "GPUs": plan.gpus,
                             "sequences per replica": plan.per_replica})
    return pd.DataFrame(curves), pd.DataFrame(table), pd.DataFrame(need), errors


def sizing_of(model: str, gpu: str, *, tp: int, weight_dtype: str, kv_dtype: str, gpu_mem_util: float) -> Sizing:
    """The page's knobs as a partial Scenario, resolved once (sim.run.deployment.Sizing)."""
    return Sizing.of(Scenario(model=model, gpu=gpu, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                              gpu_mem_util=gpu_mem_util))


def budget_parts(model: str, gpu: str, *, tp: int, gpu_mem_util: float, weight_dtype: str, kv_dtype: str,
                 pp: int = 1) -> dict[str, float]:
    """One GPU's HBM split into the planner's budget terms (bytes), for the pie."""
    sizing = sizing_of(model, gpu, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, gpu_mem_util=gpu_mem_util)
    _, b, _ = sizing.pipeline_stage(pp)
    return {
        "weights": b.weights_bytes, "activation peak": b.activation_peak_bytes,
        "runtime overhead": b.runtime_overhead_bytes, "KV fixed (scales)": b.kv_fixed_bytes,
        "KV cache": max(b.kv_budget_bytes, 0), "held back (1 - utilisation)": b.total_bytes - b.usable_bytes,
    }


def group_parts(model: str, gpu: str, context: int, *, tp: int, gpu_mem_util: float, weight_dtype: str, kv_dtype: str,
                pp: int = 1) -> dict[str, dict[str, int]]:
    """One sequence of `context` tokens per KV group (bytes per GPU), next to what the same layers
    would hold keeping every token: {label: {"kept": bytes, "all tokens": bytes}} (`pp` > 1: the
    layers of the pipeline stage that sets the pool on this GPU)."""
    spec = load_spec(model) if pp == 1 else sizing_of(
        model, gpu, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, gpu_mem_util=gpu_mem_util).pipeline_stage(pp)[0]
    kept = kv_groups_per_sequence(spec, context, kv_dtype, tp)
    return {g.label(): {"kept": kept[g.label()],
                        "all tokens": context * g.bytes_per_token(kv_dtype, tp) + g.state_bytes(tp)}
            for g in spec.groups}


def vllm_pool_view(model: str, gpu: str, *, tp: int, gpu_mem_util: float, weight_dtype: str, kv_dtype: str,
                   context: int, async_scheduling: bool | None = None, pp: int = 1) -> tuple[str, pd.DataFrame]:
    """(one sentence, the terms table) of the pool vLLM itself would size: num_gpu_blocks beside the
    budget pie, from sim.memory.vllm_profile (its default version's accounting; `async_scheduling`
    sets the start-up line's window count, None = vLLM's GPU default)."""
    from sim.memory.vllm_profile import add_vllm_pool, range_causes

    sizing = sizing_of(model, gpu, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype, gpu_mem_util=gpu_mem_util)
    spec, budget, _ = sizing.pipeline_stage(pp)
    table = capacity_table(spec, sizing.gpu, [context], budget=budget, whole_model=sizing.spec, **sizing.budget_args())
    add_vllm_pool(table, sizing.spec, sizing.gpu, async_scheduling=async_scheduling, pp=pp)
    a, row = table["assumptions"], table["rows"][0]
    v = a["vllm_memory"]
    if a["num_gpu_blocks"] is None:
        return f"vLLM's own pool is not modelled for this model: {v['skipped']}", pd.DataFrame()
    log = a["vllm_logged_max_concurrency"]
    sentence = (f"vLLM {v['vllm_version']} would size {a['num_gpu_blocks']:,} blocks of {v['layout']['block_size']} tokens "
                f"({v['available_kv_bytes'] / GiB:.2f} GiB): {row['vllm_max_concurrent']:,} sequences of {context:,} tokens "
                f"on a warm torch.compile cache; a start may get {a['num_gpu_blocks_range'][0]:,}-"
                f"{a['num_gpu_blocks_range'][1]:,} ({range_causes(v)}). "
                f"Its start-up log would say 'GPU KV cache size: {log['kv_cache_tokens']:,} tokens' and 'Maximum "
                f"concurrency for {log['max_model_len']:,} tokens per request: {log['concurrency']:.2f}x': "
                f"{log['why_it_differs']}")
    if not a["vllm_startup"]["starts"]:  # sim/memory/vllm_startup_check.py
        sentence += f" **{a['vllm_startup']['message']}**"
    terms = [("CUDA total x utilisation", v["requested_bytes"], v["cuda_total_source"]),
             ("weights", -v["weights_bytes"], v["sources"]["weights"]),
             ("profile-run peak", -v["transient_peak_bytes"], v["sources"]["forward_peak"]),
             ("sampler buffer", -v["sampler_buffer_bytes"], v["sources"]["sampler"]),
             ("non-torch memory", -v["non_torch_bytes"], v["sources"]["non_torch"]),
             ("CUDA graphs", -v["cudagraph_bytes"], v["sources"]["cudagraph"]),
             ("= KV pool", v["available_kv_bytes"], v["sources"]["num_gpu_blocks"])]
    return sentence, pd.DataFrame([{"term": t, "GiB": round(b / GiB, 2), "source": s} for t, b, s in terms])

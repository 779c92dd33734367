"""The Plan page's parts: the search form (bound to the URL), the Pareto chart, the table with what
binds, and the drill-down into one row's simulated run. The sweep itself runs in the server's
worker pool (ui.runner.run_search), like every simulation, so it never holds a page's thread.

The search itself is sim.plan.search (docs/PLAN.md); this file only turns widgets into its inputs
and its rows into a view. The workload is the trace picker's trace (shared with Simulate),
time-scaled by the search.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from models.gpus import list_gpus
from models.spec import list_catalog
from sim.core.routing.pd_split import every_split
from sim.guard.text import public_error
from sim.memory.capacity import TP_CHOICES
from sim.plan.config_search import ALWAYS_SHOWN, SearchOptions
from sim.plan.grid import expand
from sim.plan.prices import default_price
from sim.plan.rank import CRITERIA, best_row
from sim.plan.slo import SloError, parse_slo
from sim.plan.tier_grid import TIER_FIELDS, swept_tier_fields, tier_grid
from sim.plan.workload import Workload
from sim.report.plan_answer import answer_lines, interval_cell, plan_answer, rate_words
from sim.report.plan_charts import pareto_figure, row_label, varied_fields
from sim.report.served import BINDING_WORDS
from sim.report.snapshot import Snapshot
from sim.scenario import CHOICES, Scenario, ScenarioError
from sim.trace import Trace
from ui import bounded
from ui.defaults import DEFAULT_SCENARIO, PLAN_GPUS

BIND = "query-params"
DEFAULT_MODEL = DEFAULT_SCENARIO.model
DEFAULT_GPUS = PLAN_GPUS  # a 24 GB card where KV binds, and a 48 GB one where it does not
DEFAULT_KV_DTYPES = ("bf16", "fp8")
DEFAULT_SLO = (2.0, 0.1)  # ttft_p99, tpot_p99 seconds
MAX_AUTO_CONFIGS = 16  # larger sweeps wait for the button


def search_form() -> tuple[list[Scenario], SearchOptions] | None:
    """The grid and the SLO from the widgets (steps 2 and 3 of the page's path); None after a one-line error."""
    st.subheader("2. Model and GPUs")
    c1, c2, c3 = st.columns(3)
    catalog = list_catalog()
    for key, options in (("plan_model", catalog), ("plan_gpus", list_gpus()), ("plan_tp", TP_CHOICES),
                         ("plan_kv", CHOICES["kv_dtype"].names()), ("plan_alloc", CHOICES["allocator"].names())):
        bounded.choice(key, options)
    for key, hi in (("plan_target", 1e6), ("plan_ttft", 3600.0), ("plan_tpot", 60.0), ("plan_e2e", 36000.0),
                    ("plan_goodput", 1.0)):
        bounded.checked(key, 0.0, hi)
    model = plan_model(c1, catalog)
    if model is None:
        return None
    gpus = c2.multiselect("GPUs", list_gpus(), default=[g for g in DEFAULT_GPUS if g in list_gpus()],
                          key="plan_gpus", bind=BIND)
    tps = c3.multiselect("Tensor parallel", TP_CHOICES, default=[1], key="plan_tp", bind=BIND)
    c1, c2, c3 = st.columns(3)
    kv_dtypes = c1.multiselect("KV dtype", CHOICES["kv_dtype"].names(), default=list(DEFAULT_KV_DTYPES), key="plan_kv", bind=BIND)
    allocators = c2.multiselect("Allocator", CHOICES["allocator"].names(), default=["paged"], key="plan_alloc", bind=BIND)
    target = c3.number_input("Target rate (requests/s, 0 = none)", 0.0, 1e6, 0.0, key="plan_target", bind=BIND)
    st.subheader("3. Service-level objectives")
    c1, c2, c3, c4 = st.columns(4)
    ttft = c1.number_input("TTFT p99 (s)", 0.0, 3600.0, DEFAULT_SLO[0], step=0.1, key="plan_ttft", bind=BIND)
    tpot = c2.number_input("TPOT p99 (s, 0 = none)", 0.0, 60.0, DEFAULT_SLO[1], step=0.01, key="plan_tpot", bind=BIND)
    e2e = c3.number_input("E2E p99 (s, 0 = none)", 0.0, 36000.0, 0.0, key="plan_e2e", bind=BIND)
    goodput = c4.number_input("Goodput (0 = none)", 0.0, 1.0, 0.0, step=0.01, key="plan_goodput", bind=BIND)
    fleet = fleet_grid(st.columns(3))
    tier_texts = tier_inputs(st.columns(2))
    if not (gpus and tps and kv_dtypes and allocators and fleet["router"]):
        st.info("Pick at least one GPU, tensor-parallel size, KV dtype and allocator.")
        return None
    prices = price_editor(gpus)
    parts = [f"{name}={value:g}" for name, value in (("ttft_p99", ttft), ("tpot_p99", tpot), ("e2e_p99", e2e),
                                                     ("goodput", goodput)) if value > 0]
    try:
        slo = parse_slo(",".join(parts))
        tiers = tier_grid(tier_texts)
        configs = expand(DEFAULT_SCENARIO.replace(model=model), {"gpu": gpus, "tp": tps, "kv_dtype": kv_dtypes,
                                                                 "allocator": allocators, **fleet, **tiers})
    except (SloError, ScenarioError) as exc:
        st.error(public_error(exc))
        return None
    swept = tuple(k for k, v in (("allocator", allocators), ("router", fleet["router"]), ("pd", fleet["pd"]))
                  if len(v) > 1 and k not in ALWAYS_SHOWN) + swept_tier_fields(tiers)
    return configs, SearchOptions(slo, target_rate=target or None, prices=prices, shown=ALWAYS_SHOWN + swept)


def fleet_grid(cols: Any) -> dict[str, list[Any]]:
    """The fleet part of the grid (docs/FLEET.md): replicas per configuration, the routers to try,
    and, when asked, every prefill:decode split of the same replicas ("aggregated or disaggregated,
    in which ratio, with which router")."""
    bounded.checked("plan_replicas", 1, 64)
    bounded.choice("plan_router", CHOICES["router"].names())
    n = int(cols[0].number_input("Replicas per configuration", 1, 64, 1, key="plan_replicas", bind=BIND))
    routers = cols[1].multiselect("Router", CHOICES["router"].names(), default=["round-robin"], key="plan_router",
                                  bind=BIND)
    pd_splits = cols[2].checkbox("Also disaggregated P/D splits", False, key="plan_pd", bind=BIND,
                                 help="every P:D with P + D = replicas, next to the aggregated fleet")
    splits: list[Any] = [None] + (every_split(n) if pd_splits else [])
    return {"replicas": [n], "router": routers, "pd": splits}


def tier_inputs(cols: Any) -> dict[str, str]:
    """KV tier sizes to sweep (docs/TIERS.md): comma lists of GiB, priced as DRAM and NVMe beside the
    GPU-hour (sim/plan/tier_prices.py); sim/plan/tier_grid.py turns them into grid entries."""
    helps = {"cpu_tier_gib": "CPU DRAM below each replica's GPU pool, e.g. 0, 500, 1000 (0 = none)",
             "nvme_tier_gib": "local NVMe per node of 8 GPUs, e.g. 0, 4000 (0 = none)"}
    return {field: str(col.text_input(label, "0", key=f"plan_{field}", bind=BIND, max_chars=200, help=helps[field]))
            for col, (field, label) in zip(cols, TIER_FIELDS.items(), strict=True)}


MODEL_SOURCES = ("catalog", "upload config.json")


def plan_model(where: Any, catalog: list[str]) -> str | None:
    """The model: a catalog name, or an uploaded config.json (the session's, shared with Simulate)."""
    from ui.scenario_form import uploaded_model

    bounded.choice("plan_model_src", MODEL_SOURCES)
    if where.radio("Model from", MODEL_SOURCES, key="plan_model_src", horizontal=True, bind=BIND) == MODEL_SOURCES[0]:
        return str(where.selectbox("Model", catalog, index=catalog.index(DEFAULT_MODEL) if DEFAULT_MODEL in catalog else 0,
                                   key="plan_model", bind=BIND))
    model = uploaded_model(where, key="plan_model_file")
    if model is None:
        where.info("Upload a Hugging Face config.json (JSON only, 1 MB at most).")
    return model


def price_editor(gpus: list[str]) -> dict[str, float]:
    """USD per GPU-hour per chosen GPU: the defaults (docs/PLAN.md, with sources), editable."""
    with st.expander("GPU-hour prices (USD, editable)"):
        out = {}
        cols = st.columns(max(1, len(gpus)))
        for col, gpu in zip(cols, gpus, strict=True):
            known = default_price(gpu)
            value = col.number_input(gpu, 0.0, 1000.0, known.usd_per_gpu_hour if known else 0.0, step=0.05,
                                     key=f"plan_price_{gpu}", help=known.source if known else "no default price")
            if value > 0:
                out[gpu] = float(value)
        st.caption("0 = no price (no cost shown). Defaults are on-demand list prices; sources in docs/PLAN.md.")
    return out


def plan_table(plan: dict[str, Any]) -> pd.DataFrame:
    """One row per configuration. Columns with nothing to say (no target rate, no prices) are left out
    rather than shown as a column of "None"; the KV peak is a percentage like everywhere else."""
    rows, varied = plan["rows"], varied_fields(plan["rows"])
    table = pd.DataFrame([{
        "config": row_label(r, varied), "max req/s": r["max_rate_per_s"],
        "90% interval": interval_cell(r),  # with the method that made it (sim/plan/rate_interval.py)
        "tok/s per GPU": r["tok_s_per_gpu"],
        "tok/s per user": r.get("tok_s_per_user"), "GPUs for target": r.get("gpus_for_target"),
        "$ per M tokens": r.get("cost_per_mtok"), "tiers $ per GPU-h": r.get("tier_usd_per_gpu_hour"),
        "binds": r["binding"], "SLO met": r.get("slo_met_at_max"),
        "preemptions": r.get("num_preemptions"), "step times": r.get("step_time_source"),
        "peak KV usage %": None if r.get("kv_usage_peak") is None else 100 * float(r["kv_usage_peak"]),
    } for r in rows])
    empty = [c for c in ("GPUs for target", "$ per M tokens", "tiers $ per GPU-h", "90% interval") if table[c].isna().all()]
    return table.drop(columns=empty)


def best_line(plan: dict[str, Any]) -> str:
    """The answer in one sentence, in words: the SLO as limits, what binds as a resource."""
    rows, best = plan["rows"], plan["best"]
    r = rows[best["row"]]
    try:
        slo = parse_slo(str(plan["slo"])).words()
    except SloError:  # a snapshot's SLO this version cannot read: its own text
        slo = str(plan["slo"])
    cost = f", ${r['cost_per_mtok']:.3f} per million output tokens" if r.get("cost_per_mtok") else ""
    target = f"; {r['gpus_for_target']} GPUs serve {plan['target_rate']:g} req/s" if r.get("gpus_for_target") else ""
    binds = BINDING_WORDS.get(str(r["binding"]), str(r["binding"]))
    by = f" ({best['criterion']})" if best.get("criterion") else ""
    return (f"Best{by}: {row_label(r, varied_fields(rows))} serves {rate_words(r['max_rate_per_s'], r.get('max_rate_interval'))} under {slo} "
            f"({r['tok_s_per_gpu']:,.0f} output tok/s per GPU{cost}){target}. What binds: {binds}.")


def show_plan(plan: dict[str, Any], key: str = "plan") -> dict[str, Any]:
    """Answer line, the answer in full, Pareto chart and table (live and from a snapshot alike).
    Returns the plan with "best" by the criterion picked here (the drill-down and report follow it)."""
    rows = plan["rows"]
    by = st.radio("Best by", list(CRITERIA), format_func=lambda c: CRITERIA[c], horizontal=True, key=f"{key}-best-by")
    plan = {**plan, "best": best_row(rows, plan.get("target_rate"), by)}
    best = plan["best"]
    if best is None:
        st.warning(f"No configuration meets {plan['slo']} at any rate tried.")
    else:
        st.success(best_line(plan))
        answer = plan_answer(plan)
        if answer is not None:
            st.markdown("\n".join(f"- {line}" for line in answer_lines(answer)[1:]))
    if plan.get("cancelled"):
        st.warning(f"Stopped: {plan['completed']} of {plan['configs']} configurations finished.")
    refused = [(row_label(r, varied_fields(rows)), r["vllm_would_not_start"]) for r in rows if r.get("vllm_would_not_start")]
    if refused:  # simulated on kvsim's pool, but no answer (sim.plan.rank.best_row skips them)
        st.warning("Not candidates: " + " ".join(f"{label}: {why}" for label, why in refused), icon=":material/power_off:")
    if any(r["max_rate_per_s"] > 0 for r in rows):
        st.plotly_chart(pareto_figure(rows, plan.get("pareto", [])), key=f"{key}-pareto")
    st.dataframe(plan_table(plan), hide_index=True, key=f"{key}-table",
                 column_config={"max req/s": st.column_config.NumberColumn(format="%.3g"),
                                "tok/s per GPU": st.column_config.NumberColumn(format="%.0f"),
                                "tok/s per user": st.column_config.NumberColumn(format="%.1f"),
                                "$ per M tokens": st.column_config.NumberColumn(format="%.3f"),
                                "tiers $ per GPU-h": st.column_config.NumberColumn(format="%.4f"),
                                "peak KV usage %": st.column_config.NumberColumn(format="%.0f")})
    if plan.get("step_times"):
        st.caption(plan["step_times"])
    if any(r.get("capped") for r in rows):
        st.caption("Some rows met the SLO at every rate tried: the trace is too short to load them.")
    return plan


def pick_row(plan: dict[str, Any]) -> int | None:
    """The row to drill into (default: the best); None when no row met the SLO."""
    fit = [i for i, r in enumerate(plan["rows"]) if r["max_rate_per_s"] > 0 and r.get("level")]
    if not fit:
        return None
    varied = varied_fields(plan["rows"])
    best = plan["best"]["row"] if plan.get("best") else fit[0]
    return st.selectbox("Drill into", fit, index=fit.index(best) if best in fit else 0, key="plan_row",
                        format_func=lambda i: f"row {i}: {row_label(plan['rows'][i], varied)}")


def drill_down(trace: Trace, plan: dict[str, Any], index: int) -> Snapshot:
    """The chosen row's run at its largest passing rate (the trace time-scaled by its level)."""
    from ui.runner import run_scenario

    row = plan["rows"][index]
    scenario = Scenario.from_dict(row["scenario"])
    snap = run_scenario(Workload(trace=trace).at(row["level"]), scenario, "Simulating the chosen configuration")
    return snap.with_plan(plan)


# Scenario field -> the Simulate form's URL key, for the fields a Plan grid varies (the rest are the
# bundled default's on both pages); the load level travels as Simulate's load dial (Scenario.speedup).
SIMULATE_KEYS = {"model": "model", "gpu": "gpu", "tp": "tp", "kv_dtype": "kv_dtype", "allocator": "paging",
                 "cost_source": "cost_src"}  # the row's step-time source (the whole comparison's, sim.plan.one_source)


SIMULATE_TIER_KEYS = {"prefix_caching": "prefix", "cpu_tier_gib": "cpu_tier", "nvme_tier_gib": "nvme_tier"}


def simulate_query(row: dict[str, Any], current: dict[str, str]) -> dict[str, str] | None:
    """URL state that opens the Simulate page on this row's run (same trace picker state, the row's
    scenario, load x its level); None when the row has no passing level or the level is outside the
    load dial's range."""
    from sim.guard.limits import MAX_SPEEDUP, MIN_SPEEDUP

    level = row.get("level")
    if not level or not MIN_SPEEDUP <= level <= MAX_SPEEDUP:
        return None
    query = {k: v for k, v in current.items() if k.startswith("trace_")}
    query.update({key: str(row["scenario"][field]) for field, key in SIMULATE_KEYS.items()})
    scenario = row["scenario"]
    if any(scenario.get(field) for field in TIER_FIELDS):  # a tier row: its tiers and the prefix caching they need
        query.update({key: ("true" if scenario[field] else "false") if isinstance(scenario[field], bool)
                      else f"{scenario[field]:g}" for field, key in SIMULATE_TIER_KEYS.items()})
    query["load"] = f"{level:g}"
    return query


def open_on_simulate(query: dict[str, str]) -> None:
    """A link to the Simulate page in this tab (st.page_link keeps the session, so an uploaded trace
    stays; its server-side id in the URL reopens it after a reload too). Outside the app's navigation
    (a page run alone) a plain relative link does the same job."""
    from urllib.parse import urlencode

    from streamlit.errors import StreamlitAPIException

    label = "Open this run on the Simulate page (trace, scenario, step times and load in the URL)"
    try:
        st.page_link("app_pages/simulate.py", label=label, query_params=query, icon=":material/play_circle:")
    except StreamlitAPIException:
        st.markdown(f'<a href="simulate?{urlencode(query)}" target="_self">{label}</a>', unsafe_allow_html=True)


def workload_line(trace: Trace) -> str:
    """The workload in one line, shown under the picker: what the search replays and at what rate."""
    n = len(trace)
    arrivals = trace.df["arrival_s"]
    span = float(arrivals.iloc[-1] - arrivals.iloc[0]) if n > 1 else 0.0
    rate = f", {n / span:.2f} requests/s on average over {span:,.0f} s" if span > 0 else ", all at once"
    return (f"Workload: {trace.source}: {n:,} requests{rate}; mean prompt {trace.df['input_tokens'].mean():,.0f} "
            f"and output {trace.df['output_tokens'].mean():,.0f} tokens. The search replays it faster or slower "
            "(the load factor) to find each configuration's largest rate.")


LAST_SEARCH = "plan_last_search"  # session_state: the inputs of the search this session last ran


def search_may_start(trace: Trace, configs: list[Scenario], options: SearchOptions) -> bool:
    """Whether the search may run now: the page's first search runs at once, and so does any answer the
    server already holds; after inputs change, an uncached search (up to a minute of CPU) waits for Run,
    so each widget touched on the way to the intended inputs does not start one."""
    from ui.runner import search_known
    from ui.server.pool import search_key

    key = search_key(trace, configs, options)
    last = st.session_state.get(LAST_SEARCH)
    if last is None or last == key or search_known(trace, configs, options) or \
            st.button(f"Run the search ({len(configs)} configurations)", key="plan_run", type="primary"):
        st.session_state[LAST_SEARCH] = key
        return True
    st.info("Inputs changed: press Run to search with them (answers already computed show at once).")
    return False

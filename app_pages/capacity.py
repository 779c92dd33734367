"""Capacity planner page: how many concurrent sequences fit, and how many GPUs N users need."""

import streamlit as st

from models.gpus import list_gpus
from models.kv_dtypes import KV_DTYPES
from models.spec import list_catalog
from models.weight_dtypes import WEIGHT_DTYPES
from sim.memory.capacity import PP_CHOICES, TP_CHOICES
from sim.report import charts
from ui import bounded
from ui.capacity_view import (
    answer,
    budget_parts,
    group_parts,
    need_columns,
    planner_tables,
    seed_columns,
    vllm_pool_view,
)
from ui.defaults import DEFAULT_SCENARIO
from ui.glossary import show_glossary
from ui.page_errors import stop_on_error
from ui.scenario_form import ASYNC, uploaded_model

BIND = "query-params"

st.title("Capacity planner")
st.caption("vLLM-like budget: total x utilisation - weights - activation peak - runtime overhead = KV "
           "(docs/CAPACITY.md). One replica's TP group per row.")
with st.sidebar:
    st.header("Planner")
    for key, options in (("cap_models", list_catalog()), ("cap_gpus", list_gpus()), ("cap_kv", KV_DTYPES.names()),
                         ("cap_w", WEIGHT_DTYPES.names()), ("cap_tp", TP_CHOICES), ("cap_pp", PP_CHOICES)):
        bounded.choice(key, options)
    # The dashboard's one default scenario (ui/defaults.py), as on Plan and Simulate.
    models = st.multiselect("Models", list_catalog(), default=[DEFAULT_SCENARIO.model], key="cap_models", bind=BIND)
    with st.expander("Add your own config.json"):
        uploaded = uploaded_model(st, key="cap_model_file")  # the session's upload, shared with Plan and Simulate
    models = models + [uploaded] if uploaded else models
    gpus = st.multiselect("GPUs", list_gpus(), default=[DEFAULT_SCENARIO.gpu], key="cap_gpus", bind=BIND)
    kv_dtypes = st.multiselect("KV dtypes", KV_DTYPES.names(), default=[DEFAULT_SCENARIO.kv_dtype], key="cap_kv", bind=BIND)
    weight_dtype = st.selectbox("Weights", WEIGHT_DTYPES.names(), index=WEIGHT_DTYPES.names().index(DEFAULT_SCENARIO.weight_dtype),
                                key="cap_w", bind=BIND)
    tp = st.selectbox("Tensor parallel", TP_CHOICES, key="cap_tp", bind=BIND)
    pp = int(st.selectbox("Pipeline stages", PP_CHOICES, key="cap_pp", bind=BIND,
                          help="pipeline parallelism: each stage a TP group holding its share of the layers; every "
                               "stage keeps as many KV blocks as the fullest one (memory only: the simulator has no "
                               "pipeline)"))
    util = bounded.number(st, "GPU memory utilisation", 0.5, 1.0, 0.9, step=0.01, key="cap_util", slider=True)
    bounded.choice("cap_async", list(ASYNC))
    async_scheduling = ASYNC[st.selectbox("Async scheduling", list(ASYNC), key="cap_async", bind=BIND,
                                          help="vLLM's: sets how many batches' tokens a sliding-window layer "
                                               "counts in the start-up 'Maximum concurrency' line below")]
    st.subheader("GPUs required")
    users = bounded.number(st, "Concurrent users", 1, 10_000_000, 100, key="cap_users")
    context = bounded.number(st, "Tokens per user (context)", 1, 1 << 21, 8192, step=1024, key="cap_ctx")

bounded.show_link_problems()
if not (models and gpus and kv_dtypes):
    st.info("Pick at least one model, one GPU and one KV dtype.")
    st.stop()

curves, table, need, errors = planner_tables(models, gpus, kv_dtypes, tp=int(tp), gpu_mem_util=float(util),
                                             weight_dtype=weight_dtype, users=int(users), context=int(context), pp=pp)
for err in errors:
    st.error(err)
if table.empty:
    st.stop()

sentence = answer(need, int(users), int(context))
if sentence:
    st.markdown(f"### {sentence}")
st.caption("A sequence is one request's context in the KV cache; a user holds one sequence at a time, so "
           "N users need N concurrent sequences at their context.")
show_glossary(kv_parts=False, terms=True)

st.subheader(f"GPUs for {int(users):,} users at {int(context):,} tokens")
st.dataframe(need, hide_index=True, key="cap-need", column_config=need_columns())
st.subheader("Concurrent sequences that fit, by context length")
st.dataframe(table, hide_index=True, key="cap-table", column_config=seed_columns())  # short headers: no cut-off column
st.plotly_chart(charts.concurrency_curves(curves, int(context)), key="cap-curves")

st.subheader("Memory budget of one GPU")
first = table.iloc[0]
with stop_on_error():
    parts = budget_parts(first["model"], first["gpu"], tp=int(tp), gpu_mem_util=float(util),
                         weight_dtype=weight_dtype, kv_dtype=first["kv dtype"], pp=pp)
stage = f", the pipeline stage that sets the pool, of {pp}" if pp > 1 else ""
st.plotly_chart(charts.budget_pie(parts, f"{first['model']} on {first['gpu']} ({first['kv dtype']} KV{stage})"), key="cap-pie")
pool_sentence, pool_terms = vllm_pool_view(first["model"], first["gpu"], tp=int(tp), gpu_mem_util=float(util),
                                           weight_dtype=weight_dtype, kv_dtype=first["kv dtype"], context=int(context),
                                           async_scheduling=async_scheduling, pp=pp)
st.markdown("**vLLM's own pool (num_gpu_blocks)**: " + pool_sentence)
if not pool_terms.empty:
    st.dataframe(pool_terms, hide_index=True, key="cap-vllm-pool")

st.subheader(f"KV layer groups of one {int(context):,}-token sequence")
st.caption("Sliding-window and chunked layers keep a bounded window, MLA one latent per token (not split "
           "over TP), linear-attention layers a fixed state (docs/CAPACITY.md, KV groups).")
groups = group_parts(first["model"], first["gpu"], int(context), tp=int(tp), gpu_mem_util=float(util),
                     weight_dtype=weight_dtype, kv_dtype=first["kv dtype"], pp=pp)
st.plotly_chart(charts.kv_groups_bar(groups, f"{first['model']} ({first['kv dtype']} KV, per GPU at tp={int(tp)}"
                                             + (f", one of {pp} pipeline stages)" if pp > 1 else ")")),
                key="cap-groups")

"""The scenario sidebar: every knob of sim.scenario.Scenario as a widget bound to the URL.

Widget keys are the URL parameter names, short and stable (they appear in shared links). A value
equal to the Scenario default is left out of the URL by Streamlit, so links stay short.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from models.gpus import list_gpus
from models.spec import MAX_CONFIG_BYTES, SpecError, list_catalog, load_spec
from sim.guard.limits import MAX_SPEEDUP, MIN_SPEEDUP
from sim.guard.text import plain, public_error
from sim.guard.uploads import store_config
from sim.memory.capacity import TP_CHOICES
from sim.scenario import CHOICES, Scenario, ScenarioError
from ui import bounded, fitted_profile
from ui.defaults import DEFAULT_SCENARIO

DEFAULT = DEFAULT_SCENARIO  # the bundled default (ui/defaults.py): one where KV memory binds
ATTENTION = ("native", "MHA", "MQA", "custom")
BIND = "query-params"
PROBLEM_KEY = "scenario_problem"  # session_state: why the last scenario_sidebar() returned None
FIELD_KEYS = {"max_model_len": "max_len", "speedup": "load"}  # Scenario field -> widget key, for fixes
# prefix_cache_retention_interval's two settings on the form (the CLI also takes an interval N > 0)
RETENTION = {"where a request may resume (vLLM's default)": 0, "every block": None}
# async_scheduling's settings (the CLI's --async-scheduling / --no-async-scheduling; unset: vLLM's)
ASYNC = {"vLLM's default (on for a GPU)": None, "on": True, "off": False}


def apply_changes(changes: dict[str, Any]) -> None:
    """Set the widgets behind these Scenario fields (a button's on_click: runs before the next rerun)."""
    for name, value in changes.items():
        if name in FIELD_KEYS:
            st.session_state[FIELD_KEYS[name]] = value


def _index(options, value) -> int:
    options = list(options)
    return options.index(value) if value in options else 0


def _has_image_encoder(model: str) -> bool:
    """Whether the model is a multimodal checkpoint with an image encoder kvsim counts (the text-only toggle)."""
    try:
        return load_spec(model).vision is not None
    except SpecError:
        return False  # the form reports a bad model where it loads it


def _help(field: str) -> str:
    """Form help from the registry's descriptions: 'name: what it does' per option."""
    registry = CHOICES[field]
    return "; ".join(f"{name}: {registry.describe(name)}" for name in registry)


def _choice(where, label: str, field: str, *, key: str) -> str:
    """A selectbox over the registry of a Scenario field (its live names), the default preselected."""
    names = CHOICES[field].names()
    bounded.choice(key, names)
    return where.selectbox(label, names, index=_index(names, getattr(DEFAULT, field)), key=key, bind=BIND,
                           help=_help(field))


SERVING = ("aggregated", "disaggregated P/D")
MODEL_PATH = "model_path"  # session_state: the uploaded config.json's kept path


def _kv_weight(sb: Any, out: dict[str, Any]) -> None:
    """The KV-aware weight w, shown when a chosen router's registry entry reads it (kv_weighted)."""
    out["router_kv_weight"] = float(bounded.number(sb, "KV-aware weight w", 0.0, 1000.0, DEFAULT.router_kv_weight,
                                                   step=0.5, key="kv_w"))


def _fleet_fields(sb: Any) -> dict[str, Any]:
    """The fleet knobs (docs/FLEET.md): the router, and a prefill/decode split when disaggregated."""
    sb.subheader("Fleet")
    out: dict[str, Any] = {"router": _choice(sb, "Router", "router", key="router")}
    if CHOICES["router"].lookup(out["router"]).kv_weighted:
        _kv_weight(sb, out)
    bounded.choice("serving", SERVING)
    if sb.radio("Serving", SERVING, key="serving", horizontal=True, bind=BIND) == SERVING[1]:
        c1, c2 = sb.columns(2)
        n_p = bounded.number(c1, "Prefill replicas", 1, 64, 1, key="pd_p")
        n_d = bounded.number(c2, "Decode replicas", 1, 64, 1, key="pd_d")
        bounded.choice("tp_p", TP_CHOICES)
        bounded.choice("tp_d", TP_CHOICES)
        out["prefill_tp"] = c1.selectbox("Prefill TP", TP_CHOICES, key="tp_p", bind=BIND)
        out["decode_tp"] = c2.selectbox("Decode TP", TP_CHOICES, key="tp_d", bind=BIND)
        out["pd"] = f"{int(n_p)}:{int(n_d)}"
        out["kv_link"] = _choice(sb, "KV link", "kv_link", key="kv_link")
        out["decode_router"] = _choice(sb, "Decode router", "decode_router", key="decode_router")
        if CHOICES["decode_router"].lookup(out["decode_router"]).kv_weighted and "router_kv_weight" not in out:
            _kv_weight(sb, out)
        out["kv_layer_pipelined"] = sb.checkbox("Layer-pipelined KV send", False, key="kv_pipe", bind=BIND)
    return out


def _tier_widgets(sb: Any) -> dict[str, Any]:
    """KV tiers below the GPU pool (docs/TIERS.md): they reuse prefix-cached blocks, so they show
    with prefix caching on. 0 GiB = no such tier."""
    cpu = bounded.number(sb, "CPU DRAM KV tier per replica (GiB)", 0.0, 65_536.0, 0.0, step=50.0, key="cpu_tier",
                         help="blocks stored in host memory and loaded back over PCIe before a prefill")
    nvme = bounded.number(sb, "NVMe KV tier per node (GiB)", 0.0, 1_048_576.0, 0.0, step=500.0, key="nvme_tier")
    out: dict[str, Any] = {"cpu_tier_gib": float(cpu), "nvme_tier_gib": float(nvme)}
    if cpu or nvme:
        out["tier_policy"] = _choice(sb, "Tier policy", "tier_policy", key="tier_policy")
    if cpu:
        out["cpu_tier_scope"] = _choice(sb, "CPU tier shared by", "cpu_tier_scope", key="cpu_tier_scope")
    return out


def uploaded_model(where: Any = None, key: str = "model_file") -> str | None:
    """A user's config.json: checked by sim.guard.uploads before it is kept (outside the checkout). The
    kept path is the session's (MODEL_PATH), so Simulate, Compare, Plan and Capacity share one upload."""
    where = where if where is not None else st.sidebar
    up = where.file_uploader("config.json", type=["json"], key=key, max_upload_size=MAX_CONFIG_BYTES >> 20)
    if up is None:
        return st.session_state.get(MODEL_PATH)
    try:
        path, spec = store_config(up.getvalue(), up.name)
    except SpecError as exc:
        where.error(public_error(exc))
        return None
    st.session_state[MODEL_PATH] = str(path)
    where.caption(f"{plain(up.name)}: {plain(spec.family)}, {spec.num_layers} layers, {spec.num_kv_heads} kv heads")
    return str(path)


def scenario_sidebar(title: str = "Scenario") -> Scenario | None:
    """Draw the scenario form in the sidebar; the Scenario, or None after showing a one-line error."""
    sb = st.sidebar
    sb.header(title)
    st.session_state.pop(PROBLEM_KEY, None)
    speedup = bounded.number(
        sb, "Load x K (the trace's request rate times K)", MIN_SPEEDUP, MAX_SPEEDUP, DEFAULT.speedup,
        step=0.5, format="%g", key="load",
        help="Replays the trace K times faster: every arrival time is divided by K (2 = twice the request rate). "
             "Lengths are untouched. The way to put pressure on a configuration with a light trace.")
    bounded.choice("model_src", ("catalog", "upload config.json"))
    model_src = sb.radio("Model", ("catalog", "upload config.json"), key="model_src", horizontal=True, bind=BIND)
    if model_src == "catalog":
        catalog = list_catalog()
        bounded.choice("model", catalog)
        model = sb.selectbox("Catalog model", catalog, index=_index(catalog, DEFAULT.model), key="model", bind=BIND)
    else:
        model = uploaded_model()
        if model is None:
            sb.info("Upload a Hugging Face config.json (JSON only, 1 MB at most).")
            return None
    gpus = list_gpus()
    bounded.choice("gpu", gpus)
    gpu = sb.selectbox("GPU", gpus, index=_index(gpus, DEFAULT.gpu), key="gpu", bind=BIND)
    c1, c2 = sb.columns(2)
    bounded.choice("tp", TP_CHOICES)
    tp = c1.selectbox("Tensor parallel", TP_CHOICES, key="tp", bind=BIND)
    replicas = bounded.number(c2, "Replicas", 1, 64, DEFAULT.replicas, key="replicas")
    weight_dtype = _choice(c1, "Weights", "weight_dtype", key="wdtype")
    kv_dtype = _choice(c2, "KV dtype", "kv_dtype", key="kv_dtype")

    sb.subheader("Attention")
    bounded.choice("attn", ATTENTION)
    attention = sb.radio("KV heads", ATTENTION, key="attn", horizontal=True, bind=BIND,
                         help="native = the model's own GQA; MHA = one kv head per query head; MQA = one kv head")
    kv_heads = None
    if attention != "native":
        try:
            heads = load_spec(model).num_attention_heads
        except SpecError as exc:
            sb.error(public_error(exc))
            return None
        if attention == "MHA":
            kv_heads = heads
        elif attention == "MQA":
            kv_heads = 1
        else:
            kv_heads = int(sb.number_input("kv heads", 1, heads, min(8, heads), key="kv_heads", bind=BIND))

    sb.subheader("KV budget")
    bounded.choice("budget", ("derived from the GPU", "explicit GiB"))
    budget_mode = sb.radio("Budget", ("derived from the GPU", "explicit GiB"), key="budget", horizontal=True, bind=BIND)
    kv_budget_gib, mem_util, kv_pool = None, DEFAULT.gpu_mem_util, DEFAULT.kv_pool
    if budget_mode == "explicit GiB":
        kv_budget_gib = float(bounded.number(sb, "KV budget per replica (GiB)", 0.1, 10_000.0, 20.0, step=1.0,
                                             key="kv_gib"))
    else:
        mem_util = bounded.number(sb, "GPU memory utilisation", 0.50, 1.00, DEFAULT.gpu_mem_util, step=0.01,
                                  key="mem_util", slider=True)
        kv_pool = _choice(sb, "Pool sized by", "kv_pool", key="kv_pool")
    text_only = DEFAULT.language_model_only
    if _has_image_encoder(model):
        text_only = sb.checkbox("Text only: image encoder not loaded", DEFAULT.language_model_only, key="text_only",
                                bind=BIND, help="vLLM's --language-model-only: this multimodal checkpoint's image "
                                                "encoder and projector stay off the GPU (models/vision.py)")

    sb.subheader("KV layout")
    bounded.choice("paging", CHOICES["allocator"].names())
    paging = sb.radio("Allocator", CHOICES["allocator"].names(), key="paging", horizontal=True, bind=BIND,
                      help=_help("allocator"))
    block_size, reserve, placement = DEFAULT.block_size, DEFAULT.reserve, DEFAULT.placement
    if not CHOICES["allocator"].lookup(paging).reserves_up_front:
        bounded.choice("block", (1, 8, 16, 32, 64, 128, 256))
        block_size = sb.selectbox("Block size (tokens)", (1, 8, 16, 32, 64, 128, 256), index=2, key="block", bind=BIND)
    else:
        reserve = _choice(sb, "Reserve policy", "reserve", key="reserve")
        placement = _choice(sb, "Placement", "placement", key="placement")
    prefix = sb.checkbox("Prefix caching", DEFAULT.prefix_caching, key="prefix", bind=BIND)
    retention = DEFAULT.prefix_cache_retention_interval
    if prefix:
        bounded.choice("retention", list(RETENTION))
        retention = RETENTION[sb.selectbox(
            "Sliding-window / state blocks cached", list(RETENTION), key="retention", bind=BIND,
            help="vLLM's prefix_cache_retention_interval: 0 keeps only the window before each point a later "
                 "request may resume at, none keeps every block (docs/TIERS.md)")]
    tiers = _tier_widgets(sb) if prefix else {}

    sb.subheader("Scheduler")
    chunked = sb.checkbox("Chunked prefill", DEFAULT.chunked_prefill, key="chunked", bind=BIND)
    bounded.choice("async", list(ASYNC))
    async_scheduling = ASYNC[sb.selectbox(
        "Async scheduling", list(ASYNC), index=list(ASYNC.values()).index(DEFAULT.async_scheduling), key="async",
        bind=BIND, help="vLLM's --async-scheduling: two batches in flight, so a sliding-window or chunked layer "
                        "group is admitted with 2 x max_batched_tokens of headroom (1 x when off); kvsim's steps "
                        "stay synchronous (docs/TIERS.md)")]
    preemption = _choice(sb, "Preemption", "preemption", key="preempt")
    max_seqs = bounded.number(sb, "max_num_seqs", 1, 4096, DEFAULT.max_num_seqs, key="max_seqs")
    max_tokens = bounded.number(sb, "max_batched_tokens", 16, 1 << 20, DEFAULT.max_batched_tokens, step=512,
                                key="max_tokens")
    max_len = bounded.number(sb, "max_model_len, tokens (0 = the model's context, capped at 32,768)", 0, 1 << 21, 0,
                             step=1024, key="max_len")
    cost_source = _choice(sb, "Step times", "cost_source", key="cost_src")  # in the URL: a Plan row opens on its own source
    fleet = _fleet_fields(sb)
    profile = fitted_profile.sidebar(sb)  # a profile fitted on the Validate page, when the visitor has one
    try:
        return Scenario(
            model=model, gpu=gpu, tp=int(tp), replicas=int(replicas), weight_dtype=weight_dtype, kv_dtype=kv_dtype,
            kv_heads=kv_heads, kv_budget_gib=kv_budget_gib, kv_pool=kv_pool, gpu_mem_util=float(mem_util), allocator=paging,
            block_size=int(block_size), reserve=reserve, placement=placement, prefix_caching=bool(prefix),
            prefix_cache_retention_interval=retention, language_model_only=bool(text_only),
            max_num_seqs=int(max_seqs), max_batched_tokens=int(max_tokens), max_model_len=int(max_len) or None,
            chunked_prefill=bool(chunked), async_scheduling=async_scheduling, preemption=preemption, speedup=float(speedup), cost_source=cost_source,
            profile=profile, **fleet, **tiers,
        )
    except ScenarioError as exc:
        sb.error(public_error(exc))
        st.session_state[PROBLEM_KEY] = public_error(exc)
        return None

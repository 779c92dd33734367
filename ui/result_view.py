"""One result on screen: headline metrics, the charts, and the sharing buttons.

Live runs and reopened snapshots both come here as a Snapshot, so a shared link shows exactly
what its author saw (same downsampled frames, same numbers).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import streamlit as st

from sim.guard.text import plain, public_error
from sim.report import charts, tier_charts
from sim.report.html_report import headline_metrics, html_report, kv_pool_line, weights_bytes
from sim.report.interval_words import interval_line, log_bounds
from sim.report.served import context_warning, latency_basis, load_verdict, not_served, rejection_fix
from sim.report.snapshot import Snapshot, SnapshotError, snapshot_link
from sim.report.snapshot_store import open_store
from ui.fleet_view import show_fleet
from ui.glossary import show_glossary


def run_caption(sc: Any, source: str, requests: int) -> str:
    """What ran, in one line above the result: the trace (and its load), the model, GPU and the choices
    that change the answer. Digests are for reproducing, so they go below (reproduce_line)."""
    load = f", replayed at {sc.speedup:g}x its rate" if sc.speedup != 1 else ""
    limit = f", max_model_len {sc.max_model_len:,}" if sc.max_model_len else ""
    return public_error(f"Trace {plain(source)} ({requests:,} requests{load}); {sc.model} on {sc.gpu} x tp{sc.tp}, "
                        f"{sc.allocator}, KV {sc.kv_dtype}{limit}")


def reproduce_line(trace_digest: str, sc: Any) -> str:
    return f"To reproduce: trace digest {trace_digest}; scenario {sc.digest()}"


def show_verdicts(snap: Snapshot, apply_fix: Callable[[dict[str, Any]], None] | None = None, key: str = "res") -> None:
    """Above the numbers: overload as an error, rejected or unfinished requests as a warning with the fix
    (a button when `apply_fix` can set the scenario's widgets, on live runs)."""
    summary = snap.summary
    verdict = load_verdict(summary)
    if verdict:
        st.warning(verdict, icon=":material/warning:")
    beyond = context_warning(summary)
    if beyond:
        st.warning(beyond, icon=":material/straighten:")
    startup = summary.get("vllm_startup") or {}
    if startup.get("starts") is False:  # kvsim's pool ran it; vLLM's would refuse (sim/memory/vllm_startup_check.py)
        st.warning(f"{startup['message']} (kvsim's own pool served this run.)", icon=":material/power_off:")
    line, fix = not_served(summary), rejection_fix(summary)
    if fix is not None:
        st.warning(f"{line} {fix.text}", icon=":material/block:")
        if fix.changes and apply_fix is not None:
            label = ", ".join(f"{k} = {v:,}" if isinstance(v, int) else f"{k} = {v}" for k, v in fix.changes.items())
            st.button(f"Apply: {label}", key=f"{key}-fix", on_click=apply_fix, args=(fix.changes,), type="primary")
    elif summary.get("rejected") or summary.get("unfinished"):
        st.info(line)


def show_metrics(snap: Snapshot) -> None:
    rows = headline_metrics(snap.summary)
    for start in range(0, len(rows), 4):
        cols = st.columns(4)
        for col, (label, value) in zip(cols, rows[start:start + 4], strict=False):
            col.metric(label, value)
    st.caption(latency_basis(snap.summary))
    intervals = interval_line(snap.summary)
    if intervals:
        st.caption(intervals)
    pool = kv_pool_line(snap.summary, snap.scenario.allocator, snap.scenario.kv_dtype, snap.scenario.tp)
    if pool:
        st.caption(pool)
    st.caption(step_time_line(snap.summary))


def step_time_line(summary: dict) -> str:
    """Which step-time source timed this run (summary `cost_model`, docs/CALIBRATION.md)."""
    cm = summary.get("cost_model")
    if isinstance(cm, dict):
        detail = f" ({cm['detail']})" if cm.get("detail") else ""
        return f"Step times: {cm.get('source', 'unknown')}{detail}" + "".join(f"; {w}" for w in cm.get("warnings", []))
    return f"Step times: {cm or 'unknown'}"  # snapshots written before the source was an object


ONE_GROUP_LINE = ("One KV layer group (every layer keeps the same kind of KV): the memory chart above is "
                  "its whole pool; models with sliding, chunked or state layers get a chart per group.")


def show_charts(snap: Snapshot, key: str = "res") -> None:
    st.plotly_chart(charts.memory_timeline(snap.steps, weights_bytes(snap)), key=f"{key}-mem")
    groups = snap.summary.get("kv_group_breakdown_mean")
    if groups:  # models with several KV groups (sliding, chunked, state): the pool per group
        mean, cap = snap.summary.get("kv_breakdown_mean", {}), float(snap.summary.get("kv_capacity_bytes", 0))
        free, external = float(mean.get("free", 0)) * cap, float(mean.get("external_frag", 0)) * cap
        st.plotly_chart(charts.kv_group_breakdown(groups, free, external), key=f"{key}-groups")
    elif groups is not None:  # ({} = one group; None = a snapshot saved before the key existed)
        st.caption(ONE_GROUP_LINE)
    tiers = tier_charts.tier_occupancy(snap.summary, snap.steps)
    if tiers is not None:  # runs with KV tiers below the GPU pool (docs/TIERS.md)
        st.plotly_chart(tiers, key=f"{key}-tiers")
    show_glossary()
    left, right = st.columns(2)
    left.plotly_chart(charts.queue_and_batch(snap.steps), key=f"{key}-queue")
    right.plotly_chart(charts.kv_usage(snap.steps), key=f"{key}-usage")
    st.plotly_chart(charts.latency_cdfs(snap.requests, log_bounds(snap.summary)), key=f"{key}-cdf")
    if snap.summary.get("num_preemptions"):
        st.plotly_chart(charts.preemptions(snap.steps), key=f"{key}-preempt")
    else:  # a flat line says less than a sentence
        st.caption("No preemptions: the KV pool never ran out during this run.")
    show_fleet(snap.summary, key)


MINE_KEY = "my_snapshots"  # session_state: {snapshot id: manage secret} of what this browser session saved


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "kvsim"


PUBLIC_URL_ENV = "KVSIM_PUBLIC_URL"  # e.g. https://kvsim.example.com/tools: the address colleagues use


def public_link(public: str, page_url: str | None, snap_id: str, base_url_path: str = "") -> str:
    """The share link: from the configured public base URL when it is an http(s) address (a proxy or a
    tunnel hides the address the browser used), else from the page's own URL as before."""
    parts = urlsplit(public.strip())
    if parts.scheme in ("http", "https") and parts.netloc:
        return snapshot_link(public.strip(), snap_id, parts.path)
    return snapshot_link(page_url, snap_id, base_url_path)


LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def loopback_note(link: str) -> str | None:
    """A word under a link colleagues cannot open: one on this machine's loopback address."""
    host = (urlsplit(link).hostname or "").lower()
    if host not in LOOPBACK_HOSTS and not host.startswith("127."):
        return None
    return (f"This link names {host}, this machine's own address: it opens only here. For colleagues, start the "
            f"server with {PUBLIC_URL_ENV} set to the address they reach it at (e.g. "
            f"{PUBLIC_URL_ENV}=http://my-host:8501), or replace {host} with this machine's name.")


def share_link(snap_id: str) -> str:
    return public_link(os.environ.get(PUBLIC_URL_ENV, ""), st.context.url, snap_id,
                       str(st.get_option("server.baseUrlPath") or ""))


def _ident(snap: Snapshot) -> str:
    return f"{snap.trace_digest}/{snap.scenario.digest()}"


def named_for_download(snap: Snapshot, typed: str) -> tuple[Snapshot, str]:
    """The snapshot as the downloads carry it and their file stem: named after the snapshot name typed in
    the form (or the one it was saved under), else after the model, allocator and scenario digest."""
    label = (typed or snap.name or "").strip()
    if label and label != snap.name:
        snap = snap.named(label)  # the report shows the name too
    return snap, _slug(label or f"{snap.scenario.model}-{snap.scenario.allocator}-{snap.scenario.digest()[:6]}")


def show_sharing(snap: Snapshot, key: str = "res") -> None:
    """Download the snapshot or an HTML report; save a named snapshot to the store for a link."""
    snap, name = named_for_download(snap, str(st.session_state.get(f"{key}-save-name") or ""))
    c1, c2 = st.columns(2)
    c1.download_button("Download snapshot (JSON)", data=snap.to_json, file_name=f"{name}.kvsim.json",
                       mime="application/json", key=f"{key}-dl-json", on_click="ignore")
    c2.download_button("Download HTML report", data=lambda: html_report(snap), file_name=f"{name}.html",
                       mime="text/html", key=f"{key}-dl-html", on_click="ignore")
    with st.form(f"{key}-save", clear_on_submit=False, border=False):
        label = st.text_input("Snapshot name", value=snap.name or "", key=f"{key}-save-name", max_chars=200)
        public = st.checkbox("List it for everyone on this server (otherwise only the link opens it)",
                             key=f"{key}-save-public")
        pressed = st.form_submit_button("Save snapshot and get a link")
        again = st.session_state.get(f"{key}-saved", ("", "", None))[::2] == (_ident(snap), (label, public))
        if pressed and not again:  # Enter, then the button: one intent, one snapshot (the link stays shown)
            try:
                store, _ = open_store()
                saved = store.save_shared(snap, label, public=public)
            except SnapshotError as exc:
                st.error(f"could not save the snapshot: {public_error(exc)}")
            else:
                st.session_state.setdefault(MINE_KEY, {})[saved.id] = saved.manage_secret
                st.session_state[f"{key}-saved"] = (_ident(snap), saved.id, (label, public))
    ident, saved_id, _ = st.session_state.get(f"{key}-saved", ("", "", None))
    if saved_id and ident == _ident(snap):  # only the link for the result on screen
        st.success("Saved. Anyone with this read-only link can open it:")
        link = share_link(saved_id)
        st.code(link, language=None)
        note = loopback_note(link)
        if note:
            st.caption(note)
        st.caption("Manage secret (keep it: it is the only way to delete this snapshot, and is shown once):")
        st.code(st.session_state.get(MINE_KEY, {}).get(saved_id, ""), language=None)


def show_result(snap: Snapshot, key: str = "res", sharing: bool = True,
                apply_fix: Callable[[dict[str, Any]], None] | None = None) -> None:
    show_verdicts(snap, apply_fix, key)
    show_metrics(snap)
    show_charts(snap, key)
    if sharing:
        with st.expander("Share this result", expanded=True):
            show_sharing(snap, key)

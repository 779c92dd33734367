"""The fleet view of a result (docs/FLEET.md): how evenly the router spread the work and what each
replica held, and for P/D the transfers. Shown under a run's charts when its summary has a fleet."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from sim.report import fleet_charts
from sim.report.summary_lines import pd_pools


def replica_table(replicas: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per replica, the summary's per-replica figures."""
    return pd.DataFrame([{"replica": fleet_charts.replica_label(r), "routed": r["routed"], "prefix hit": r["prefix_cache_hit_rate"],
                          "KV usage mean": r["kv_usage_mean"], "KV usage peak": r["kv_usage_peak"],
                          "queue mean": r["queue_mean"], "busy": r["utilisation"], "steps": r["steps"]}
                         for r in replicas])


def _ratio(x: Any) -> str:
    return f"{x:.2f}" if isinstance(x, (int, float)) else "-"


def show_fleet(summary: dict[str, Any], key: str = "res") -> None:
    fleet = summary.get("fleet")
    if not fleet:
        return
    st.subheader("Fleet")
    cols = st.columns(4)
    cols[0].metric("Router", fleet.get("router", "-"))
    pools = pd_pools(summary)
    if pools is not None:  # each pool's own (the summary's key is the prefill pool's)
        cols[1].metric("Routing imbalance, prefill / decode",
                       " / ".join(_ratio(p.get("routing_imbalance")) for p in pools))
    else:
        cols[1].metric("Routing imbalance (max/mean)", f"{summary.get('routing_imbalance', 1.0):.2f}")
    cols[2].metric("Prefix-cache hit rate" + (", prefill pool" if pools is not None else ""),
                   f"{summary.get('prefix_cache_hit_rate', 0.0):.1%}")
    if "kv_transfer_bytes" in summary:
        cols[3].metric("KV moved", f"{summary['kv_transfer_bytes'] / 1e9:,.1f} GB")
        t = summary.get("kv_transfer_s") or {}
        if t.get("p50") is not None:
            st.caption(f"P/D over {fleet.get('kv_link')}, decode router {fleet.get('decode_router')}: transfer p50 {t['p50'] * 1e3:.1f} ms, p99 {t['p99'] * 1e3:.1f} ms; "
                       f"{summary.get('pd_waited_for_blocks', 0)} requests waited for decode blocks; "
                       f"{summary.get('pd_decode_hit_tokens', 0):,} prompt tokens found in the decode side's prefix cache, not sent; "
                       f"{summary.get('gpus')} GPUs. The first token comes from the decode replica (docs/FLEET.md).")
    replicas = fleet.get("replicas") or []
    st.plotly_chart(fleet_charts.routed_bars(replicas), key=f"{key}-routed")
    st.dataframe(replica_table(replicas), hide_index=True,
                 column_config={c: st.column_config.NumberColumn(format="percent")
                                for c in ("prefix hit", "KV usage mean", "KV usage peak", "busy")})
    timelines = fleet.get("timeline") or {}
    named = timelines.items() if "prefill" in timelines else [("replica", timelines)]
    for label, tl in named:
        if tl and tl.get("t_s"):
            st.plotly_chart(fleet_charts.replica_heatmap(tl, "kv_usage", f"KV usage per {label} replica", label),
                            key=f"{key}-kvheat-{label}")
            st.plotly_chart(fleet_charts.replica_heatmap(tl, "queue", f"Waiting requests per {label} replica", label),
                            key=f"{key}-qheat-{label}")
    if fleet.get("transfers"):
        st.plotly_chart(fleet_charts.transfer_timeline(fleet["transfers"]), key=f"{key}-transfers")

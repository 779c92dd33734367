"""Snapshots page: open a shared link (?snapshot=ID), upload a snapshot file, list and delete saved ones."""

import pandas as pd
import streamlit as st

from sim.guard.text import public_error
from sim.out.snapshot import MAX_SNAPSHOT_BYTES, Snapshot, SnapshotError, SnapshotStore
from ui.plan_view import show_plan
from ui.result_view import share_link, show_result

st.title("Snapshots")
store = SnapshotStore.default()


def show_snapshot(snap: Snapshot, key: str) -> None:
    sc = snap.scenario
    st.subheader(snap.name or "unnamed snapshot")
    st.caption(f"{sc.model} on {sc.gpu} x tp{sc.tp}, {sc.allocator}, KV {sc.kv_dtype}; trace digest "
               f"{snap.trace_digest}; saved {snap.created_utc or 'n/a'} by kvsim {snap.app_version or '?'}")
    if snap.plan is not None:
        st.markdown("**The search this run drills into**")
        show_plan(snap.plan, key=f"{key}-plan")
        st.markdown("**The chosen configuration's run**")
    show_result(snap, key=key, sharing=True)
    with st.expander("Scenario and trace"):
        st.json(sc.to_dict(), expanded=False)
        st.json(snap.trace_summary, expanded=False)


snap_id = st.query_params.get("snapshot")
if snap_id:
    try:
        show_snapshot(store.get(snap_id), "link")
    except SnapshotError as exc:
        st.error(public_error(exc))

st.subheader("Open a snapshot file")
up = st.file_uploader("Snapshot (.kvsim.json)", type=["json"], key="snap_file",
                      max_upload_size=max(1, MAX_SNAPSHOT_BYTES >> 20))
if up is not None:
    try:
        uploaded = Snapshot.from_json(up.getvalue(), up.name)
    except SnapshotError as exc:
        st.error(public_error(exc))
    else:
        show_snapshot(uploaded, "upload")

st.subheader("Saved on this server")
saved = store.list()
if not saved:
    st.caption(f"No snapshots saved yet in {store.path.name}.")
else:
    st.dataframe(pd.DataFrame([{"name": s.name, "saved (UTC)": s.created_utc, "link": share_link(s.id),
                                "size (KB)": round(s.size_bytes / 1024, 1)} for s in saved]),
                 hide_index=True, key="snap-list",
                 column_config={"link": st.column_config.LinkColumn("link")})
    labels = {f"{s.name} ({s.id})": s.id for s in saved}
    victim = st.selectbox("Delete a snapshot", list(labels), index=None, key="snap_delete_pick")
    if victim and st.button("Delete", key="snap_delete"):
        store.delete(labels[victim])
        st.rerun()

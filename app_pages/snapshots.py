"""Snapshots page: open a shared link (?snapshot=ID), upload a snapshot file, list what this browser
session saved plus the public ones, delete with the manage secret. Works without the store."""

import pandas as pd
import streamlit as st

from sim.guard.text import plain, public_error
from sim.report.snapshot import MAX_SNAPSHOT_BYTES, Snapshot, SnapshotError
from sim.report.snapshot_store import open_store
from ui.page_errors import error_shown
from ui.plan_view import show_plan
from ui.result_view import MINE_KEY, reproduce_line, run_caption, share_link, show_result

st.title("Snapshots")
try:
    store, note = open_store()
except SnapshotError as exc:
    store, note = None, ""
    st.error(f"{public_error(exc)}. Saved snapshots are unavailable; opening a snapshot file still works.")
if note:
    st.warning(public_error(note))
if store is not None and store.read_only:
    st.info(f"This server's snapshot store is read-only ({public_error(store.read_only_why)}): saved snapshots "
            "can be opened, nothing new can be saved or deleted.", icon=":material/lock:")


def show_snapshot(snap: Snapshot, key: str) -> None:
    sc = snap.scenario
    st.subheader(plain(snap.name or "unnamed snapshot"))
    trace = snap.trace_summary or {}
    st.caption(run_caption(sc, str(trace.get("source") or "?"), int(trace.get("rows") or 0))
               + f"; saved {snap.created_utc or 'n/a'} by kvsim {snap.app_version or '?'}")
    if snap.plan is not None:
        st.markdown("**The search this run drills into**")
        show_plan(snap.plan, key=f"{key}-plan")
        st.markdown("**The chosen configuration's run**")
    show_result(snap, key=key, sharing=True)
    with st.expander("Scenario and trace"):
        st.json(sc.to_dict(), expanded=False)
        st.json(snap.trace_summary, expanded=False)
    st.caption(reproduce_line(snap.trace_digest, sc))


snap_id = st.query_params.get("snapshot")
if snap_id and store is not None:
    with error_shown(errors=(SnapshotError,)):
        show_snapshot(store.get(snap_id), "link")

st.subheader("Open a snapshot file")
up = st.file_uploader("Snapshot (.kvsim.json)", type=["json"], key="snap_file",
                      max_upload_size=max(1, MAX_SNAPSHOT_BYTES >> 20))
if up is not None:
    with error_shown(errors=(SnapshotError,)):
        show_snapshot(Snapshot.from_json(up.getvalue(), up.name), "upload")



def saved_list() -> None:
    """What this browser session saved (it holds their manage secrets) plus the public snapshots."""
    mine: dict[str, str] = st.session_state.get(MINE_KEY, {})
    saved = store.list(ids=list(mine), public=True)
    if not saved:
        st.caption("Nothing saved in this session and no public snapshots yet. To make one, open a result on "
                   "Simulate or Plan and press \"Save snapshot and get a link\" below it.")
        return
    st.dataframe(pd.DataFrame([{"name": s.name, "saved (UTC)": s.created_utc, "public": s.public,
                                "yours": s.id in mine, "link": share_link(s.id),
                                "size (KB)": round(s.size_bytes / 1024, 1)} for s in saved]),
                 hide_index=True, key="snap-list", column_config={"link": st.column_config.LinkColumn("link")})
    labels = {f"{s.name} ({s.id})": s.id for s in saved}
    victim = st.selectbox("Delete a snapshot", list(labels), index=None, key="snap_delete_pick")
    if not victim:
        return
    secret = mine.get(labels[victim]) or st.text_input("Manage secret (given when it was saved)", type="password",
                                                        key="snap_delete_secret")
    if st.button("Delete", key="snap_delete"):
        with error_shown(errors=(SnapshotError,)):
            store.delete(labels[victim], secret)
            mine.pop(labels[victim], None)
            st.rerun()


st.subheader("Saved snapshots")
if store is not None:
    saved_list()

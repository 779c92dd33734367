"""kvsim dashboard entry point: `streamlit run app.py` (or `make run`).

st.navigation over the pages in app_pages/ (not "pages/": Streamlit treats a folder of that name
as an old-style multipage app and serves the first deep link of a fresh server from it, with its
own file-name menu). A link with ?snapshot=ID opens the saved snapshot
straight away, whatever page the link was copied from.
"""

from pathlib import Path

import streamlit as st

st.set_page_config(page_title="kvsim: KV-cache capacity planner", page_icon=":material/memory:", layout="wide")

HERE = Path(__file__).resolve().parent
opening_snapshot = "snapshot" in st.query_params

pages = [
    st.Page("app_pages/plan.py", title="Plan", icon=":material/query_stats:", url_path="plan",
            default=not opening_snapshot),
    st.Page("app_pages/simulate.py", title="Simulate", icon=":material/play_circle:", url_path="simulate"),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page("app_pages/trace.py", title="Trace", icon=":material/timeline:", url_path="trace"),
    st.Page("app_pages/capacity.py", title="Capacity planner", icon=":material/calculate:", url_path="capacity"),
    st.Page("app_pages/snapshots.py", title="Snapshots", icon=":material/bookmarks:", url_path="snapshots",
            default=opening_snapshot),
]
if (HERE / "app_pages" / "gpu_run.py").is_file():  # the GPU backend's page, when that part is installed
    pages.append(st.Page("app_pages/gpu_run.py", title="GPU run", icon=":material/developer_board:", url_path="gpu"))

st.navigation(pages).run()

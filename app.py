"""kvsim dashboard entry point: `streamlit run app.py` (or `make run`).

st.navigation over the pages in app_pages/ (not "pages/": Streamlit treats a folder of that name
as an old-style multipage app and serves the first deep link of a fresh server from it, with its
own file-name menu). A link with ?snapshot=ID opens the saved snapshot
straight away, whatever page the link was copied from.

Every page has its own address (/plan, /simulate, ...): the root URL is a hidden page that only
forwards, query string kept, to the landing page (or to Snapshots for a ?snapshot= link). A
default page would be served at "/" alone, and its own path would open a "Page not found" dialog.
The favicon is a file in ui/assets: a material-icon favicon is fetched from an outside font server.
"""

from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent
ICON = HERE / "ui" / "assets" / "kvsim-icon.png"
st.set_page_config(page_title="kvsim: KV-cache capacity planner", page_icon=str(ICON), layout="wide")


def forward_from_root() -> None:
    """The root URL's page: go to the landing page (Snapshots for a snapshot link), same query."""
    target = "app_pages/snapshots.py" if "snapshot" in st.query_params else "app_pages/plan.py"
    st.switch_page(target, query_params=st.query_params.to_dict())


pages = [
    st.Page(forward_from_root, title="kvsim", url_path="home", default=True, visibility="hidden"),
    st.Page("app_pages/plan.py", title="Plan", icon=":material/query_stats:", url_path="plan"),
    st.Page("app_pages/simulate.py", title="Simulate", icon=":material/play_circle:", url_path="simulate"),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page("app_pages/trace.py", title="Trace", icon=":material/timeline:", url_path="trace"),
    st.Page("app_pages/capacity.py", title="Capacity planner", icon=":material/calculate:", url_path="capacity"),
    st.Page("app_pages/snapshots.py", title="Snapshots", icon=":material/bookmarks:", url_path="snapshots"),
]
if (HERE / "app_pages" / "gpu_run.py").is_file():  # the GPU backend's page, when that part is installed
    pages.append(st.Page("app_pages/gpu_run.py", title="GPU run", icon=":material/developer_board:", url_path="gpu"))

st.navigation(pages).run()

"""kvsim dashboard entry point: `streamlit run app.py` (or `make run`).

st.navigation over the pages in app_pages/ (not "pages/": Streamlit treats a folder of that name
as an old-style multipage app and serves the first deep link of a fresh server from it, with its
own file-name menu). A link with ?snapshot=ID opens the saved snapshot
straight away, whatever page the link was copied from. The pages are listed once, in ui/pages.py.

Every page has its own address (/plan, /simulate, ...): the root URL is a hidden page that only
forwards, query string kept, to the landing page (or to Snapshots for a ?snapshot= link). A
default page would be served at "/" alone, and its own path would open a "Page not found" dialog.
The favicon is a file in ui/assets: a material-icon favicon is fetched from an outside font server.
"""

import streamlit as st

from ui.pages import PAGES, ROOT
from ui.runner import server_stats
from ui.server_notice import warn_if_exposed

ICON = ROOT / "ui" / "assets" / "kvsim-icon.png"
st.set_page_config(page_title="kvsim: KV-cache capacity planner", page_icon=str(ICON), layout="wide")
warn_if_exposed()


def forward_from_root() -> None:
    """The root URL's page: go to the landing page (Snapshots for a snapshot link), same query."""
    target = PAGES["snapshots" if "snapshot" in st.query_params else "plan"].script
    # every value of a repeated key (a multiselect's ?plan_gpus=h100-sxm&plan_gpus=h200): to_dict() keeps the last
    st.switch_page(target, query_params={key: st.query_params.get_all(key) for key in st.query_params})


pages = [st.Page(forward_from_root, title="kvsim", url_path="home", default=True, visibility="hidden")]
pages += [st.Page(p.script, title=p.title, icon=p.icon, url_path=p.url_path) for p in PAGES.values() if p.available()]
st.navigation(pages).run()
st.sidebar.caption(server_stats().line())  # for an operator: workers busy, cache held against its bound

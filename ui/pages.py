"""The dashboard's pages: the one list app.py builds its navigation from (and docs/OPTIONS.md shows).

A page is a thin view in app_pages/ (widgets -> Scenario -> core -> charts). Adding one = a file in
app_pages/ plus one `register_page` line here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from models.registry import Registry

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class PageEntry:
    """One page: its script (relative to the repository root), menu title, icon and URL path."""

    url_path: str
    script: str
    title: str
    icon: str
    description: str = ""
    optional: bool = False  # shown only when its script is installed (the GPU backend's page)

    def available(self) -> bool:
        return not self.optional or (ROOT / self.script).is_file()


PAGES: Registry[PageEntry] = Registry("page")


def register_page(page: PageEntry) -> PageEntry:
    return PAGES.register(page.url_path, page)


for _page in (
    PageEntry("plan", "app_pages/plan.py", "Plan", ":material/query_stats:",
              "search configurations for the largest load that meets every SLO"),
    PageEntry("simulate", "app_pages/simulate.py", "Simulate", ":material/play_circle:",
              "replay one trace through one scenario: latency, KV usage, breakdown, report"),
    PageEntry("compare", "app_pages/compare.py", "Compare", ":material/compare_arrows:",
              "one trace through 2-6 variants of the sidebar's scenario"),
    PageEntry("trace", "app_pages/trace.py", "Trace", ":material/timeline:",
              "inspect, transform and download a trace"),
    PageEntry("capacity", "app_pages/capacity.py", "Capacity planner", ":material/calculate:",
              "how many requests fit, and how many GPUs N users need"),
    PageEntry("validate", "app_pages/validate.py", "Validate", ":material/fact_check:",
              "replay a measured vLLM run and compare measured with simulated"),
    PageEntry("snapshots", "app_pages/snapshots.py", "Snapshots", ":material/bookmarks:",
              "saved runs, shareable links"),
    PageEntry("gpu", "app_pages/gpu_run.py", "GPU run", ":material/developer_board:",
              "run the scenario on a real GPU and compare with the simulator", optional=True),
):
    register_page(_page)

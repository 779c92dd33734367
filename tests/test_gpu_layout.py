"""gpu_backend's imports run one way (no cycle, lazy imports inside functions included), and the GPU
page's helpers name columns instead of reading them by position."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "gpu_backend"


def import_graph() -> dict[str, set[str]]:
    """gpu_backend module -> the gpu_backend modules it imports anywhere in its body."""
    graph: dict[str, set[str]] = {}
    for path in PKG.glob("*.py"):
        name = f"gpu_backend.{path.stem}"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "gpu_backend":
                    deps |= {f"gpu_backend.{a.name}" for a in node.names}
                elif node.module.startswith("gpu_backend."):
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("gpu_backend.")}
        graph[name] = deps - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep] if dep in stack else [node, dep]
            if dep not in state and (cycle := visit(dep, [*stack, dep])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_gpu_backend_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_live_frame_reads_named_columns():
    from gpu_backend.executor import STEP_LOG_COLUMNS
    from ui import gpu_view

    row = dict.fromkeys(STEP_LOG_COLUMNS, 0.0)
    row.update(t_end_s=1.5, blocks_in_use=7, batch_size=3)
    df = gpu_view.live_frame([row])
    assert df.to_dict("records") == [{"Time (s)": 1.5, "KV blocks in use": 7, "Requests in the batch": 3}]
    assert gpu_view.progress_text([row]) == "1 steps so far, 7 KV blocks in use"


def test_overlay_table_errors():
    from gpu_backend.overlay import overlay_table

    lat = {"mean": 2.0, "p50": 2.0, "p90": 4.0}
    m = {k: lat for k in ("ttft_s", "tpot_s", "e2e_s")} | {"throughput_tok_s": 110.0, "mean_batch_size": 3.0,
                                                             "num_preemptions": 0, "kv_cache_usage_perc": {"peak": 0.5}}
    s = {k: {"mean": 1.0, "p50": 2.0, "p90": 0} for k in ("ttft_s", "tpot_s", "e2e_s")} | {
        "throughput_tok_s": 100.0, "mean_batch_size": 3.0, "num_preemptions": 0, "kv_cache_usage_perc": {"peak": 0.25}}
    t = overlay_table(m, s).set_index("metric")["error"]
    assert t["ttft_s mean"] == 1.0 and t["ttft_s p50"] == 0.0 and pd.isna(t["ttft_s p90"])
    assert abs(t["throughput_tok_s"] - 0.1) < 1e-12 and pd.isna(t["num_preemptions"]) and t["peak KV usage"] == 1.0


def test_experiment_figure_collapses_a_single_row():
    from gpu_backend.experiments import EXPERIMENTS
    from ui import gpu_view

    exp = EXPERIMENTS["KV vs batch size"]
    assert gpu_view.experiment_figure(exp, pd.DataFrame([{"batch": 1, "kv_bytes_measured": 1,
                                                          "kv_bytes_formula": 1}])) is None
    fig = gpu_view.experiment_figure(exp, pd.DataFrame({"batch": [1, 2], "kv_bytes_measured": [1, 2],
                                                        "kv_bytes_formula": [1, 2]}))
    assert fig.layout.yaxis.title.text == "KV bytes" and fig.layout.xaxis.title.text == "Requests at once"
    assert {t.name for t in fig.data} == {"KV bytes in use (measured)", "KV bytes (formula)"}


def test_overlay_display_reads_for_people():
    """The loaded GPU screenshot: rows "ttft_s mean" with an error of 3070.3018 (a ratio, 4 decimals)."""
    from gpu_backend.overlay import overlay_table
    from ui import gpu_view

    lat = {"mean": 2.0816, "p50": 2.0, "p90": 4.0}
    m = {k: lat for k in ("ttft_s", "tpot_s", "e2e_s")} | {"throughput_tok_s": 13.026, "mean_batch_size": 3.0,
                                                             "num_preemptions": 0, "kv_cache_usage_perc": {"peak": 0.5}}
    s = {k: {"mean": 0.0007, "p50": 2.0, "p90": 0} for k in ("ttft_s", "tpot_s", "e2e_s")} | {
        "throughput_tok_s": 10016.8552, "mean_batch_size": 3.0, "num_preemptions": 0, "kv_cache_usage_perc": {"peak": 0.25}}
    shown = gpu_view.overlay_display(overlay_table(m, s)).set_index(["metric", "stat"])
    assert shown.loc[("TTFT (s)", "mean"), "measured"] == 2.082 and shown.loc[("TTFT (s)", "mean"), "error"] == "+297,271.4%"
    assert shown.loc[("TPOT (ms)", "p50"), "measured"] == 2000.0 and shown.loc[("TPOT (ms)", "p50"), "error"] == "+0.0%"
    assert shown.loc[("E2E (s)", "p90"), "error"] == "n/a"
    assert shown.loc[("throughput (tok/s)", ""), "simulated"] == 10020.0
    assert shown.loc[("peak KV usage (%)", ""), "measured"] == 50.0 and shown.loc[("peak KV usage (%)", ""), "error"] == "+100.0%"
    assert not any("_" in label for label, _ in shown.index)

"""Compare page: one trace through 2 to 6 scenarios; one table, overlaid charts, the differences in words."""

import pandas as pd
import streamlit as st

from sim.guard.text import public_error
from sim.plan.one_source import one_source
from sim.report import charts
from sim.report.compare_words import comparison_rows, describe_differences
from sim.report.served import compared_verdicts
from ui.bounded import choice, show_input_problems, show_link_problems
from ui.glossary import show_glossary
from ui.page_errors import INPUT_ERRORS, stop_on_error
from ui.presets import PRESETS, preset_variants
from ui.runner import run_scenarios
from ui.scenario_form import scenario_sidebar
from ui.trace_picker import pick_trace

st.title("Compare")
trace = pick_trace("sidebar")
base = scenario_sidebar("Base scenario")
choice("preset", PRESETS)
preset = st.selectbox("What to compare", PRESETS, key="preset", bind="query-params")
show_link_problems()
if trace is None or base is None:
    show_input_problems("Choose a trace and a valid base scenario in the sidebar.")
    st.stop()
with stop_on_error():
    variants = preset_variants(preset, base)
chosen = st.multiselect("Scenarios (2 to 6)", list(variants), default=list(variants)[:6],
                        key=f"variants-{PRESETS.index(preset)}", max_selections=6)  # one per preset: options differ
if len(chosen) < 2:
    st.info("Pick at least two scenarios.")
    st.stop()

snaps = {}
sources = one_source([variants[label] for label in chosen])  # one step-time source for every row
results = run_scenarios(trace, dict(zip(chosen, sources.scenarios, strict=True)),
                        catch=INPUT_ERRORS)
for label, result in results.items():
    if isinstance(result, Exception):
        st.error(f"{label}: {public_error(result)}")
    else:
        snaps[label] = result
if len(snaps) < 2:
    st.stop()

summaries = {k: s.summary for k, s in snaps.items()}
for verdict in compared_verdicts(summaries):
    st.warning(verdict, icon=":material/warning:" if verdict.startswith("Overloaded") else ":material/block:")
st.subheader("In words")
for sentence in describe_differences(summaries):
    st.markdown(f"- {sentence}")

st.subheader("Side by side")
st.dataframe(pd.DataFrame(comparison_rows(summaries)), hide_index=True, key="cmp-table",
             column_config={"completed": st.column_config.NumberColumn(format="localized"),
                            "rejected": st.column_config.NumberColumn(format="localized"),
                            "preemptions": st.column_config.NumberColumn(format="localized"),
                            "throughput tok/s": st.column_config.NumberColumn(
                                "tok/s", format="%.0f", help="output tokens per second (throughput)"),
                            "TTFT p99 s": st.column_config.NumberColumn(format="%.2f"),
                            "TPOT p99 ms": st.column_config.NumberColumn(format="%.1f"),
                            "running (avg)": st.column_config.NumberColumn(
                                "running", format="%.1f", help="requests running at once, time-averaged"),
                            "peak KV usage %": st.column_config.NumberColumn(format="%.0f"),
                            "token states %": st.column_config.NumberColumn(format="%.0f")})
st.caption("Latency and throughput are over each run's completed requests. " + sources.note)

steps = {k: s.steps for k, s in snaps.items()}
requests = {k: s.requests for k, s in snaps.items()}
st.plotly_chart(charts.breakdown_bars(summaries), key="cmp-breakdown")
show_glossary()
st.plotly_chart(charts.overlay_timeline(steps, "kv_cache_usage_perc", "KV cache usage", "%", 100.0), key="cmp-usage")
st.plotly_chart(charts.overlay_timeline(steps, "num_running", "Running requests", "requests"), key="cmp-running")
st.plotly_chart(charts.overlay_timeline(steps, "num_waiting", "Queue length", "requests"), key="cmp-queue")
left, right = st.columns(2)
left.plotly_chart(charts.overlay_cdf(requests, "ttft_s"), key="cmp-ttft")
right.plotly_chart(charts.overlay_cdf(requests, "tpot_s"), key="cmp-tpot")

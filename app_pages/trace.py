"""Trace page: choose a workload (sample, upload, synthetic) and see what it looks like."""

import streamlit as st

from sim.report import charts
from ui.trace_picker import pick_trace

st.title("Trace")
st.caption("The workload every other page replays. Uploads may be in any format the loader knows "
           "(Azure, BurstGPT, Mooncake, Vidur, SplitwiseSim, generic CSV/JSONL); the format is detected.")
trace = pick_trace("main")
if trace is None:
    st.stop()

info = trace.summary()
st.subheader(f"{info['source']}: {info['format']} format")
cols = st.columns(5)
cols[0].metric("requests", f"{info['rows']:,}")
cols[1].metric("duration", f"{info['duration_s']:,.1f} s")
cols[2].metric("mean rate", "n/a" if info["rate_per_s"] is None else f"{info['rate_per_s']:.2f} req/s")
cols[3].metric("mean input", f"{info['input_tokens']['mean']:,.0f} tok")
cols[4].metric("mean output", f"{info['output_tokens']['mean']:,.0f} tok")
st.caption(f"digest {info['digest']}" + (f"; {info['sessions']} sessions" if "sessions" in info else "")
           + (f"; transforms: {', '.join(info['history'])}" if info.get("history") else ""))
for warning in info.get("warnings", []):
    st.warning(warning)

st.plotly_chart(charts.arrival_rate(trace.df), key="trace-rate")
st.plotly_chart(charts.length_histograms(trace.df), key="trace-lengths")
with st.expander("Statistics and first rows"):
    st.dataframe({k: info[k] for k in ("input_tokens", "output_tokens")})
    st.dataframe(trace.df.head(200), hide_index=True)

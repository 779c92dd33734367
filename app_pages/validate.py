"""Validate page: replay a measured run (sample, upload, `sim observe` record or a benchmark file) with
its own engine config; measured vs simulated, and a calibration profile fitted on it."""

import streamlit as st

from ui import validate_view
from ui.page_errors import stop_on_error

st.title("Validate")
st.caption("Before trusting a prediction, check the simulator against a run you measured: give its run record "
           "(meta.json, requests.jsonl, timeseries.csv and optionally config.json, or one .zip of them: what "
           "`python -m sim observe URL` writes against your own vLLM server) or one benchmark file (vllm bench "
           "serve, guidellm, genai-perf, inference-perf JSON, or a CSV of arrival,input,output,ttft,e2e; "
           "docs/VALIDATE.md). It is replayed with the run's own engine config and compared side by side.")
source = st.radio("Run", ["sample", "upload"], key="val_src", horizontal=True,
                  format_func={"sample": "bundled sample (RTX 4090, Llama-3.1-8B, 40 requests)",
                               "upload": "upload a run"}.get)
files = None
if source == "upload":
    uploads = st.file_uploader("Run files, one .zip, or one benchmark file", accept_multiple_files=True,
                               key="val_files", type=["json", "jsonl", "csv", "zip"])
    if not uploads:
        st.info("Upload meta.json, requests.jsonl and timeseries.csv (and config.json), one .zip, or one benchmark file.")
        st.stop()
    files = validate_view.read_uploads(uploads)
overrides = validate_view.engine_form()
fit = st.session_state.get("val_fit_for") == validate_view.files_digest(files, overrides)
with stop_on_error():
    shown = validate_view.validate_files(files, overrides, fit)
validate_view.show_provenance(shown)
validate_view.show(shown)
st.subheader("Calibrate")
if shown.profile is None:
    st.caption("Fit the step-time model to this run (up to 20 replays; docs/CALIBRATION.md): the profile can be "
               "downloaded or used by every page.")
    if st.button("Fit a calibration profile on this run", key="val-fit"):
        st.session_state["val_fit_for"] = validate_view.files_digest(files, overrides)
        st.rerun()
validate_view.show_profile(shown)

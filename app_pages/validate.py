"""Validate page: replay a measured vLLM run with its own engine config; measured vs simulated."""

import streamlit as st

from ui import validate_view
from ui.page_errors import stop_on_error

st.title("Validate")
st.caption("Before trusting a prediction, check the simulator against a run you measured: upload a vLLM run "
           "(meta.json, requests.jsonl, timeseries.csv and optionally the model's config.json, or one .zip of "
           "them; the format is in docs/CALIBRATION.md). It is replayed with the run's own engine config "
           "(KV blocks, block size, max_num_seqs, max_num_batched_tokens, model, GPU) and compared side by side.")
source = st.radio("Run", ["sample", "upload"], key="val_src", horizontal=True,
                  format_func={"sample": "bundled sample (RTX 4090, Llama-3.1-8B, 40 requests)",
                               "upload": "upload a run"}.get)
files = None
if source == "upload":
    uploads = st.file_uploader("Run files or one .zip", accept_multiple_files=True, key="val_files",
                               type=["json", "jsonl", "csv", "zip"])
    if not uploads:
        st.info("Upload meta.json, requests.jsonl and timeseries.csv (and config.json), or one .zip.")
        st.stop()
    files = validate_view.read_uploads(uploads)
with stop_on_error():
    shown = validate_view.validate_files(files)
validate_view.show(shown)

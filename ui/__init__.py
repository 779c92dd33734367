"""Shared Streamlit view helpers for the pages: widgets in, core objects out, charts drawn.

View code only: every figure shown comes from sim/ or models/; these modules decide layout and
which widget is bound to the URL, nothing else.
"""

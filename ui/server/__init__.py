"""What one dashboard server shares between its visitors: a pool of simulation workers and byte-bounded caches.

Plain Python (no Streamlit), so it is tested directly; ui/runner.py and ui/trace_picker.py use it.
"""

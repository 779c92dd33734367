"""Dashboard pages (Streamlit scripts run by app.py; a package only so import-linter can check them)."""

"""One file per trace format; each defines FORMAT (a TraceFormat) and is listed in ../registry.py."""

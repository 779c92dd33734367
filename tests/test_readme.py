"""The README tells a first-time user what they need to start: `make run`, `make test` and the port."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_says_how_to_pick_the_port_and_the_makefile_honours_it():
    """Issue 17: the README never mentioned PORT (the dashboard's port when 8501 is taken)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make run" in readme and "make test" in readme
    assert re.search(r"make run PORT=\d+", readme)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^PORT\s*\?=\s*8501$", makefile, re.M) and "--server.port $(PORT)" in makefile

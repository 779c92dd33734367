"""A calibration profile fitted on the Validate page, offered to every page that builds a scenario.

The Validate page fits a profile on the run it shows (sim.fidelity.calibrate) and can make it the
visitor's step-time source: the profile is written once to a server-side file named by its
content's hash (profiles are small, schema-checked JSON) and its path kept in the visitor's
session; the scenario sidebar then offers "step times from the fitted profile" and sets
Scenario.profile. Nothing is shared between visitors but the file, which holds only coefficients.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import streamlit as st

SESSION_KEY = "fitted_profile"
USE_KEY = "use_fitted_profile"
DIR = Path(tempfile.gettempdir()) / "kvsim-fitted-profiles"


def profile_bytes(profile: dict[str, Any]) -> bytes:
    return json.dumps(profile, indent=2, sort_keys=True).encode("utf-8")


def activate(profile: dict[str, Any], label: str) -> Path:
    """Save `profile` server-side and make it this visitor's fitted profile."""
    from sim.timing.profile import save_profile

    data = profile_bytes(profile)
    path = DIR / f"{hashlib.sha256(data).hexdigest()[:24]}.json"
    if not path.is_file():
        DIR.mkdir(parents=True, exist_ok=True)
        save_profile(profile, path)
    st.session_state[SESSION_KEY] = {"path": str(path), "label": label}
    st.session_state[USE_KEY] = True
    return path


def sidebar(sb: Any) -> str | None:
    """The profile path when the visitor has one and keeps it ticked; the checkbox says where it came from."""
    held = st.session_state.get(SESSION_KEY)
    if not held or not Path(held["path"]).is_file():
        return None
    use = sb.checkbox(f"Step times from the profile fitted on Validate ({held['label']})", key=USE_KEY)
    return held["path"] if use else None

"""bench/speed_suite.py's table round trip and its >10% slowdown flag (make bench relies on both)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SUITE = Path(__file__).resolve().parent.parent / "bench" / "speed_suite.py"


def load():
    spec = importlib.util.spec_from_file_location("speed_suite", SUITE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["speed_suite"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


ROWS = [{"case": "azure_conv", "requests": 19366, "cpu_s": 2.31, "simulated_s": 3504.3, "speed_x": 1517.1,
         "steps": 379951, "peak_rss_mib": 128},
        {"case": "synthetic_1m", "requests": 1000000, "cpu_s": 1052.7, "simulated_s": 19996.2, "speed_x": 19.0,
         "steps": 1925488, "peak_rss_mib": 463},
        {"case": "mooncake_dense_prefix", "error": "boom"}]


def test_the_written_table_reads_back_and_flags_only_what_is_over_ten_percent():
    s = load()
    text = f"# Performance\n\n{s.BEGIN}\n{s.table(ROWS, 'shared')}\n{s.END}\n"
    before = s.last_table(text)
    assert before == {"azure_conv": 2.31, "synthetic_1m": 1052.7}  # thousands separators read; failed rows skipped
    now = [dict(ROWS[0], cpu_s=2.54), dict(ROWS[1], cpu_s=1200.0)]  # +10.0% (not flagged), +14%
    flagged = s.slower(now, before)
    assert len(flagged) == 1 and flagged[0].startswith("synthetic_1m") and "+14%" in flagged[0]
    assert s.last_table("no table yet") == {}


def test_every_case_names_a_known_scenario_and_trace():
    s = load()
    from sim.scenario import Scenario

    names = [c.name for c in s.CASES]
    assert len(names) == len(set(names)) >= 5
    for case in s.CASES:
        Scenario(**case.scenario)  # raises on a bad field
        assert case.trace.startswith("synthetic:") or case.trace.endswith((".csv", ".jsonl"))

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
    text = f"# Performance\n\n{s.BEGIN}\n{s.table(ROWS, 'shared', 0.3121)}\n{s.END}\n"
    before, ref = s.last_table(text)
    assert before == {"azure_conv": 2.31, "synthetic_1m": 1052.7}  # thousands separators read; failed rows skipped
    assert ref == 0.312  # the reference workload the table was measured at (3 decimals)
    now = [dict(ROWS[0], cpu_s=2.54), dict(ROWS[1], cpu_s=1200.0)]  # +10.0% (not flagged), +14%
    flagged = s.slower(now, before)
    assert len(flagged) == 1 and flagged[0].startswith("synthetic_1m") and "+14%" in flagged[0]
    assert s.last_table("no table yet") == ({}, None)


def test_a_slower_machine_is_not_read_as_a_slower_commit():
    s = load()
    before = {"azure_conv": 2.31, "synthetic_1m": 1052.7}
    today = [dict(ROWS[0], cpu_s=2.31 * 3), dict(ROWS[1], cpu_s=1052.7 * 3.5)]
    # The reference workload ran 3x slower today: azure_conv is as fast as before, the million 17% slower.
    flagged = s.slower(today, before, scale=3.0)
    assert len(flagged) == 1 and flagged[0].startswith("synthetic_1m") and "+17%" in flagged[0]
    # ... and on a 2x faster day an unchanged CPU figure is a slowdown.
    assert len(s.slower([ROWS[0]], {"azure_conv": 2.31}, scale=0.5)) == 1


def test_a_table_from_before_the_reference_reads_without_one():
    s = load()
    old = (f"{s.BEGIN}\nSpeed suite (bench/speed_suite.py), commit f29a054, 2026-11-25; machine: AMD EPYC.\n\n"
           "| case | what | requests | CPU s | simulated s | x real time (CPU) | steps | peak RSS MiB |\n"
           "|---|---|---:|---:|---:|---:|---:|---:|\n"
           "| azure_conv | Azure | 19,366 | 1.98 | 3,504.3 | 1,770.5 | 379,951 | 128 |\n{s.END}")
    assert s.last_table(old) == ({"azure_conv": 1.98}, None)


def test_the_reference_workload_takes_measurable_cpu_time():
    s = load()
    ref = s.reference_cpu_s(repeats=1)
    assert 0.01 < ref < 30.0


def test_every_case_names_a_known_scenario_and_trace():
    s = load()
    from sim.scenario import Scenario

    names = [c.name for c in s.CASES]
    assert len(names) == len(set(names)) >= 5
    for case in s.CASES:
        Scenario(**case.scenario)  # raises on a bad field
        assert case.trace.startswith("synthetic:") or case.trace.endswith((".csv", ".jsonl"))

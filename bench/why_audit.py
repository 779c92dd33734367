"""Issue 17's audit: each "Why" item's test fails on the code before its fix and passes on the fix.

For every fixing commit C in AUDIT, two throw-away git worktrees are made: C itself and C^, each with
the test's file as it was in commit T checked out over it (T = C: the test as it landed with the fix;
a later T for a test written after the fix). The listed tests run in both; a row reads right when the
test fails before the fix and passes at it. Usage (about 10 minutes on a shared 2-core machine):

    .venv/bin/python bench/why_audit.py [--only COMMIT ...]

The worktrees live in a temporary folder and are removed afterwards; the repository is not changed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Commits of this branch are named by their subject (their hashes change when they are rebased onto main).
MALFORMED_FIX = "subject:Trace loader: without a format, the header must name one"
INT8_FIX = "subject:int8 vs fp8 explained where the bytes are"
LATER_TESTS = INT8_FIX  # the same commit added tests for Why items fixed earlier without one
WORDS_TESTS = "subject:tests/test_app_words.py"
SPLIT_CHARTS = "subject:Chart legibility tests one per complaint"
CONTEXT_LABEL_FIX = "subject:Capacity chart: the 'your context' label is drawn where the dashed line is"

# (Why item, fixing commit, test node[, commit the test file comes from when not the fix itself])
AUDIT: list[tuple[str, ...]] = [
    ("1 rejected requests hidden", "9dd0b82", "tests/test_served.py::test_rejections_by_reason_and_their_fix"),
    ("1 rejected requests hidden", "9dd0b82", "tests/test_served.py::test_kv_pool_rejections_say_so"),
    ("1 rejected requests hidden", "9dd0b82",
     "tests/test_app_simulate.py::test_rejected_requests_warn_with_a_one_click_fix"),
    ("2 overload not flagged", "9dd0b82",
     "tests/test_served.py::test_bundled_default_keeps_up_and_a_growing_queue_is_overloaded"),
    ("2 overload not flagged", "9dd0b82", "tests/test_app_simulate.py::test_load_dial_overloads_and_the_page_says_so"),
    ("3 load can't be dialled", "9dd0b82", "tests/test_served.py::test_speedup_scales_arrivals_exactly"),
    ("7 'KV holding tokens (mean)'", "9dd0b82", "tests/test_report.py::test_headline_metrics_formatting"),
    ("7 'KV holding tokens (mean)'", "9dd0b82", "tests/test_app_words.py::test_the_token_share_says_what_it_is",
     WORDS_TESTS),
    ("4 '0.0x'; claims vs table", "8da72e2",
     "tests/test_charts.py::test_compare_words_read_right_both_ways_and_put_unserved_first"),
    ("7 queue/running squashed; running hidden behind batch size", "8da72e2",
     "tests/test_charts.py::test_a_long_queue_does_not_squash_running_and_running_is_not_hidden", SPLIT_CHARTS),
    ("7 TPOT chart in s beside headlines in ms", "8da72e2",
     "tests/test_charts.py::test_tpot_chart_in_ms_like_the_headline", SPLIT_CHARTS),
    ("4 linear TTFT axis", "8da72e2", "tests/test_charts.py::test_ttft_overlay_goes_log_when_values_span_decades",
     SPLIT_CHARTS),
    ("4 overlapping lines", "8da72e2", "tests/test_charts.py::test_overlaid_identical_lines_stay_told_apart",
     SPLIT_CHARTS),
    ("5 log ticks '2, 1000, 5'; user's context unmarked", "8da72e2",
     "tests/test_charts.py::test_capacity_ticks_read_1_10_100_1k_and_the_users_context_is_marked", SPLIT_CHARTS),
    ("5 answer in a table cell, jargon units, requests vs users", "8da72e2",
     "tests/test_app_capacity.py::test_seed_table_qwen25_7b_on_h100"),
    ("5 answer in a table cell, jargon units", "8da72e2",
     "tests/test_app_words.py::test_capacity_answers_in_one_sentence_first", WORDS_TESTS),
    ("6 error in a collapsed expander", "9b498c0",
     "tests/test_app_simulate.py::test_a_bad_trace_is_explained_in_the_main_area"),
    ("6 out-of-range link values ignored", "9b498c0",
     "tests/test_app_simulate.py::test_bad_link_values_are_named_in_the_main_area_and_fall_back"),
    ("6 out-of-range link values ignored", "9b498c0",
     "tests/test_app_capacity.py::test_out_of_range_users_in_a_link_are_named"),
    ("7 HTML report: no trace/snapshot name, raw None/False", "9b498c0",
     "tests/test_report.py::test_report_names_trace_and_snapshot_and_formats_values_for_people"),
    ("7 HTML report 5.4 MB", "9b498c0", "tests/test_report.py::test_report_of_every_bundled_sample_is_under_a_megabyte"),
    ("7 share links carry any host", "9b498c0", "tests/test_report.py::test_share_links_use_the_configured_public_url"),
    ("7 GPU page labels t_s / blocks_in_use", "568fcea", "tests/test_gpu_layout.py::test_live_frame_reads_named_columns"),
    ("7 GPU page labels t_s / blocks_in_use", "568fcea",
     "tests/test_gpu_layout.py::test_experiment_figure_collapses_a_single_row"),
    ("7 heading 'Article 000 experiments'", "568fcea", "tests/test_gpu_page.py::test_gpu_page_runs_an_experiment_on_cpu"),
    ("6 a random text file called 'malformed CSV'", MALFORMED_FIX,
     "tests/test_trace_validation.py::test_a_text_file_that_is_no_trace_is_not_called_a_malformed_csv"),
    ("7 int8 vs fp8 bytes unexplained", INT8_FIX, "tests/test_report.py::test_quantised_kv_says_how_it_stores_its_scales"),
    ("7 int8 vs fp8 bytes unexplained", INT8_FIX,
     "tests/test_app_simulate.py::test_int8_pool_caption_and_glossary_explain_the_scale_bytes"),
    ("7 '28,006 blocks of 16 tokens' on a contiguous run", "9dd0b82",
     "tests/test_app_words.py::test_a_contiguous_run_is_not_said_in_blocks", WORDS_TESTS),
    ("7 '28,006 blocks of 16 tokens' on a contiguous run", "9dd0b82",
     "tests/test_report.py::test_kv_pool_line_counts_a_contiguous_pool_in_token_slots", LATER_TESTS),
    ("4 fragmentation kinds unexplained", "8da72e2", "tests/test_app_words.py::test_compare_explains_each_kv_part",
     WORDS_TESTS),
    ("5 user's context unmarked (its label was off the chart)", CONTEXT_LABEL_FIX,
     "tests/test_charts.py::test_the_users_context_label_sits_on_its_line", SPLIT_CHARTS),
    ("7 digests clutter the top", "9b498c0", "tests/test_app_simulate.py::test_digests_come_below_the_result", LATER_TESTS),
    ("7 'max_batched_tok/ens' wraps", "9b498c0",
     "tests/test_app_simulate.py::test_max_batched_tokens_label_has_the_sidebar_width", LATER_TESTS),
    ("7 README never mentions PORT", "9b498c0",
     "tests/test_readme.py::test_readme_says_how_to_pick_the_port_and_the_makefile_honours_it", LATER_TESTS),
]


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def resolve(commit: str) -> str:
    """A hash, or 'subject:TEXT' = the newest commit in HEAD's history whose message contains TEXT."""
    if not commit.startswith("subject:"):
        return commit
    found = git("log", "--format=%h", "-1", "--fixed-strings", f"--grep={commit.removeprefix('subject:')}", "HEAD")
    if not found:
        raise SystemExit(f"no commit in HEAD's history says {commit!r}")
    return found


def worktree(base: Path, name: str, commit: str, tests_from: str, files: list[str]) -> Path:
    """A detached worktree at `commit` with `files` (and test data) as in `tests_from`, the venv linked in."""
    path = base / name
    git("worktree", "add", "--detach", str(path), commit)
    git("checkout", tests_from, "--", "tests/data", *files, cwd=path)
    (path / ".venv").symlink_to((ROOT / ".venv").resolve())
    return path


def run_tests(where: Path, nodes: list[str]) -> dict[str, str]:
    """node -> 'passes', 'skipped' or 'fails: <pytest's message, shortened>' (a node pytest could not even
    collect, an import error, fails too; one failing parameter fails the node). One pytest per file:
    a node in a file that does not import stops a whole session."""
    seen: dict[str, list[str]] = {}
    collect_errors: dict[str, str] = {}  # test file -> why it did not import
    for i, file in enumerate(dict.fromkeys(n.split("::")[0] for n in nodes)):
        report = where / f"junit-{i}.xml"
        subprocess.run([str(where / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={report}", *[n for n in nodes if n.startswith(f"{file}::")]],
                       cwd=where, capture_output=True, text=True)
        if report.exists():
            _read_junit(report, seen, collect_errors)
    out = {}
    for node in nodes:
        states = seen.get(node, [collect_errors.get(node.split("::")[0], "fails: not collected")])
        out[node] = next((s for s in states if s.startswith("fails")), "passes" if "passes" in states else "skipped")
    return out


def _read_junit(report: Path, seen: dict[str, list[str]], collect_errors: dict[str, str]) -> None:
    for case in ET.parse(report).iter("testcase"):
        node = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name', '').split('[')[0]}"
        bad = [child for child in case if child.tag in ("failure", "error")]
        if bad:
            message = bad[0].get("message") or bad[0].tag
            if message == "collection failure":  # name the import that failed
                lines = [ln[1:].strip() for ln in (bad[0].text or "").splitlines() if ln.startswith("E ")]
                message = f"does not import: {lines[-1] if lines else message}"
            state = "fails: " + " ".join(message.split())[:110].replace("|", "/")
            if not case.get("classname"):  # a module that does not import: named "tests.test_x"
                collect_errors[case.get("name", "").replace(".", "/") + ".py"] = state
        else:
            state = "skipped" if any(child.tag == "skipped" for child in case) else "passes"
        seen.setdefault(node, []).append(state)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="audit only these fixing commits")
    args = ap.parse_args(argv)
    rows = [(r[0], resolve(r[1]), r[2], resolve(r[3] if len(r) == 4 else r[1])) for r in AUDIT]
    rows = [r for r in rows if not args.only or r[1] in args.only]
    base = Path(tempfile.mkdtemp(prefix="why-audit-"))
    (base / "shared").symlink_to(ROOT.parent / "shared")  # ../shared as the tests expect it
    results: dict[tuple[str, str], tuple[str, str]] = {}
    try:
        for commit, source in dict.fromkeys((r[1], r[3]) for r in rows):
            nodes = list(dict.fromkeys(r[2] for r in rows if (r[1], r[3]) == (commit, source)))
            files = sorted({n.split("::")[0] for n in nodes})
            before = run_tests(worktree(base, f"pre-{commit}-{source}", f"{commit}^", source, files), nodes)
            after = run_tests(worktree(base, f"fix-{commit}-{source}", commit, source, files), nodes)
            for node in nodes:
                results[(commit, node)] = (before[node], after[node])
                print(f"{commit} {node}: before {before[node]}, after {after[node]}", file=sys.stderr, flush=True)
    finally:
        for wt in base.glob("*-*"):
            git("worktree", "remove", "--force", str(wt))
        shutil.rmtree(base, ignore_errors=True)
    print("| Why item | test | fixing commit | before the fix | at the fix |")
    print("|---|---|---|---|---|")
    bad = 0
    for item, commit, node, _ in rows:
        before, after = results[(commit, node)]
        bad += not (before.startswith("fails") and after == "passes")
        print(f"| {item} | `{node}` | {commit} | {before} | {after} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

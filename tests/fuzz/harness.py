"""Run fuzz cases and classify what happened.

A case calls one entry point with one hostile input. Outcomes:
- "ok": accepted, and its `check` (if any) holds;
- "error": refused with an expected error type whose message is one line, no traceback text and no
  path of this checkout (pages show these messages to visitors);
- "wrong": accepted where it must be refused, or accepted with a wrong value (a silent wrong result);
- "traceback": any other exception; "crash": MemoryError/RecursionError/SystemExit other than 2;
- "hang": over the per-case time limit (SIGALRM);
- "unclear": refused in one line, but the message does not name what the case says it must
  (`names`: the field, row or file at fault).
"""

from __future__ import annotations

import contextlib
import io
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[2])
BAD = ("traceback", "hang", "crash", "wrong", "unclear")


@dataclass
class Case:
    entry: str  # which entry point (for the report)
    label: str  # which class of hostile input
    call: Callable[[], Any]
    expect: str = "either"  # "reject", "accept" or "either"
    check: Callable[[Any], bool] | None = None  # for accepted results: is the value right?
    errors: tuple[type[BaseException], ...] = (ValueError,)
    names: str | None = None  # a refusal must say this (the field, row or file at fault)


@dataclass
class Outcome:
    case: Case
    kind: str
    detail: str = ""
    seconds: float = 0.0


class _Timeout(Exception):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout


def run_case(case: Case, limit_s: float = 10.0) -> Outcome:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    start = time.perf_counter()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            value = case.call()
    except _Timeout:
        return Outcome(case, "hang", f"over {limit_s:g} s", time.perf_counter() - start)
    except SystemExit as exc:  # argparse and CLI mains
        text = err.getvalue()
        if exc.code == 2:
            return _message(case, text.strip(), time.perf_counter() - start)
        return Outcome(case, "crash", f"exit {exc.code}: {text[-200:]}", time.perf_counter() - start)
    except (MemoryError, RecursionError) as exc:
        return Outcome(case, "crash", type(exc).__name__, time.perf_counter() - start)
    except case.errors as exc:
        return _message(case, str(exc), time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - this is what the suite looks for
        return Outcome(case, "traceback", f"{type(exc).__name__}: {str(exc)[:200]}", time.perf_counter() - start)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    seconds = time.perf_counter() - start
    if isinstance(value, int) and not isinstance(value, bool) and case.entry.startswith("cli"):
        if value == 2:  # a CLI main returning 2 printed its error on stderr
            return _message(case, err.getvalue().strip(), seconds)
        if value != 0:
            return Outcome(case, "crash", f"exit {value}", seconds)
    if case.expect == "reject":
        return Outcome(case, "wrong", f"accepted: {str(value)[:120]}", seconds)
    if case.check is not None and not case.check(value):
        return Outcome(case, "wrong", f"wrong value: {str(value)[:120]}", seconds)
    return Outcome(case, "ok", "", seconds)


def _message(case: Case, text: str, seconds: float) -> Outcome:
    if case.expect == "accept":
        return Outcome(case, "wrong", f"refused a good input: {text[:160]}", seconds)
    if not text or "\n" in text or "Traceback" in text:
        return Outcome(case, "traceback", f"not one line: {text[:200]!r}", seconds)
    if ROOT + "/" in text and not case.entry.startswith("cli"):  # the CLI may name the file the user gave
        return Outcome(case, "traceback", f"server path in message: {text[:200]}", seconds)
    if case.names is not None and case.names not in text:
        return Outcome(case, "unclear", f"does not name {case.names!r}: {text[:200]}", seconds)
    return Outcome(case, "error", text[:200], seconds)


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def counts(self) -> Counter:
        return Counter(o.kind for o in self.outcomes)

    def bad(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind in BAD]

    def table(self) -> str:
        by_entry: dict[str, Counter] = {}
        for o in self.outcomes:
            by_entry.setdefault(o.case.entry, Counter())[o.kind] += 1
        kinds = ("ok", "error", *BAD)
        lines = [f"{'entry point':<22}" + "".join(f"{k:>10}" for k in kinds)]
        for entry, c in sorted(by_entry.items()):
            lines.append(f"{entry:<22}" + "".join(f"{c[k]:>10}" for k in kinds))
        total = self.counts
        lines.append(f"{'total':<22}" + "".join(f"{total[k]:>10}" for k in kinds))
        lines += [f"  {o.kind}: {o.case.entry} / {o.case.label}: {o.detail}" for o in self.bad()]
        return "\n".join(lines)


def run_all(cases: Iterable[Case], limit_s: float = 10.0, budget_s: float | None = None) -> Report:
    report = Report()
    start = time.perf_counter()
    for case in cases:
        report.outcomes.append(run_case(case, limit_s))
        if budget_s is not None and time.perf_counter() - start > budget_s:
            break
    return report

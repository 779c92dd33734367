"""Helpers shared by the CLI subcommands: the one-line error type and JSON output."""

from __future__ import annotations

import json
import sys
from typing import Any


class CliError(Exception):
    """Raised by a subcommand for bad input: printed as one line, exit code 2."""


def user_errors() -> tuple[type[BaseException], ...]:
    """Exception types that carry a one-line, user-facing message (no traceback wanted)."""
    from models.gpus import GpuError
    from models.spec import SpecError
    from sim.report.snapshot import SnapshotError
    from sim.scenario import ScenarioError
    from sim.timing.cost_model import ProfileError
    from sim.trace import TraceError

    return (CliError, ScenarioError, SpecError, GpuError, TraceError, SnapshotError, ProfileError)


def file_error_line(exc: OSError) -> str:
    """`<file>: <reason>` for an OSError that escaped a subcommand (the file the user named)."""
    from sim.guard.files import why

    return f"{exc.filename}: {why(exc)}" if exc.filename else why(exc)


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")

"""CLI: python -m sim <subcommand> ...  (one file per subcommand in sim/cli/, one registry line here)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> module in sim/cli/ exposing add_parser(subparsers) and run(args) -> int
SUBCOMMANDS: dict[str, str] = {
    "kv": "sim.cli.kv",
    "capacity": "sim.cli.capacity",
    "trace": "sim.cli.trace",
    "run": "sim.cli.run",
    "compare": "sim.cli.compare",
    "validate": "sim.cli.validate",
    "calibrate": "sim.cli.calibrate",
    "observe": "sim.cli.observe",
    "search": "sim.cli.search",
    "snapshots": "sim.cli.snapshots",
}


def build_parser() -> argparse.ArgumentParser:
    from sim.guard.cli_parser import OneLineParser

    parser = OneLineParser(prog="python -m sim", description="kvsim: KV-cache capacity planning")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        module = importlib.import_module(module_name)
        sub = module.add_parser(subparsers)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from sim.cli.common import file_error_line, user_errors

    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except user_errors() as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file named on the command line: unreadable, a folder, a full disk, ...
        print(f"error: {file_error_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""What `python -m gpu_backend run` prints and writes, whichever engine measured the run."""

from __future__ import annotations

import argparse

from sim.cli.common import print_json


def report_run(result, args: argparse.Namespace, footer: str) -> None:
    """Frames (+ step_log.csv) to --out, the summary as JSON or text with a one-line footer."""
    from sim.cli.run import format_summary, write_outputs

    if args.out:
        d = write_outputs(result, args.out)
        result.extra["step_log"].to_csv(d / "step_log.csv", index=False)
    if args.json:
        print_json(result.summary)
    else:
        print(format_summary(result.summary))
        print(footer)

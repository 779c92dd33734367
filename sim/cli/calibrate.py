"""`python -m sim calibrate (--run RUN_DIR | --gpu-profile FILE) [--out P.json]`: fit a v2 profile.

--run: a measured vLLM run (the run-record format of `sim validate`), fitted by replay;
--gpu-profile: a `python -m gpu_backend profile` output, refitted in the v2 form from its raw rows.
The profile is then used with `python -m sim run/validate --profile P.json` (docs/CALIBRATION.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sim.cli.run_source import add_run_args


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("calibrate", help="fit a calibration profile (v2) from measurements",
                              description="Fit a calibration profile from a measured vLLM run (by replay) or a "
                              "GPU-backend profile run.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", metavar="RUN_DIR", help="measured run: a run directory, .zip or benchmark file (as sim validate)")
    src.add_argument("--gpu-profile", metavar="FILE", help="profile JSON from `python -m gpu_backend profile`")
    p.add_argument("--out", metavar="FILE", help="where to write the profile (default: a temporary file)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_run_args(p)
    return p


def run(args: argparse.Namespace) -> int:
    from sim.cli.run_source import load_measured
    from sim.fidelity import calibrate

    if args.gpu_profile:
        profile = calibrate.from_gpu_profile(args.gpu_profile)
    else:
        bar = None
        if not args.no_progress and sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(total=calibrate.MAX_REPLAYS, desc="replays", file=sys.stderr, leave=False)

        def tick(fraction: float) -> None:
            if bar is not None:
                bar.update(round(fraction * calibrate.MAX_REPLAYS) - bar.n)

        try:
            profile = calibrate.from_run(load_measured(args.run, args), progress=tick)
        finally:
            if bar is not None:
                bar.close()
    path = calibrate.write_profile(profile, args.out)
    print(calibrate.describe(profile))
    print(f"wrote {path}")
    return 0

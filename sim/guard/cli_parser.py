"""argparse that answers a bad flag with one line plus "see --help" (exit 2), not a page of usage."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are `error: <prog>: <problem> (see <prog> --help)`; subparsers inherit it."""

    def error(self, message: str) -> NoReturn:
        first = message.splitlines()[0] if message else "bad arguments"
        sys.stderr.write(f"error: {self.prog}: {first} (see {self.prog} --help)\n")
        sys.exit(2)


def bounded_int(lo: int, hi: int):
    """An argparse `type` for whole numbers in [lo, hi]: counts are never unbounded."""

    def convert(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range ({lo} to {hi:,})")
        return value

    convert.__name__ = "whole number"
    return convert


def bounded_float(lo: float, hi: float, *, lo_open: bool = False):
    """An argparse `type` for finite numbers in [lo, hi] ((lo, hi] with lo_open)."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        ok = (value > lo if lo_open else value >= lo) and value <= hi
        if not ok:  # NaN fails both comparisons
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be in {'(' if lo_open else '['}{lo:g}, {hi:g}]")
        return value

    convert.__name__ = "number"
    return convert

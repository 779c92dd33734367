"""The one validation layer for untrusted input.

- limits.py: bounds for every size and count (one table).
- values: strict single-value checks (`whole`, `number`, `flag`), defined in models/strict.py so
  models/ can use them without importing sim/; re-exported here.
- files.py: reading and writing user-named files with one-line errors.
- cli_parser.py: argparse with one-line errors and bounded number types.
- text.py: messages and user text made safe to show (one line, no server paths, no Markdown).
Every entry point (CLI, pages, store, URL parameters) goes through these.
"""

from models.safe_json import loads as load_json
from models.strict import flag, number, whole

__all__ = ["flag", "load_json", "number", "whole"]

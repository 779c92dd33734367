"""The one validation layer for untrusted input.

- limits.py: bounds for every size and count (one table).
- values: strict single-value checks, defined in models/strict.py so models/ can use them without
  importing sim/; re-exported here. `bounded` is the one check of a number read from a file, a link
  or a flag (finite, the field's own range, integers within 64 bits, never through float());
  `whole`/`number` are its two shapes, `bounded_all` its column form, `numbers_within` bounds every number of a whole document.
- files.py: reading and writing user-named files with one-line errors.
- cli_parser.py: argparse with one-line errors and bounded number types.
- text.py: messages and user text made safe to show (one line, no server paths, no Markdown).
Every entry point (CLI, pages, store, URL parameters) goes through these.
"""

from models.safe_json import loads as load_json
from models.strict import bounded, bounded_all, flag, number, numbers_within, whole

__all__ = ["bounded", "bounded_all", "flag", "load_json", "number", "numbers_within", "whole"]

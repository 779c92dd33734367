"""Reading untrusted JSON files (configs, GPU definitions, calibration profiles) one safe way.

Size-bounded before reading, UTF-8 only, parsed by json (never pickle or eval), and every failure
is the caller's own error type with a one-line message naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json_file(path: str | Path, *, max_bytes: int, error: type[Exception], what: str) -> Any:
    """Parse `path` as JSON; raise `error("<path>: <problem>")` for anything wrong.

    `what` names the kind of file in the size message ("a config.json", "a profile", ...).
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise error(f"{p}: {size} bytes is too large for {what} (limit {max_bytes})")
        return json.loads(p.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise error(f"{p}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise error(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None

"""Text that came from outside, made safe to show: one line, no server paths, no Markdown/HTML."""

from __future__ import annotations

import os
import re
from pathlib import Path

# Markdown that could add links, images, HTML or formatting: escaped wherever it appears. "_" only at a
# word edge (snake_case stays readable), ":" only before "//" (no autolinks), "-"/"+"/"." only where they
# would start a list.
_MARKDOWN = re.compile(r"([\\`*{}\[\]()<>#!|~$]|(?<!\w)_|_(?!\w)|^[-+]|(?<=^\d)\.)")
_HERE = str(Path(__file__).resolve().parents[2])  # the checkout


def one_line(exc: BaseException | str, limit: int = 300) -> str:
    """The first line of an error message (or the exception type when it has none), shortened."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else (type(exc).__name__ if isinstance(exc, BaseException) else "error")
    return first if len(first) <= limit else first[: limit - 3] + "..."


def without_paths(text: str) -> str:
    """Replace absolute server paths by their last part (messages shown to dashboard visitors)."""
    for root in sorted({_HERE, os.path.expanduser("~"), "/tmp"}, key=len, reverse=True):
        if root and root != "/":
            text = text.replace(root + os.sep, "")
    return re.sub(r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+)", r"\1", text)


def public_error(exc: BaseException | str) -> str:
    """One line, no server paths, no Markdown: what a page may show to anyone who can open it."""
    return plain(without_paths(one_line(exc)))


_AUTOLINK = re.compile(r"(://|(?<![\w.])www\.|@)", re.IGNORECASE)
ZWSP = "\u200b"  # zero-width space: invisible, but no URL or e-mail address is recognised across it


def plain(text: str) -> str:
    """User text (snapshot names, ids from links, file names) escaped so Markdown shows it literally.
    GFM turns bare URLs into links even when escaped, so those get an invisible break instead."""
    text = _MARKDOWN.sub(lambda m: "\\" + m.group(0), " ".join(str(text).split()))
    return _AUTOLINK.sub(lambda m: m.group(0)[0] + ZWSP + m.group(0)[1:], text)

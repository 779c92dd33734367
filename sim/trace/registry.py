"""Known trace formats. Adding one = a file in formats/ defining FORMAT, plus one line here.

Detection order matters only when two formats could both match a header; the specific ones come
first and the generic format last.
"""

from __future__ import annotations

from sim.trace.formats import azure, burstgpt, generic, mooncake, splitwise, vidur
from sim.trace.model import TraceFormat

FORMATS: dict[str, TraceFormat] = {
    "azure": azure.FORMAT,
    "burstgpt": burstgpt.FORMAT,
    "mooncake": mooncake.FORMAT,
    "vidur": vidur.FORMAT,
    "splitwise": splitwise.FORMAT,
    "generic": generic.FORMAT,
}

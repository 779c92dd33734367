"""One step-time source per comparison: rows timed by measured kernels and rows timed by the roofline
must not sit side by side unannounced (int8 KV on the roofline once read 25-30% faster than bf16 on
measured tables, and a Plan bought 24 GPUs instead of 32 on it).

Measured and derived tables (sim/timing/measured_db.py: a variant without kernels scaled from the
nearest measured one, labelled "derived") count as one family. Where a comparison on `auto` would
still mix measured and roofline rows (a GPU, weight dtype or TP the tables lack), every row falls
back to the roofline together and the note says why. A mix the scenarios asked for explicitly
(cost_source or a calibration profile) is kept and named.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from sim.scenario import Scenario

MEASURED = ("measured-db", "derived")


def family(source: str) -> str:
    """"measured" for measured and derived tables, else the source's own name."""
    return "measured" if source in MEASURED else source


@dataclass(frozen=True)
class OneSource:
    """The scenarios to run (possibly all moved to the roofline) and what the comparison says."""

    scenarios: tuple[Scenario, ...]
    source: str  # "measured kernels", "roofline", "profile" or "mixed (as asked)"
    note: str  # one sentence for the page, the CLI and the report


@lru_cache(maxsize=256)
def _source_and_why(scenario: Scenario) -> tuple[str, str]:
    from models.gpus import get_gpu
    from sim.run.deployment import Deployment
    from sim.timing.cost_model import CostModel

    try:
        cm = CostModel.from_scenario(Deployment.model_of(scenario), get_gpu(scenario.gpu), scenario)
    except Exception:  # the run itself reports a model or profile it cannot load, in one line
        return "", ""
    return cm.source, cm.source_detail


def source_of(scenario: Scenario) -> str:
    """The step-time source a run of this scenario uses ("" when it cannot resolve)."""
    return _source_and_why(scenario)[0]


def one_source(scenarios: Sequence[Scenario]) -> OneSource:
    """The comparison's scenarios on one step-time family (module doc)."""
    found = [_source_and_why(s) for s in scenarios]
    families = {family(src) for src, _ in found if src}
    derived = sum(1 for src, _ in found if src == "derived")
    label = {"measured": "measured kernels", "roofline": "roofline", "profile": "calibration profile"}
    if len(families) <= 1:
        fam = next(iter(families), "roofline")
        extra = f" ({derived} row(s) derived from the nearest measured tables, labelled)" if derived else ""
        return OneSource(tuple(scenarios), label.get(fam, fam), f"Step times: {label.get(fam, fam)} for every row{extra}.")
    if all(s.cost_source == "auto" and not s.profile for s in scenarios):
        why = next((detail for src, detail in found if src == "roofline" and detail), "")
        moved = tuple(s.replace(cost_source="roofline") for s in scenarios)
        return OneSource(moved, "roofline", "Step times: roofline for every row, so the rows compare like with like "
                         f"(measured kernels do not cover them all: {why.removeprefix('measured kernels not used: ')}).")
    names = ", ".join(sorted(families))
    return OneSource(tuple(scenarios), "mixed (as asked)",
                     f"Step times differ between rows as the scenarios ask ({names}): differences include the source.")

"""`--fleet FILE`: a fleet described in JSON (or YAML: a .yaml/.yml file), applied on top of the
command line's scenario.

    {"router": "kv-precise", "router_kv_weight": 4, "replicas": 4}
    {"router": "least-outstanding", "kv_link": "rdma-200g", "kv_layer_pipelined": true,
     "pools": [{"role": "prefill", "replicas": 1, "tp": 2}, {"role": "decode", "replicas": 3, "tp": 1}]}

    router: least-outstanding
    pools:
      - {role: prefill, replicas: 1, tp: 2}
      - {role: decode, replicas: 3}

Top-level keys are the Scenario's fleet fields; `pools` is either one aggregated pool or one prefill
and one decode pool (xPyD). Unknown keys, wrong roles and bad values are one line naming the file and
the field; the Scenario then checks every value as for any other entry point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.safe_json import loads
from sim.errors import ScenarioError
from sim.scenario import Scenario

TOP = ("router", "router_kv_weight", "decode_router", "replicas", "tp", "gpus_per_node", "kv_link", "kv_layer_pipelined", "pools")
POOL = ("role", "replicas", "tp")
MAX_BYTES = 64 * 1024
YAML_SUFFIXES = (".yaml", ".yml")
MAX_DEPTH = 16  # a fleet description is three levels deep


def fleet_changes(data: Any, source: str) -> dict[str, Any]:
    """Scenario field changes from a parsed fleet description (ScenarioError naming `source`)."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: expected an object (a mapping of keys to values)")
    unknown = sorted(map(str, set(data) - set(TOP)))
    if unknown:
        raise ScenarioError(f"{source}: unknown key(s) {_few(unknown)} (known: {', '.join(TOP)})")
    changes = {k: v for k, v in data.items() if k != "pools"}
    pools = data.get("pools")
    if pools is None:
        return changes
    if not isinstance(pools, list) or not pools or not all(isinstance(p, dict) for p in pools):
        raise ScenarioError(f"{source}: pools must be a list of objects")
    for i, pool in enumerate(pools):
        bad = sorted(map(str, set(pool) - set(POOL)))
        if bad:
            raise ScenarioError(f"{source}: pools[{i}]: unknown key(s) {_few(bad)} (known: {', '.join(POOL)})")
    roles = [p.get("role", "aggregated") for p in pools]
    if roles == ["aggregated"]:
        changes.update({k: pools[0][k] for k in ("replicas", "tp") if k in pools[0]})
        changes["pd"] = None
        return changes
    if not all(isinstance(r, str) for r in roles) or sorted(roles) != ["decode", "prefill"]:
        raise ScenarioError(f"{source}: pools: one aggregated pool, or one prefill and one decode pool (got roles {roles})")
    by_role = {p["role"]: p for p in pools}
    n_p, n_d = by_role["prefill"].get("replicas", 1), by_role["decode"].get("replicas", 1)
    if not (isinstance(n_p, int) and isinstance(n_d, int)) or isinstance(n_p, bool) or isinstance(n_d, bool):
        raise ScenarioError(f"{source}: pools: replicas must be whole numbers")
    changes.update(pd=f"{n_p}:{n_d}", prefill_tp=by_role["prefill"].get("tp"), decode_tp=by_role["decode"].get("tp"))
    return changes


def _few(names: list[str], shown: int = 8) -> str:
    """The first names, each cut to 40 characters, and how many more: one line, however many."""
    text = ", ".join(n[:40] for n in names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def apply_fleet_file(scenario: Scenario, path: str) -> Scenario:
    """The scenario with the fleet in `path` applied (one-line ScenarioError for any problem)."""
    p = Path(path)
    try:
        raw = p.read_bytes() if p.stat().st_size <= MAX_BYTES else None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if raw is None:
        raise ScenarioError(f"{path}: larger than {MAX_BYTES // 1024} KiB, not a fleet description")
    data = _yaml(raw, path) if p.suffix.lower() in YAML_SUFFIXES else loads(raw, error=ScenarioError, source=path)
    changes = fleet_changes(data, path)
    try:
        return scenario.replace(**changes)
    except (ScenarioError, TypeError) as exc:
        raise ScenarioError(f"{path}: {exc}") from None


def _yaml(raw: bytes, path: str) -> Any:
    """YAML's safe subset (no tags to objects), without aliases (a small file of nested aliases can
    stand for an enormous document); every failure one line naming the file and the line."""
    import yaml

    try:
        text = raw.decode("utf-8")
        if _flow_depth(text) > MAX_DEPTH:  # PyYAML's parser slows quadratically with flow nesting
            raise ScenarioError(f"{path}: nested too deeply for a fleet description")
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise ScenarioError(f"{path}: YAML aliases (*name) are not accepted in a fleet file")
        return yaml.safe_load(text)
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{path}: not valid YAML ({getattr(exc, 'problem', None) or exc}{where})") from None
    except RecursionError:
        raise ScenarioError(f"{path}: nested too deeply for a fleet description") from None


def _flow_depth(text: str) -> int:
    """The deepest nesting of YAML flow brackets ([ and {), counted over the raw text (a bracket
    inside a quoted string counts too: a bound, not a parse)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest

"""`python -m sim compare (--trace|--synthetic) ... --variants "k=v,k=v;k=v"`: one trace, several
scenarios, one table. Each variant overrides the base scenario flags; presets name common sets
(sim/plan/compare_presets.py, the Compare page's too)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from sim.cli.common import CliError, print_json
from sim.cli.run import simulate_with_progress
from sim.cli.scenario_args import add_scenario_args, add_trace_args, scenario_from_args, trace_from_args
from sim.plan.compare_presets import COMPARE_PRESETS
from sim.report.summary_lines import pd_pools
from sim.scenario import Scenario

COLUMNS = (("variant", "{}"), ("step_source", "{}"), ("completed", "{}"), ("throughput_tok_s", "{:.1f}"), ("mean_batch_size", "{:.1f}"),
           ("ttft_p50_s", "{:.3f}"), ("tpot_p99_s", "{:.4f}"), ("e2e_p50_s", "{:.2f}"), ("preempt", "{}"),
           ("prefix_hit", "{:.1%}"), ("imbalance", "{:.2f}"), ("token_states", "{:.1%}"),
           ("reserved", "{:.1%}"), ("internal", "{:.1%}"), ("external", "{:.1%}"), ("free", "{:.1%}"))


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("compare", help="one trace through several scenarios, one table",
                              description="Replay one trace through variants of a base scenario.")
    add_trace_args(p)
    add_scenario_args(p)
    v = p.add_mutually_exclusive_group(required=True)
    v.add_argument("--variants", help='";"-separated variants of "field=value,..." (Scenario field names)')
    v.add_argument("--preset", choices=COMPARE_PRESETS.names(), help="a named set of variants, the Compare page's "
                   "(sim/plan/compare_presets.py; routing: every router on --replicas; pd: --replicas GPUs "
                   "aggregated vs every P:D split)")
    p.add_argument("--json", action="store_true", help="print a JSON list of {variant, scenario, summary, "
                   "step_time_source, step_times (the comparison's one source, in words)}")
    p.add_argument("--no-progress", action="store_true")
    return p


def parse_variants(text: str, base: Scenario) -> list[tuple[str, Scenario]]:
    """'allocator=contiguous,reserve=max;allocator=paged' -> [(label, Scenario)]; one-line errors."""
    types = {f.name: f.type for f in dataclasses.fields(Scenario)}
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        changes: dict[str, Any] = {}
        for item in part.split(","):
            key, sep, value = (s.strip() for s in item.partition("="))
            key = key.replace("-", "_")
            if not sep or key not in types:
                raise CliError(f"--variants: {item.strip()!r} is not field=value with a Scenario field")
            changes[key] = _convert(key, value, str(types[key]))
        out.append((part, base.replace(**changes)))
    if not out:
        raise CliError("--variants: no variant given")
    return out


def _convert(key: str, value: str, type_name: str) -> Any:
    if value.lower() in ("none", "") and "None" in type_name:
        return None
    try:
        if type_name.startswith("bool"):
            if value.lower() not in ("true", "false", "1", "0", "on", "off"):
                raise ValueError
            return value.lower() in ("true", "1", "on")
        if type_name.startswith("int"):
            return int(value)
        if type_name.startswith("float"):
            return float(value)
    except ValueError:
        raise CliError(f"--variants: {key}={value!r} is not a valid {type_name.split(' ')[0]}") from None
    return value


def row(label: str, s: dict[str, Any]) -> dict[str, Any]:
    kv = s["kv_breakdown_mean"]
    return {"variant": label, "step_source": s["cost_model"]["source"], "completed": s["completed"], "throughput_tok_s": s["throughput_tok_s"],
            "mean_batch_size": s["mean_batch_size"], "ttft_p50_s": s["ttft_s"]["p50"], "tpot_p99_s": s["tpot_s"]["p99"],
            "e2e_p50_s": s["e2e_s"]["p50"], "preempt": s["num_preemptions"], "prefix_hit": s.get("prefix_cache_hit_rate"),
            "imbalance": _imbalance(s), "token_states": kv["token_states"], "reserved": kv["reserved"],
            "internal": kv["internal_frag"], "external": kv["external_frag"], "free": kv["free"]}


def _imbalance(s: dict[str, Any]) -> Any:
    """The routing imbalance; a P/D fleet's as 'prefill/decode' (the summary's key is the prefill pool's)."""
    pools = pd_pools(s)
    if pools is None:
        return s.get("routing_imbalance")
    return "/".join(f"{p['routing_imbalance']:.2f}" for p in pools)


def format_table(rows: list[dict[str, Any]]) -> str:
    cells = [[name for name, _ in COLUMNS]]
    for r in rows:
        cells.append(["-" if r[name] is None else r[name] if isinstance(r[name], str) else fmt.format(r[name])
                      for name, fmt in COLUMNS])
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths,
                     strict=True))) for line in cells)


def run(args: argparse.Namespace) -> int:
    base = scenario_from_args(args)
    variants = (list(COMPARE_PRESETS.lookup(args.preset).variants(base).items()) if args.preset
                else parse_variants(args.variants, base))
    trace = trace_from_args(args)
    from sim.plan.one_source import one_source

    chosen = one_source([scenario for _, scenario in variants])
    variants = [(label, scenario) for (label, _), scenario in zip(variants, chosen.scenarios, strict=True)]
    results = []
    for label, scenario in variants:
        result = simulate_with_progress(trace, scenario, not args.no_progress and not args.json)
        results.append({"variant": label, "scenario": scenario.to_dict(), "summary": result.summary,
                        "step_time_source": result.summary["cost_model"]["source"], "step_times": chosen.note})
    if args.json:
        print_json(results)
    else:
        print(format_table([row(r["variant"], r["summary"]) for r in results]))
        if any(pd_pools(r["summary"]) is not None for r in results):  # its columns come from two pools
            print(PD_NOTE)
        print(chosen.note)
    return 0


PD_NOTE = ("P/D rows: prefix_hit is the prefill pool's (where prompts are looked up), imbalance is "
           "prefill/decode, preempt and the KV columns are the decode pool's (docs/METRICS.md).")

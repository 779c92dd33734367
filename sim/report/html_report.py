"""A self-contained HTML report of one result: what was not served, headline figures, the scenario,
and the same charts the dashboard shows, drawn as inline SVG (sim/report/svg.py) rather than with
the 4.8 MB plotly.js, so a bundled sample's report is a few hundred KB, opens offline with no
script, and can be mailed or attached to a ticket. Accepts a SimResult or a Snapshot (same
attribute names); it names the trace and, for a snapshot, the snapshot.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from models.kv_dtypes import get_kv_dtype
from sim.report import charts, fleet_charts
from sim.report.glossary import KV_BYTES, KV_PARTS
from sim.report.interval_words import interval_line, log_bounds
from sim.report.plan_answer import answer_html, drilled_row
from sim.report.served import latency_basis, load_verdict, not_served, rejection_fix, share
from sim.report.summary_lines import pd_pools
from sim.report.svg import figure_svg
from sim.report.tier_report import tier_section

GIB = float(1 << 30)


def _fmt_s(v: Any) -> str:
    if v is None:
        return "n/a"
    v = float(v)
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:,.2f} s"  # 2,054.39 s: an overloaded run waits long


def _get(summary: dict[str, Any], key: str, sub: str | None = None) -> Any:
    value = summary.get(key)
    if sub is not None:
        value = value.get(sub) if isinstance(value, dict) else None
    return value


TOKEN_SHARE_LABEL = "KV pool holding token states (avg)"


def headline_metrics(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures a planner reads first, as short (label, value) pairs; pages and the report share them.
    What was not served comes first: latency below is over completed requests only. A P/D fleet's
    labels name the pool a figure comes from (docs/METRICS.md)."""
    def num(v: Any, fmt: str) -> str:
        return "n/a" if v is None else format(float(v), fmt)

    def pct(v: Any) -> str:
        return "n/a" if v is None else f"{100 * float(v):.1f}%"

    total = summary.get("requests")
    decode = ", decode pool" if pd_pools(summary) is not None else ""  # a P/D fleet's gauges are its decode pool's

    def count_share(key: str) -> str:
        n = summary.get(key)
        if n is None:
            return "n/a"
        return f"{int(n):,}" + (f" ({share(int(n), int(total))})" if n and total else "")

    return [
        (f"completed (of {num(total, ',.0f')})", num(summary.get("completed"), ",.0f")),
        ("rejected", count_share("rejected")),
        ("unfinished", count_share("unfinished")),
        ("throughput", num(summary.get("throughput_tok_s"), ",.0f") + " tok/s"),
        ("TTFT p50", _fmt_s(_get(summary, "ttft_s", "p50"))),
        ("TTFT p99", _fmt_s(_get(summary, "ttft_s", "p99"))),
        ("TPOT p50", _fmt_s(_get(summary, "tpot_s", "p50"))),
        ("TPOT p99", _fmt_s(_get(summary, "tpot_s", "p99"))),
        ("E2E p99", _fmt_s(_get(summary, "e2e_s", "p99"))),
        ("running requests (avg)" + decode, num(summary.get("mean_batch_size"), ".1f")),
        ("preemptions" + decode, num(summary.get("num_preemptions"), ",.0f")),
        ("peak KV usage" + decode, pct(_get(summary, "kv_cache_usage_perc", "peak"))),
        (TOKEN_SHARE_LABEL + decode, _fraction(summary, "token_states")),
        ("prefix cache hits" + (", prefill pool" if decode else ""), pct(summary.get("prefix_cache_hit_rate"))),
    ]


def kv_pool_line(summary: dict[str, Any], allocator: str = "paged", kv_dtype: str | None = None,
                 tp: int = 1) -> str | None:
    """The KV pool as the run sized it (bytes per token, capacity, blocks): the figures GQA and the KV dtype
    move. Read from the summary, never recomputed here, so the page shows what the engine used. A
    contiguous pool is counted in token slots: it has no blocks. A KV dtype with scales says how it
    stores them (int8's per-token scales are why its bytes per token exceed fp8's)."""
    per_token, capacity = summary.get("bytes_per_token"), summary.get("kv_capacity_bytes")
    if not per_token or capacity is None:
        return None  # a snapshot from a backend that does not report them
    # "bytes per token" is one quantity everywhere (glossary KV_BYTES): per GPU, all layer groups; the
    # summary's figure is the replica's (all TP ranks), so it is divided here and shown beside it.
    tp = max(int(tp or 1), 1)
    line = f"KV pool: {int(per_token) // tp:,} bytes per token{_scales(kv_dtype)} per GPU, all layer groups"
    if tp > 1:
        line += f" ({int(per_token):,} per replica of {tp} GPUs)"
    line += f"; {float(capacity) / GIB:,.2f} GiB capacity"
    blocks, block_size = summary.get("num_blocks"), summary.get("block_size")
    if blocks and block_size and allocator == "contiguous":
        line += f" ({int(blocks) * int(block_size):,} token slots per replica, reserved contiguously)"
    elif blocks and block_size:
        line += f" ({int(blocks):,} blocks of {int(block_size)} tokens per replica)"
    return line


def _scales(kv_dtype: str | None) -> str:
    """' (int8, one fp32 scale per token ...)' for a dtype with scales: its registry description."""
    try:
        dtype = get_kv_dtype(kv_dtype) if kv_dtype else None
    except ValueError:  # a snapshot naming a dtype this server does not register
        return ""
    return f" ({dtype.description})" if dtype and dtype.scale_layout else ""


def _fraction(summary: dict[str, Any], key: str) -> str:
    """kv_breakdown_mean may hold bytes or fractions; a share of the five parts reads the same either way."""
    parts = summary.get("kv_breakdown_mean") or {}
    total = sum(float(v or 0) for v in parts.values())
    return "n/a" if total <= 0 else f"{100 * float(parts.get(key) or 0) / total:.1f}%"


def weights_bytes(result: Any) -> float | None:
    """Weight bytes for the whole deployment: the summary's figure when the engine gives one, else from the spec."""
    summary = result.summary
    for key in ("weights_bytes", "weight_bytes"):
        if summary.get(key):
            return float(summary[key])
    try:
        from sim.run.deployment import Deployment

        sc = result.scenario
        spec = Deployment.model_of(sc)  # a multimodal checkpoint's image encoder included (models/vision.py)
        return float(spec.weight_bytes(sc.weight_dtype) + spec.vision_weight_bytes(1)) * sc.replicas
    except Exception:  # an uploaded config no longer on disk: draw the KV pool alone
        return None


def _notices(summary: dict[str, Any]) -> str:
    """Overload and what was not served, above the headline table (the page shows the same)."""
    unserved = summary.get("rejected") or summary.get("unfinished")
    lines = [load_verdict(summary), not_served(summary) if unserved else None]
    fix = rejection_fix(summary)
    if fix is not None:
        lines.append(fix.text)
    return "".join(f'<p class="notice">{html.escape(line)}</p>' for line in lines if line)


def human(value: Any) -> str:
    """A scenario or summary value as people read it: no raw None/False, thousands separated."""
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {human(v)}" for k, v in value.items()) or "none"
    return str(value)


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(human(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def trace_name(result: Any) -> str:
    """The trace's file name (or synthetic spec) when the result knows it, else its digest."""
    source = (getattr(result, "trace_summary", None) or {}).get("source") or getattr(result, "trace_source", "")
    return str(source) if source else f"trace {result.trace_digest}"


def load_factor_words(speedup: float, level: float | None = None) -> str:
    """The load this run was made at: a Plan drill-down replays the trace at its row's level (the
    scenario's own speedup stays 1), a Simulate run at the scenario's speedup."""
    if level is not None:
        return (f"Load factor x{level:g}: the trace's arrivals {level:g} times as fast as recorded "
                "(the Plan row's largest rate meeting the SLO).")
    return f"Load factor x{speedup:g}" + (": the trace as recorded." if speedup == 1 else
                                          f": the trace's arrivals {speedup:g} times as fast as recorded.")


def _ratio(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "-"


def fleet_section(summary: dict[str, Any]) -> str:
    """The fleet's part of the report (docs/FLEET.md): router, imbalance, per-replica figures and
    requests routed; the P/D transfer totals. Empty for a single replica."""
    fleet = summary.get("fleet")
    if not fleet:
        return ""
    head: list[tuple[str, Any]] = [("router", fleet.get("router"))]
    if "kv_transfer_bytes" not in summary:  # (P/D: each pool's, below)
        head.append(("routing imbalance (max/mean)", _ratio(summary.get("routing_imbalance", 1.0))))
    else:
        t = summary.get("kv_transfer_s") or {}
        head += [("KV link", fleet.get("kv_link")), ("decode router", fleet.get("decode_router")), ("KV moved (GB)", f"{summary['kv_transfer_bytes'] / 1e9:,.2f}"),
                 ("transfer p50 / p99 (ms)", "-" if t.get("p50") is None else f"{t['p50'] * 1e3:.1f} / {t['p99'] * 1e3:.1f}"),
                 ("waited for decode blocks", summary.get("pd_waited_for_blocks")),
                 ("prompt tokens found on the decode side (not sent)", summary.get("pd_decode_hit_tokens", 0)),
                 ("GPUs", summary.get("gpus"))]
        head += [(f"{p.get('role')} pool", f"{p.get('replicas')} x TP{p.get('tp')} behind {p.get('router')}, routing imbalance "
                  f"{_ratio(p.get('routing_imbalance'))}") for p in pd_pools(summary) or ()]
    cols = ("routed", "prefix_cache_hit_rate", "kv_usage_mean", "kv_usage_peak", "queue_mean", "utilisation")
    rows = "".join(f"<tr><td>{html.escape(fleet_charts.replica_label(r))}</td>"  # 'decode 0' in a P/D fleet
                   + "".join(f"<td>{html.escape(human(r.get(c)))}</td>" for c in cols) + "</tr>"
                   for r in fleet.get("replicas") or [])
    table = f"<table><tr><th>replica</th>{''.join(f'<th>{c}</th>' for c in cols)}</tr>{rows}</table>"
    bars = figure_svg(fleet_charts.routed_bars(fleet.get("replicas") or []))
    return f"<h2>Fleet</h2>{_table(head)}{table}<figure>{bars}</figure>"


def html_report(result: Any, title: str = "kvsim report", trace: str | None = None) -> str:
    """The whole report as one HTML string; charts are inline SVG (sim/report/svg.py), so no script at all.
    `trace` names the trace when the result does not carry it (a SimResult from the CLI)."""
    figs = [charts.memory_timeline(result.steps, weights_bytes(result)), charts.queue_and_batch(result.steps),
            charts.kv_usage(result.steps), charts.latency_cdfs(result.requests, log_bounds(result.summary)),
            charts.preemptions(result.steps)]
    svgs = "\n".join(f'<figure id="chart-{i}">{figure_svg(f)}</figure>' for i, f in enumerate(figs))
    scenario_rows = list(result.scenario.to_dict().items())
    name = getattr(result, "name", "") or ""
    trace_label = trace or trace_name(result)
    heading = html.escape(f"{title}: {name}" if name else title)
    snapshot = f"Snapshot <b>{html.escape(name)}</b>. " if name else ""
    plan = getattr(result, "plan", None)
    row = drilled_row(plan, result.scenario.to_dict()) if plan else None
    answer = answer_html(plan) if plan else ""
    load = load_factor_words(result.scenario.speedup, plan["rows"][row].get("level") if plan and row is not None else None)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{heading}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #1f2937; }}
table {{ border-collapse: collapse; margin: 0.5rem 0 1.5rem; }}
th, td {{ border-bottom: 1px solid #e5e7eb; padding: 0.25rem 0.75rem; text-align: left; }}
th {{ font-weight: 600; color: #4b5563; }}
.notice {{ background: #fef3c7; border-left: 4px solid #f59e0b; padding: 0.4rem 0.75rem; }}
.cols {{ display: flex; gap: 3rem; flex-wrap: wrap; }}
figure {{ margin: 1rem 0; }}
.small {{ color: #6b7280; font-size: 0.85rem; }}
</style>
</head><body>
<h1>{heading}</h1>
<p>{snapshot}Trace <b>{html.escape(trace_label)}</b>; {html.escape(result.scenario.model)} on
{html.escape(result.scenario.gpu)}, {html.escape(result.scenario.allocator)} KV. {html.escape(load)}</p>
{answer}
<div class="cols">
<div><h2>Headline</h2>{_notices(result.summary)}{_table(headline_metrics(result.summary))}
<p>{html.escape(latency_basis(result.summary))}</p>
<p>{html.escape(interval_line(result.summary) or "")}</p>
<p>{html.escape(kv_pool_line(result.summary, result.scenario.allocator, result.scenario.kv_dtype, result.scenario.tp) or "")}</p></div>
<div><h2>Scenario</h2>{_table(scenario_rows)}</div>
</div>
<h2>Charts</h2>
{svgs}
{fleet_section(result.summary)}
{tier_section(result.summary, result.steps)}
<h2>What the words mean</h2>
<ul>{"".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in KV_PARTS + KV_BYTES)}</ul>
<p class="small">Trace digest <code>{html.escape(str(result.trace_digest))}</code>, scenario digest
<code>{html.escape(result.scenario.digest())}</code> (the same pair reproduces these numbers).</p>
</body></html>
"""


def write_html_report(result: Any, path: str | Path, title: str = "kvsim report", trace: str | None = None) -> Path:
    path = Path(path)
    path.write_text(html_report(result, title, trace), encoding="utf-8")
    return path

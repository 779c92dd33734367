"""The differences between compared runs, said in words, computed from their summary dicts only.

A table of twenty numbers hides the one that matters; a sentence like "paged runs 2.3x more
requests at once than contiguous on average, at about the same p99 TTFT" does not. Ratios are
always said as a number >= 1 with its direction ("12x lower"), never "0.0x"; rejections and
overload come first because they change what every other figure is computed over. Every figure in a
sentence is a ratio of two summary values, so the words can be checked against the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SAME = 0.10  # within 10% counts as "about the same"


def _val(summary: Mapping[str, Any], key: str, sub: str | None = None) -> float | None:
    v = summary.get(key)
    if sub is not None:
        v = v.get(sub) if isinstance(v, Mapping) else None
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _ratio(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old <= 0 or new < 0:
        return None
    return new / old


def _times(r: float) -> str:
    """A ratio >= 1 as people read it: 2.3x, 12x, 1,450x (never 0.0x: callers flip ratios below 1)."""
    return f"{r:,.0f}x" if r >= 10 else f"{r:.1f}x"


def _more_fewer(r: float, noun: str, more: str = "more", fewer: str = "fewer") -> str:
    if abs(r - 1) <= SAME / 2:
        return f"about as many {noun} as"
    return f"{_times(r)} {more} {noun} than" if r > 1 else f"{_times(1 / r)} {fewer} {noun} than"


def _higher_lower(r: float) -> str:
    return f"{_times(r)} higher" if r >= 1 else f"{_times(1 / r)} lower"


def _secs(v: float) -> str:
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:,.2f} s"


def token_state_share(summary: Mapping[str, Any]) -> float | None:
    """Share of the KV pool holding real token states (time-averaged), from kv_breakdown_mean."""
    parts = summary.get("kv_breakdown_mean")
    if not isinstance(parts, Mapping):
        return None
    total = sum(float(v or 0) for v in parts.values())
    return None if total <= 0 else float(parts.get("token_states") or 0) / total


def _rejections(name: str, summary: Mapping[str, Any], base_name: str, base: Mapping[str, Any]) -> list[str]:
    """Rejections first: they change what the other figures are computed over."""
    rej, rej0 = _val(summary, "rejected") or 0, _val(base, "rejected") or 0
    if rej != rej0:
        return [f"{name} rejects {rej:,.0f} requests, {base_name} {rej0:,.0f} (latency counts completed requests only)."]
    return []


def _overload(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Which runs fall behind and which keep up, said once for all (per pair it repeated the same run)."""
    slow = [n for n, s in summaries.items() if s.get("overloaded")]
    fine = [n for n, s in summaries.items() if not s.get("overloaded")]
    if not slow or not fine:
        return []
    if len(slow) == 1:
        fell = f"{slow[0]} cannot keep up with the arrivals (its queue is still growing when they stop)"
    else:
        fell = f"{_and(slow)} cannot keep up with the arrivals (their queues are still growing when they stop)"
    return [f"{fell}; {_and(fine)} {'keeps' if len(fine) == 1 else 'keep'} up."]


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def compare_pair(name: str, summary: Mapping[str, Any], base_name: str, base: Mapping[str, Any]) -> list[str]:
    """Sentences about `name` relative to `base_name`, after what was not served (describe_differences)."""
    out: list[str] = []
    done, done0 = _val(summary, "completed"), _val(base, "completed")
    if done is not None and done0 is not None and done != done0:
        out.append(f"{name} completes {done:.0f} of {_val(summary, 'requests') or 0:.0f} requests, {base_name} {done0:.0f}.")
    conc = _ratio(_val(summary, "mean_batch_size"), _val(base, "mean_batch_size"))
    ttft, ttft0 = _val(summary, "ttft_s", "p99"), _val(base, "ttft_s", "p99")
    thr = _ratio(_val(summary, "throughput_tok_s"), _val(base, "throughput_tok_s"))
    if conc is not None:
        sentence = f"{name} runs {_more_fewer(conc, 'requests at once')} {base_name} on average"
        t_ratio = _ratio(ttft, ttft0)
        if t_ratio is not None and ttft is not None and ttft0 is not None:
            if abs(t_ratio - 1) <= SAME:
                sentence += f", at about the same p99 TTFT ({_secs(ttft)} vs {_secs(ttft0)})"
            else:
                sentence += f", with p99 TTFT {_secs(ttft)} vs {_secs(ttft0)} ({_higher_lower(t_ratio)})"
        if thr is not None and abs(thr - 1) <= SAME / 2 and abs(conc - 1) > SAME:
            sentence += "; at the same throughput more requests at once means each stays longer, not more capacity"
        out.append(sentence + ".")
    if thr is not None and abs(thr - 1) > SAME / 2:
        out.append(f"{name} delivers {_more_fewer(thr, 'output tokens per second')} {base_name} "
                   f"({_val(summary, 'throughput_tok_s'):,.0f} vs {_val(base, 'throughput_tok_s'):,.0f} tok/s).")
    peak, peak0 = _val(summary, "kv_cache_usage_perc", "peak"), _val(base, "kv_cache_usage_perc", "peak")
    peak_ratio = _ratio(peak, peak0)
    if peak_ratio is not None and peak is not None and peak0 is not None and abs(peak_ratio - 1) > SAME:
        out.append(f"{name} peaks at {peak:.0%} of its KV pool in use, {base_name} at {peak0:.0%}.")
    share, share0 = token_state_share(summary), token_state_share(base)
    if share is not None and share0 is not None and abs(share - share0) >= 0.02:
        out.append(f"{name} uses {100 * share:.0f}% of its KV pool for token states, {base_name} {100 * share0:.0f}%.")
    pre, pre0 = _val(summary, "num_preemptions"), _val(base, "num_preemptions")
    if pre is not None and pre0 is not None and pre != pre0:
        out.append(f"{name} preempts {pre:,.0f} times, {base_name} {pre0:,.0f}.")
    return out


def describe_differences(summaries: Mapping[str, Mapping[str, Any]], baseline: str | None = None) -> list[str]:
    """Sentences comparing every run with the baseline (the first one unless named)."""
    names = list(summaries)
    if len(names) < 2:
        return []
    base_name = baseline if baseline is not None and baseline in summaries else names[0]
    base, others = summaries[base_name], [n for n in names if n != base_name]
    out = [s for n in others for s in _rejections(n, summaries[n], base_name, base)]  # what was not served first
    out += _overload(summaries)
    return out + [s for n in others for s in compare_pair(n, summaries[n], base_name, base)]


def comparison_rows(summaries: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The dashboard's side-by-side table: one row per run, shares of the KV pool in percent."""

    def pct(v: float | None) -> float | None:
        return None if v is None else round(100 * v, 1)

    rows = []
    for label, s in summaries.items():
        tpot = _val(s, "tpot_s", "p99")
        rows.append({"scenario": label, "completed": _val(s, "completed"), "rejected": _val(s, "rejected"),
                     "keeps up": "no (overloaded)" if s.get("overloaded") else "yes",
                     "throughput tok/s": _val(s, "throughput_tok_s"),
                     "TTFT p99 s": _val(s, "ttft_s", "p99"), "TPOT p99 ms": None if tpot is None else 1000 * tpot,
                     "running (avg)": _val(s, "mean_batch_size"),
                     "peak KV usage %": pct(_val(s, "kv_cache_usage_perc", "peak")),
                     "token states %": pct(token_state_share(s)), "preemptions": _val(s, "num_preemptions"),
                     "step times": (s.get("cost_model") or {}).get("source")})
    return rows

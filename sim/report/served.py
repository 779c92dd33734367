"""What a run did not serve, and whether it kept up, in plain sentences from its summary dict.

Latency and throughput are computed over completed requests only, so a run that rejects half its
trace, or whose queue is still growing when arrivals stop, can show fine headline numbers. These
sentences sit next to those numbers on every page, in the CLI summary and in the HTML report, and
a Fix names the one scenario change that would serve the rejected requests when there is one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

REJECT_WARN_SHARE = 0.01  # warn (with a fix) when more than 1% of the trace is rejected
REASONS = {  # summary key rejected_reasons -> why, in words
    "over_max_model_len": "the prompt is at least max_model_len",
    "over_kv_pool": "their K/V cannot fit the empty KV pool",
}
BINDING_WORDS = {  # plan's binding(...) names -> words (sim/run/verdict.py)
    "kv": "KV cache memory",
    "compute": "GPU compute",
    "token_budget": "the per-step token budget (max_batched_tokens)",
    "max_num_seqs": "the sequence limit (max_num_seqs)",
}


@dataclass(frozen=True)
class Fix:
    """A suggested change: `text` for people, `changes` (Scenario fields) when one click can apply it."""

    text: str
    changes: dict[str, Any] = field(default_factory=dict)


def _int(summary: Mapping[str, Any], key: str) -> int:
    try:
        return int(summary.get(key) or 0)
    except (TypeError, ValueError):
        return 0


def not_served(summary: Mapping[str, Any]) -> str:
    """One sentence: completed, rejected (by reason) and unfinished out of the trace."""
    total, done = _int(summary, "requests"), _int(summary, "completed")
    rejected, unfinished = _int(summary, "rejected"), _int(summary, "unfinished")
    if not rejected and not unfinished:
        return f"All {total:,} requests completed."
    parts = []
    if rejected:
        reasons = summary.get("rejected_reasons") or {}
        why = [f"{int(n):,} because {REASONS.get(k, k)}" for k, n in reasons.items() if n] if isinstance(reasons, Mapping) else []
        limit = _int(summary, "max_model_len")
        if why and limit:
            why[0] = why[0].replace("max_model_len", f"max_model_len ({limit:,} tokens)")
        parts.append(f"{rejected:,} rejected ({share(rejected, total)})" + (f": {'; '.join(why)}" if why else ""))
    if unfinished:
        parts.append(f"{unfinished:,} unfinished when the run stopped")
    return f"{done:,} of {total:,} requests completed; " + "; ".join(parts) + "."


def share(n: int, total: int) -> str:
    """n of total in percent, one decimal; a few requests of a long trace read "<0.1%", never "0.0%"."""
    if not total:
        return "n/a"
    return "<0.1%" if 0 < 100 * n / total < 0.05 else f"{100 * n / total:.1f}%"


def latency_basis(summary: Mapping[str, Any]) -> str:
    """What the latency percentiles and throughput are computed over."""
    done, total = _int(summary, "completed"), _int(summary, "requests")
    if done == total:
        return f"Latency percentiles and throughput are over all {total:,} requests."
    return (f"Latency percentiles and throughput are over the {done:,} completed requests only "
            f"({share(done, total)} of the trace); requests not served are not in them.")


def rejection_fix(summary: Mapping[str, Any]) -> Fix | None:
    """The change that would serve the rejected requests, when more than 1% of the trace is rejected."""
    total = _int(summary, "requests")
    reasons = summary.get("rejected_reasons") or {}
    if not total or not isinstance(reasons, Mapping):
        return None
    too_long, too_big = int(reasons.get("over_max_model_len") or 0), int(reasons.get("over_kv_pool") or 0)
    if too_long > REJECT_WARN_SHARE * total:
        need = _int(summary, "longest_prompt_tokens") + 1  # vLLM rejects prompt >= max_model_len
        context = _int(summary, "model_context_tokens")
        if context and need > context:
            return Fix(f"Use a model with a longer context: the longest prompt is {need - 1:,} tokens and this "
                       f"model reads at most {context:,}.")
        target = min(1 << (need - 1).bit_length(), context) if context else 1 << (need - 1).bit_length()
        return Fix(f"Raise max_model_len to {target:,} tokens (the longest prompt is {need - 1:,}).",
                   {"max_model_len": target})
    if too_big > REJECT_WARN_SHARE * total:
        return Fix("Give the KV pool more memory (a larger KV budget, higher GPU memory utilisation, more "
                   "tensor-parallel GPUs or a smaller KV dtype), or lower max_model_len.")
    return None


def overload_reasons(load: Mapping[str, Any]) -> str:
    """What users felt, in words (sim.run.verdict: the queue, backlog and growth rules)."""
    def num(key: str) -> float | None:
        v = load.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    reasons = load.get("reasons")
    if reasons is None:  # a summary from before the queue and backlog rules: the trend alone
        reasons = ["growing"]
    q, svc, drain = num("queue_p50_s"), num("service_mean_s"), num("drain_s")
    arrive, started = num("arrival_rate_rps"), num("started_rate_rps")
    words = []
    if "queue" in reasons:
        text = "the median request waited " + (f"{q:,.1f} s" if q is not None else "without end") + " in the queue"
        words.append(text + (f", against {svc:,.1f} s to serve it" if svc is not None else ""))
    if "backlog" in reasons:
        waiting = int(load.get("waiting_at_end") or 0)
        words.append(f"{waiting:,} requests were waiting at the last arrival, "
                     + (f"{drain:,.0f} s of work at the rate requests started" if drain is not None else "and none was starting"))
    if "growing" in reasons:
        text = "the queue was still growing when arrivals stopped"
        if arrive is not None and started is not None:
            text += f" ({arrive:,.2f} requests/s arrived and {started:,.2f}/s started in the second half)"
        words.append(text)
    return "; ".join(words)


def load_verdict(summary: Mapping[str, Any]) -> str | None:
    """A warning sentence when the run could not keep up with its arrivals, else None."""
    if not summary.get("overloaded"):
        return None
    load = summary.get("load") or {}
    text = f"Overloaded: this configuration cannot keep up with the trace: {overload_reasons(load)}"
    binding = summary.get("binding")
    if binding:
        text += f". Binding resource: {BINDING_WORDS.get(str(binding), str(binding))}"
    return text + ". Serve less load (a smaller load x K, --speedup) or add capacity."


def context_warning(summary: Mapping[str, Any]) -> str | None:
    """max_model_len above the model's own context: the run is a what-if vLLM would refuse."""
    limit, context = _int(summary, "max_model_len"), _int(summary, "model_context_tokens")
    if context and limit > context:
        return (f"max_model_len {limit:,} is above the model's context of {context:,} tokens: vLLM refuses such a "
                "setting, and the model was never trained on positions that far.")
    return None


def compared_verdicts(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """At most two warnings for a comparison (Compare): the runs that cannot keep up, in one sentence
    with each one's started rate and binding resource, then what was not served, said once when every
    run left the same requests unserved. Eight near-identical boxes pushed the comparison off screen."""
    out = []
    over = {name: s for name, s in summaries.items() if s.get("overloaded")}
    if over:
        each = []
        for name, s in over.items():
            load, binding = s.get("load") or {}, s.get("binding")
            started = load.get("started_rate_rps")
            rate = f" {started:,.2f} requests/s started" if isinstance(started, (int, float)) else ""
            binds = f"{';' if rate else ''} {BINDING_WORDS.get(str(binding), str(binding))} binds" if binding else ""
            each.append(f"{name} ({(rate + binds).strip()})" if rate or binds else name)
        arrive = next(((s.get("load") or {}).get("arrival_rate_rps") for s in over.values()), None)
        arrived = f" while {arrive:,.2f} requests/s arrived" if isinstance(arrive, (int, float)) else ""
        whom = "no run keeps up" if len(over) == len(summaries) else f"{len(over)} of {len(summaries)} runs cannot keep up"
        felt = "; ".join(f"{name}: {overload_reasons(s.get('load') or {})}" for name, s in over.items())
        out.append(f"Overloaded: {whom} with the trace{arrived}: {', '.join(each)}. What users feel: {felt}. "
                   "Serve less load (a smaller load x K) or add capacity.")
    unserved = {name: not_served(s) for name, s in summaries.items() if _int(s, "rejected") or _int(s, "unfinished")}
    if unserved:
        lines = set(unserved.values())
        if len(lines) == 1 and len(unserved) == len(summaries):
            out.append(f"Every run: {lines.pop()}")
        else:
            out.append("Not served: " + " ".join(f"{name}: {line}" for name, line in unserved.items()))
    return out

"""The CLI summary's lines for what a single plain replica lacks: the prefix cache, KV tiers, a
fleet's routing and replicas, a P/D fleet's pools and KV transfers. Each line reads only the run's
summary keys (docs/METRICS.md), so the text and `--json` never disagree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REPLICAS_LISTED = 16  # a fleet's per-replica lines; the rest are counted (`--json` lists them all)
GIB = 2**30


def pd_pools(s: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """A P/D fleet's (prefill, decode) rows of `fleet.pools`; None for any other run (or a snapshot
    without them). The CLI, `sim compare`, the report and the fleet view all ask it."""
    fleet = s.get("fleet")
    rows = fleet.get("pools") if isinstance(fleet, Mapping) else None
    by_role = {p.get("role"): p for p in rows or [] if isinstance(p, Mapping)}
    return (by_role["prefill"], by_role["decode"]) if {"prefill", "decode"} <= by_role.keys() else None


def kv_line(s: Mapping[str, Any]) -> str:
    """The KV pool: kv_capacity_bytes is summed over the replicas whose gauges the summary holds
    (a P/D fleet's: the decode pool's), num_blocks is one replica's."""
    pools = pd_pools(s)
    if pools is not None:
        over = f" over the decode pool's {pools[1].get('replicas')} replicas"
    else:
        replicas = int(s.get("replicas") or 1)
        over = f" over {replicas} replicas" if replicas > 1 else ""
    each = " each" if over else ""
    usage = s["kv_cache_usage_perc"]
    return (f"KV {s['kv_capacity_bytes'] / GIB:.2f} GiB{over} ({s['num_blocks']} blocks of {s['block_size']}{each}): "
            f"usage mean {usage['mean']:.1%} peak {usage['peak']:.1%}")


def prefix_line(s: Mapping[str, Any]) -> str | None:
    """vLLM's hit rate (hit tokens / prompt tokens looked up) with its two counters."""
    queries = s.get("prefix_cache_queries")
    if not queries:
        return None
    pool = " (the prefill pool's)" if pd_pools(s) is not None else ""
    return (f"prefix cache{pool}: {s['prefix_cache_hit_rate']:.1%} of looked-up prompt tokens hit "
            f"({s['prefix_cache_hits']:,} of {queries:,})")


def tier_line(s: Mapping[str, Any]) -> str | None:
    """Where prompt tokens were found (GPU and each lower tier the run has) and the bytes moved."""
    rates, moved = s.get("tier_hit_rate"), s.get("tier_bytes_moved") or {}
    if not rates:
        return None
    present = {part for key in s.get("tier_occupancy") or {} for part in key.split("/")}  # "cpu/replica0", "prefill/cpu/..."
    tiers = [t for t in moved if t in present]
    hits = ", ".join(f"{t.upper() if t != 'nvme' else 'NVMe'} {rates.get(t, 0.0):.1%}" for t in ["gpu", *tiers])
    flows = "; ".join(f"{t}: {moved[t].get('store', 0) / GIB:.2f} GiB stored, {moved[t].get('load', 0) / GIB:.2f} GiB loaded"
                      for t in tiers)
    delay = s.get("tier_load_delay_s") or {}
    wait = f"; load delay p99 {delay['p99'] * 1e3:.1f} ms over {delay['count']:,} loads" if delay.get("count") else ""
    return f"KV tiers: prompt tokens hit on {hits} (total {rates.get('total', 0.0):.1%}); {flows}{wait}"


def fleet_lines(s: Mapping[str, Any]) -> list[str]:
    """The router and its imbalance, a P/D fleet's pools and transfers, then one line per replica."""
    fleet = s.get("fleet")
    if not fleet:
        return []
    pools = pd_pools(s)
    lines = _pd_lines(s, *pools) if pools is not None else [
        f"fleet: {len(fleet['replicas'])} replicas behind {fleet['router']}, routing imbalance "
        f"{s.get('routing_imbalance', 1.0):.2f} (max / mean requests routed)"]
    rows = fleet["replicas"]
    hits = bool(s.get("prefix_cache_queries"))  # (no prefix caching: no hit rate to show)
    lines += [_replica_line(r, hits) for r in rows[:REPLICAS_LISTED]]
    if len(rows) > REPLICAS_LISTED:
        lines.append(f"  ... {len(rows) - REPLICAS_LISTED} more replicas (--json lists them all)")
    return lines


def _pd_lines(s: Mapping[str, Any], p: Mapping[str, Any], d: Mapping[str, Any]) -> list[str]:
    fleet = s["fleet"]
    link = fleet["kv_link"] + (", layer by layer" if fleet.get("layer_pipelined") else "")
    times = s.get("kv_transfer_s") or {}
    spread = f", transfer p50 {times['p50'] * 1e3:.1f} ms p99 {times['p99'] * 1e3:.1f} ms" if times.get("p50") is not None else ""
    lines = [f"P/D {p.get('replicas')}:{d.get('replicas')} on {s.get('gpus')} GPUs, KV over {link}: "
             f"{s.get('kv_transfers', 0):,} transfers, {s.get('kv_transfer_bytes', 0) / GIB:.2f} GiB{spread}; "
             f"{s.get('pd_waited_for_blocks', 0):,} waited for decode blocks; "
             f"{s.get('pd_decode_hit_tokens', 0):,} prompt tokens found in decode caches (not sent)"]
    for pool in (p, d):
        lines.append(f"{pool['role']} pool: {pool['replicas']} x TP{pool['tp']} behind {pool['router']}, routing imbalance "
                     f"{pool['routing_imbalance']:.2f}, KV usage mean {pool['kv_usage_mean']:.1%}, {pool['num_steps']:,} steps, "
                     f"{pool.get('num_preemptions', 0):,} preemptions")
    return lines


def _replica_line(r: Mapping[str, Any], hits: bool) -> str:
    pool = f" ({r['pool']})" if "pool" in r else ""
    hit = f"prefix hits {r['prefix_cache_hit_rate']:.1%}, " if hits else ""
    return (f"  replica {r['replica']}{pool}: {r['routed']:,} routed, {hit}KV mean {r['kv_usage_mean']:.1%} "
            f"peak {r['kv_usage_peak']:.1%}, queue mean {r['queue_mean']:.1f}, busy {r['utilisation']:.0%}")

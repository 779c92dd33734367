"""Shared argparse flags -> Scenario, for `python -m sim run/compare` and `python -m gpu_backend run`.

One place defines the knobs' flag names, so every CLI spells them the same and validation stays in
Scenario (one-line ScenarioError messages).
"""

from __future__ import annotations

import argparse
from typing import Any

from sim.scenario import CHOICES, Scenario

# flag dest -> Scenario field (same name unless listed)
FIELDS = ("model", "gpu", "tp", "replicas", "router", "router_kv_weight", "pd", "prefill_tp", "decode_tp", "kv_link",
          "kv_layer_pipelined", "decode_router", "gpus_per_node", "weight_dtype", "kv_dtype", "kv_heads", "kv_budget_gib", "kv_pool", "gpu_mem_util",
          "allocator", "block_size", "reserve", "placement", "prefix_caching", "prefix_cache_retention_interval", "kv_eviction", "expert_parallel", "expert_imbalance", "language_model_only", "max_num_seqs",
          "max_batched_tokens", "max_model_len", "chunked_prefill", "async_scheduling", "preemption", "swap_space_gib", "static_batch", "profile",
          "cost_source", "api_overhead_s", "seed", "speedup", "cpu_tier_gib", "nvme_tier_gib", "remote_tier_gib",
          "tier_policy", "cpu_tier_scope", "host_link_gb_s", "offload_layers")


def retention_interval(text: str) -> int | None:
    """--prefix-cache-retention-interval: tokens, or "none" (every block)."""
    if text.strip().lower() == "none":
        return None
    return int(text)


def add_language_model_only_arg(g: Any) -> None:
    """--language-model-only, vLLM's flag (Scenario.language_model_only, models/vision.py)."""
    g.add_argument("--language-model-only", action="store_true", default=Scenario.language_model_only,
                   help="a multimodal checkpoint served text-only (vLLM's flag): its image encoder is not loaded")


def add_async_scheduling_arg(g: Any, dest: str = "async_scheduling") -> None:
    """--async-scheduling / --no-async-scheduling, vLLM's flag (Scenario.async_scheduling); also
    `sim capacity`'s (the start-up line), `sim observe`'s and `sim validate`'s (a run's engine)."""
    g.add_argument("--async-scheduling", dest=dest, action=argparse.BooleanOptionalAction,
                   default=Scenario.async_scheduling, help="vLLM's async scheduling (default: vLLM's, on for a GPU): two batches in flight, "
                   "so a sliding or chunked group's admission cap and the start-up 'Maximum concurrency' "
                   "count 2 x max-batched-tokens, 1 x with --no-async-scheduling (kvsim's steps stay synchronous)")


def add_trace_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="PATH", help="trace file (any supported format, see docs/TRACES.md)")
    src.add_argument("--synthetic", metavar="SPEC", help='synthetic trace spec, e.g. "preset=sharegpt-like,n=1000,rate=5"')
    p.add_argument("--format", dest="trace_format", help="trace format (default: detected)")


def add_scenario_args(p: argparse.ArgumentParser, *, model_required: bool = True) -> None:
    d = Scenario()
    g = p.add_argument_group("scenario")
    g.add_argument("--model", required=model_required, default=d.model, help="catalog name, HF id or config.json")
    g.add_argument("--gpu", default=d.gpu, help="GPU catalog name or a custom GPU JSON (default %(default)s)")
    g.add_argument("--tp", type=int, default=d.tp, help="tensor-parallel GPUs per replica")
    g.add_argument("--replicas", type=int, default=d.replicas, help="data-parallel replicas behind --router")
    g.add_argument("--router", default=d.router, choices=CHOICES["router"].names(),
                   help="which replica serves each request (default %(default)s; docs/FLEET.md)")
    g.add_argument("--router-kv-weight", type=float, default=d.router_kv_weight,
                   help="kv-precise/kv-approx: cost of one uncached prompt block vs one block of load (default %(default)s)")
    g.add_argument("--pd", metavar="P:D", help="disaggregated: P prefill and D decode replicas (replaces --replicas)")
    g.add_argument("--prefill-tp", type=int, help="--pd: TP of each prefill replica (default --tp)")
    g.add_argument("--decode-tp", type=int, help="--pd: TP of each decode replica (default --tp)")
    g.add_argument("--kv-link", default=d.kv_link, choices=CHOICES["kv_link"].names(),
                   help="--pd: the link the KV crosses (default %(default)s; docs/OPTIONS.md)")
    g.add_argument("--kv-layer-pipelined", action="store_true", default=d.kv_layer_pipelined,
                   help="--pd: send each layer's KV as it is computed (NIXL / Mooncake layer-wise)")
    g.add_argument("--decode-router", default=d.decode_router, choices=CHOICES["decode_router"].names(),
                   help="--pd: which decode replica takes each prefilled request (default %(default)s)")
    g.add_argument("--gpus-per-node", type=int, default=d.gpus_per_node,
                   help="GPUs per node: replicas of one node share its NVMe KV tier (default %(default)s)")
    g.add_argument("--weight-dtype", default=d.weight_dtype, choices=CHOICES["weight_dtype"].names())
    g.add_argument("--kv-dtype", default=d.kv_dtype, choices=CHOICES["kv_dtype"].names())
    g.add_argument("--kv-heads", type=int, help="GQA what-if: N kv heads")
    g.add_argument("--expert-parallel", action="store_true", default=d.expert_parallel,
                   help="MoE: place whole experts on the TP ranks (step time follows the busiest rank)")
    g.add_argument("--expert-imbalance", type=float, default=d.expert_imbalance,
                   help="MoE with --expert-parallel: max / mean routed load per rank (default %(default)s)")
    add_language_model_only_arg(g)
    g.add_argument("--kv-eviction", help="cap KV per sequence: window:N, streaming:SINKS+RECENT or h2o:N "
                   "(memory only: output quality is not modelled)")
    g.add_argument("--kv-budget-gib", type=float, help="KV pool per replica in GiB (default: derived from the GPU)")
    g.add_argument("--kv-pool", default=d.kv_pool, choices=CHOICES["kv_pool"].names(),
                   help="who sizes the KV pool from the GPU: kvsim's budget or vLLM's num_gpu_blocks "
                   "(default %(default)s; docs/OPTIONS.md)")
    g.add_argument("--gpu-mem-util", type=float, default=d.gpu_mem_util)
    g.add_argument("--allocator", default=d.allocator, choices=CHOICES["allocator"].names())
    g.add_argument("--block-size", type=int, default=d.block_size)
    g.add_argument("--reserve", default=d.reserve, choices=CHOICES["reserve"].names(), help="contiguous reservation policy")
    g.add_argument("--placement", default=d.placement, choices=CHOICES["placement"].names(), help="contiguous placement")
    g.add_argument("--prefix-caching", action="store_true", default=d.prefix_caching)
    g.add_argument("--prefix-cache-retention-interval", type=retention_interval, metavar="N|none",
                   default=d.prefix_cache_retention_interval,
                   help="vLLM's: sliding-window and state blocks the prefix cache keys; 0 = only where a request "
                   "may resume (default), N = also every N tokens, none = every block")
    g.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    g.add_argument("--max-batched-tokens", type=int, default=d.max_batched_tokens)
    g.add_argument("--max-model-len", type=int, help="default: min(model context, 32768)")
    g.add_argument("--chunked-prefill", action=argparse.BooleanOptionalAction, default=d.chunked_prefill)
    add_async_scheduling_arg(g)
    g.add_argument("--preemption", default=d.preemption, choices=CHOICES["preemption"].names())
    g.add_argument("--swap-space-gib", type=float, default=d.swap_space_gib)
    g.add_argument("--cpu-tier-gib", type=float, default=d.cpu_tier_gib,
                   help="KV tier in CPU DRAM per replica, GiB (0: none; docs/TIERS.md)")
    g.add_argument("--nvme-tier-gib", type=float, default=d.nvme_tier_gib, help="KV tier on local NVMe per node, GiB")
    g.add_argument("--remote-tier-gib", type=float, default=d.remote_tier_gib,
                   help="shared remote KV store (Mooncake Store, LMCache server), GiB")
    g.add_argument("--tier-policy", default=d.tier_policy, choices=CHOICES["tier_policy"].names(),
                   help="when blocks go to the lower tiers (default %(default)s)")
    g.add_argument("--cpu-tier-scope", default=d.cpu_tier_scope, choices=CHOICES["cpu_tier_scope"].names(),
                   help="one CPU tier per replica, or one per node shared by its replicas (default %(default)s)")
    g.add_argument("--host-link-gb-s", type=float, help="GPU-host link GB/s per GPU and direction (default: the GPU entry's)")
    g.add_argument("--offload-layers", type=float, default=d.offload_layers, metavar="F",
                   help="fraction of layers whose KV lives in CPU memory, read over the host link every decode step")
    g.add_argument("--static-batch", type=int, metavar="B", help="static-batching baseline with batch size B")
    g.add_argument("--profile", metavar="PATH", help="calibration profile JSON (docs/CALIBRATION.md)")
    g.add_argument("--cost-source", default=d.cost_source, choices=CHOICES["cost_source"].names(),
                   help="step times: auto = measured kernels (aiconfigurator-core) where covered, else roofline")
    g.add_argument("--api-overhead-s", type=float, default=d.api_overhead_s,
                   help="client-side HTTP + tokenisation time added before the engine sees a request "
                   "(0: latencies as the engine's own timestamps count them)")
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--speedup", type=float, default=d.speedup, metavar="K",
                   help="load dial: replay the trace K times faster (arrival times / K; default 1 = as recorded)")


def scenario_from_args(args: argparse.Namespace, **overrides: Any) -> Scenario:
    """Scenario from parsed flags (ScenarioError on bad values)."""
    values = {name: getattr(args, name) for name in FIELDS if hasattr(args, name)}
    values.update(overrides)
    return Scenario.from_dict(values)


def trace_from_args(args: argparse.Namespace) -> Any:
    from sim.trace import resolve_trace

    if args.synthetic is not None:
        if args.trace_format:
            from sim.cli.common import CliError

            raise CliError("--format applies to --trace files only")
        return resolve_trace(f"synthetic:{args.synthetic.removeprefix('synthetic:')}")
    return resolve_trace(args.trace, args.trace_format)

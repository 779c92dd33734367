"""`python -m sim capacity --model M --gpu G`: KV budget terms and max concurrent sequences per context."""

from __future__ import annotations

import argparse
from typing import Any

from sim.cli.common import CliError, print_json
from sim.guard import limits
from sim.guard.cli_parser import bounded_float, bounded_int

GIB = 1 << 30
DEFAULT_CONTEXTS = "2048,8192,32768,131072"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from models.kv_dtypes import KV_DTYPES
    from models.weight_dtypes import WEIGHT_DTYPES
    from sim.cli.scenario_args import add_async_scheduling_arg, add_language_model_only_arg
    from sim.memory.capacity import DEFAULT_MAX_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, DEFAULT_RUNTIME_OVERHEAD
    from sim.memory.vllm_first_start import COMPILE_CACHE_STATES, DEFAULT_COMPILE_CACHE
    from sim.memory.vllm_profile import DEFAULT_VLLM_VERSION

    p = subparsers.add_parser(
        "capacity",
        help="KV budget and max concurrent sequences on a GPU",
        description="Plan KV capacity: total x gpu-mem-util - weights - activation peak - runtime overhead, "
        "then max concurrent sequences per context length (docs/CAPACITY.md).",
    )
    p.add_argument("--model", required=True, help="catalog name, HF id, config.json or its directory")
    p.add_argument("--gpu", required=True, help="catalog GPU (h100-sxm, a100-80gb, ...) or a custom GPU .json")
    p.add_argument("--tp", type=bounded_int(1, limits.MAX_TP), default=1, help="tensor-parallel degree (default %(default)s)")
    p.add_argument("--pp", type=bounded_int(1, limits.MAX_PP), default=1,
                   help="pipeline-parallel stages, one TP group each: memory only, the simulator has no pipeline "
                   "(default %(default)s)")
    p.add_argument("--kv-dtype", default="bf16", choices=KV_DTYPES.names(), help="KV dtype (default %(default)s)")
    p.add_argument("--weight-dtype", default="native", choices=WEIGHT_DTYPES.names(), help="weight dtype (default %(default)s)")
    p.add_argument("--kv-heads", type=bounded_int(1, limits.MAX_KV_HEADS), help="GQA what-if: use N kv heads")
    add_language_model_only_arg(p)
    p.add_argument("--kv-eviction", help="cap KV per sequence: window:N, streaming:SINKS+RECENT or h2o:N "
                   "(memory only: output quality is not modelled)")
    p.add_argument("--contexts", default=DEFAULT_CONTEXTS, help="comma-separated context lengths (default %(default)s)")
    p.add_argument("--gpu-mem-util", type=bounded_float(0, 1, lo_open=True), default=0.9, help="gpu_memory_utilization (default %(default)s)")
    p.add_argument("--max-batched-tokens", type=bounded_int(1, limits.MAX_BATCHED_TOKENS), default=DEFAULT_MAX_BATCHED_TOKENS,
                   help="tokens in the activation-profiling pass (default %(default)s)")
    p.add_argument("--max-num-seqs", type=bounded_int(1, limits.MAX_NUM_SEQS), default=DEFAULT_MAX_NUM_SEQS, help="max_num_seqs (default %(default)s)")
    p.add_argument("--overhead-gib", type=bounded_float(0, 1e4), default=DEFAULT_RUNTIME_OVERHEAD / GIB,
                   help="runtime overhead outside PyTorch per GPU in GiB (default %(default)g)")
    p.add_argument("--vllm-version", default=DEFAULT_VLLM_VERSION,
                   help="vLLM version whose start-up accounting sizes num_gpu_blocks (default %(default)s; docs/CALIBRATION.md)")
    p.add_argument("--compile-cache", default=DEFAULT_COMPILE_CACHE, choices=COMPILE_CACHE_STATES,
                   help="vLLM's torch.compile cache at start-up: a cold (first) start may get fewer blocks; "
                   "unknown and cold give num_gpu_blocks_range (default %(default)s; docs/CALIBRATION.md)")
    p.add_argument("--block-size", type=bounded_int(1, limits.MAX_BLOCK_SIZE), default=16, help="KV block size in tokens (default %(default)s)")
    p.add_argument("--prefix-caching", action="store_true",
                   help="prefix caching on: vLLM's 'align' mode keeps two state pages per linear-attention layer group")
    p.add_argument("--disable-hybrid-kv-cache-manager", action="store_true",
                   help="vLLM's all-full fallback: sliding and chunked layers allocated as full attention")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs: vLLM then reserves no graph memory")
    p.add_argument("--max-model-len", type=bounded_int(1, limits.MAX_MODEL_LEN),
                   help="max_model_len for vLLM's logged 'Maximum concurrency' (default min(model context, 32768))")
    add_async_scheduling_arg(p)
    p.add_argument("--users", type=bounded_int(1, 10**9), help="also report the GPUs needed for this many concurrent sequences")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def parse_contexts(text: str) -> list[int]:
    try:
        values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError(f"--contexts {text!r}: expected comma-separated integers like 2048,8192") from None
    if not values or any(not 1 <= v <= limits.MAX_MODEL_LEN for v in values) or len(values) > 64:
        raise CliError(f"--contexts {text!r}: give 1 to 64 token counts from 1 to {limits.MAX_MODEL_LEN:,}")
    return values


def run(args: argparse.Namespace) -> int:
    from models.spec import SpecError
    from sim.memory.capacity import capacity_table, gpus_required
    from sim.memory.vllm_profile import accounting_for, add_vllm_pool
    from sim.run.deployment import Sizing
    from sim.scenario import Scenario

    for name in ("tp", "max_batched_tokens", "max_num_seqs"):
        if getattr(args, name) < 1:
            raise CliError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be a positive integer")
    if not 0 < args.gpu_mem_util <= 1:
        raise CliError(f"--gpu-mem-util {args.gpu_mem_util}: must be in (0, 1]")
    if not 0 <= args.overhead_gib < 1e4:
        raise CliError(f"--overhead-gib {args.overhead_gib}: must be >= 0")
    contexts = parse_contexts(args.contexts)
    try:
        accounting_for(args.vllm_version)
    except ValueError as exc:
        raise CliError(f"--vllm-version: {exc}") from None
    # A partial scenario (what is served, on what, the budget knobs), resolved through the one resolver.
    scenario = Scenario(model=args.model, gpu=args.gpu, tp=args.tp, weight_dtype=args.weight_dtype,
                        kv_dtype=args.kv_dtype, kv_heads=args.kv_heads, kv_eviction=args.kv_eviction,
                        language_model_only=args.language_model_only,
                        gpu_mem_util=args.gpu_mem_util, max_batched_tokens=args.max_batched_tokens,
                        max_num_seqs=args.max_num_seqs, block_size=args.block_size)
    sizing = Sizing.of(scenario, runtime_overhead_bytes=int(args.overhead_gib * GIB))
    spec, gpu, budget_args = sizing.spec, sizing.gpu, sizing.budget_args()
    try:  # the model on one GPU, or the pipeline stage that sets the pool
        part, budget, stage = sizing.pipeline_stage(args.pp)
    except SpecError as exc:
        raise CliError(f"--pp {args.pp}: {exc}") from None
    table = capacity_table(part, gpu, contexts, budget=budget, whole_model=spec, **budget_args)
    if stage is not None:
        table["assumptions"].update(pp=args.pp, pp_stage={"rank": stage.rank, "layers": stage.layers},
                                    num_params=spec.num_params, active_params=spec.active_params)
    add_vllm_pool(table, spec, gpu, block_size=args.block_size, max_model_len=args.max_model_len,
                  enforce_eager=args.enforce_eager, vllm_version=args.vllm_version, mamba_align=args.prefix_caching,
                  hybrid_manager=not args.disable_hybrid_kv_cache_manager, compile_cache=args.compile_cache,
                  async_scheduling=args.async_scheduling, pp=args.pp)
    if args.kv_eviction:
        from models.eviction import QUALITY_NOTE

        table["assumptions"]["kv_eviction"] = args.kv_eviction
        table["note"] = QUALITY_NOTE
    if args.users is not None:
        if args.users < 1:
            raise CliError(f"--users {args.users}: must be a positive integer")
        table["gpus_required"] = [
            {"context": c, **gpus_required(spec, gpu, args.users, c, budget=sizing.budget, pp=args.pp,
                                           **budget_args).as_dict()}
            for c in contexts]
    if args.json:
        print_json(table)
        return 0
    _print_human(table)
    return 0


def _print_human(table: dict[str, Any]) -> None:
    a = table["assumptions"]
    stage = (f" x pp={a['pp']} (stage {a['pp_stage']['rank']}, {a['pp_stage']['layers']} layers, sets the pool)"
             if a.get("pp", 1) > 1 else "")
    print(f"{a['model']} on {a['gpu']} x tp={a['tp']}{stage}  (weights {a['weight_dtype']}, KV {a['kv_dtype']})")
    print(f"  GPU memory        {a['total_bytes'] / GIB:9.2f} GiB  x gpu_mem_util {a['gpu_mem_util']:g} = {a['usable_bytes'] / GIB:.2f} GiB")
    for label, key in (("weights", "weights_bytes"), ("activation peak", "activation_peak_bytes"),
                       ("runtime overhead", "runtime_overhead_bytes"), ("KV fixed scales", "kv_fixed_bytes")):
        size = a[key]
        print(f"  - {label:<16}" + (f"{size / GIB:9.2f} GiB" if size >= 2**20 or not size else f"{size:9,} B"))
        if key == "weights_bytes" and a.get("vision_weights_bytes"):
            print(f"      of which the image encoder {a['vision_weights_bytes'] / GIB:.2f} GiB "
                  "(--language-model-only leaves it off the GPU)")
    print(f"  = KV budget       {a['kv_budget_bytes'] / GIB:9.2f} GiB per GPU  ({a['kv_bytes_per_token']:,} B/token per GPU)")
    _print_vllm(a)
    print(f"  {'context':>9} {'KV/seq GiB':>11} {'max seqs':>9} {'vLLM pool':>9} {'decode floor b=1':>17} {'at max':>9}")
    for r in table["rows"]:
        vllm = r.get("vllm_max_concurrent")
        print(f"  {r['context']:>9,} {r['kv_per_seq_gib']:>11.4f} {r['max_concurrent']:>9,} "
              f"{'-' if vllm is None else format(vllm, ','):>9} "
              f"{r['decode_floor_ms_batch1']:>14.2f} ms {r['decode_floor_ms_full']:>6.2f} ms")
    if not table["fits"]:
        print(f"  {table['hint']}")
    if table.get("note"):
        print(f"  KV eviction {table['assumptions']['kv_eviction']}: {table['note']}")
    for g in table.get("gpus_required", []):
        stages = f" x pp={g['pp']}" if g["pp"] > 1 else ""
        print(f"  {g['context']:>9,} tokens: {g['gpus']} GPU(s) = {g['replicas']} replica(s) x tp={g['tp']}{stages}")


def _print_vllm(a: dict[str, Any]) -> None:
    """vLLM's own sizing beside kvsim's budget: num_gpu_blocks and the start-up concurrency line."""
    from sim.memory.vllm_profile import range_causes

    v = a.get("vllm_memory") or {}
    if a.get("num_gpu_blocks") is None:
        print(f"  vLLM num_gpu_blocks: not modelled ({v.get('skipped', 'unknown layout')})")
        return
    terms = " - ".join(f"{v[k] / GIB:.2f} {label}" for k, label in (
        ("weights_bytes", "weights"), ("transient_peak_bytes", "profile peak"), ("sampler_buffer_bytes", "sampler buffer"),
        ("non_torch_bytes", "non-torch"), ("cudagraph_bytes", "CUDA graphs")))
    print(f"  vLLM {v['vllm_version']}: {v['cuda_total_bytes'] / GIB:.2f} GiB (CUDA) x {v['gpu_mem_util']:g} = "
          f"{v['requested_bytes'] / GIB:.2f} - {terms} = {v['available_kv_bytes'] / GIB:.2f} GiB "
          f"-> num_gpu_blocks {a['num_gpu_blocks']:,} of {v['bytes_per_block']:,} B")
    for st in v.get("stages") or ():  # pipeline stages: each one's own pool before vLLM takes the least
        print(f"    stage {st['rank']}: {st['layers']} layers, {st['weights_bytes'] / GIB:.2f} GiB weights, "
              f"{st['transient_peak_bytes'] / GIB:.2f} GiB profile peak -> {st['num_gpu_blocks']:,} blocks "
              f"of {st['bytes_per_block']:,} B")
    low, high = a["num_gpu_blocks_range"]
    print(f"  compile cache {a['compile_cache']}: {low:,}-{high:,} blocks ({range_causes(v)}; "
          "--compile-cache, docs/CALIBRATION.md 'First starts')")
    log = a["vllm_logged_max_concurrency"]
    print(f"  vLLM logs 'GPU KV cache size: {log['kv_cache_tokens']:,} tokens' and 'Maximum concurrency for "
          f"{log['max_model_len']:,} tokens per request: {log['concurrency']:.2f}x' ({log['why_it_differs']})")
    if not a["vllm_startup"]["starts"]:
        print(f"  !! {a['vllm_startup']['message']}")

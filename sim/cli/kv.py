"""`python -m sim kv --model M`: exact KV bytes per token of a model for a KV dtype (scales included),
per KV layer group (full, sliding window, chunked, MLA latent, linear-attention state)."""

from __future__ import annotations

import argparse
from typing import Any

from sim.cli.common import CliError, print_json
from sim.guard import limits
from sim.guard.cli_parser import bounded_int

GIB = 1 << 30
SHOWN_CONTEXTS = (2048, 8192, 32768, 131072)
PAGED_BLOCK_SIZE = 16  # vLLM's default block size: the paged figures round each group to whole blocks


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from models.kv_dtypes import KV_DTYPES

    p = subparsers.add_parser(
        "kv",
        help="KV-cache bytes per token of a model",
        description="Print the KV bytes one token costs (K and V, every layer, quantisation scales included) "
        "and the KV of one sequence at a few context lengths.",
    )
    p.add_argument("--model", required=True, help="catalog name, HF id (Qwen/Qwen2.5-7B), config.json or its directory")
    p.add_argument("--kv-dtype", default="bf16", choices=KV_DTYPES.names(), help="KV storage dtype (default %(default)s)")
    p.add_argument("--kv-heads", type=bounded_int(1, limits.MAX_KV_HEADS),
                   help="GQA what-if: use N kv heads (a divisor of the attention heads)")
    p.add_argument("--kv-eviction", help="cap KV per sequence: window:N, streaming:SINKS+RECENT or h2o:N "
                   "(memory only: output quality is not modelled)")
    p.add_argument("--tp", type=bounded_int(1, limits.MAX_TP), default=1,
                   help="bytes on each of TP ranks (MLA's latent is not split; default %(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def kv_report(model: str, kv_dtype: str = "bf16", kv_heads: int | None = None, tp: int = 1,
              kv_eviction: str | None = None) -> dict[str, Any]:
    """The figures `kv` prints, as a dict (the dashboard can call this too). Per-sequence figures are
    the peak one sequence holds on each of `tp` ranks while it grows to each shown context."""
    from models.eviction import QUALITY_NOTE
    from sim.memory.capacity import kv_bytes_per_token_per_gpu, kv_groups_per_sequence, kv_per_sequence_bytes
    from sim.run.deployment import Deployment
    from sim.scenario import Scenario

    # the model as a (partial) scenario runs it: the one resolver applies the what-ifs
    spec = Deployment.model_of(Scenario(model=model, kv_dtype=kv_dtype, kv_heads=kv_heads, tp=tp,
                                        kv_eviction=kv_eviction))
    per_token = kv_bytes_per_token_per_gpu(spec, kv_dtype, tp)
    mha = spec.mha_bytes_per_token(kv_dtype)
    state = sum(g.state_bytes(tp) for g in spec.groups)
    return {
        "model": spec.name, "family": spec.family, "layers": spec.num_layers,
        "attention_heads": spec.num_attention_heads, "kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim,
        "kv_dtype": kv_dtype, "tp": tp, "bytes_per_token": per_token, "fixed_scale_bytes": spec.kv_fixed_bytes(kv_dtype),
        "mha_bytes_per_token": mha, "gqa_saving": 1 - spec.kv_bytes_per_token(kv_dtype) / mha,
        "per_sequence_bytes": {str(c): kv_per_sequence_bytes(spec, c, kv_dtype, tp) for c in SHOWN_CONTEXTS},
        "kv_groups": [g.as_dict(kv_dtype, tp) for g in spec.groups],
        "per_sequence_groups": {str(c): kv_groups_per_sequence(spec, c, kv_dtype, tp) for c in SHOWN_CONTEXTS},
        "per_sequence_bytes_all_full": {str(c): c * per_token + state for c in SHOWN_CONTEXTS},
        "block_size": PAGED_BLOCK_SIZE,
        "per_sequence_bytes_paged": {str(c): sum(g.paged_bytes(c, PAGED_BLOCK_SIZE, kv_dtype, tp) for g in spec.groups)
                                     for c in SHOWN_CONTEXTS},
        "state_bytes_per_sequence": state,
        "num_params": spec.num_params, "active_params": spec.active_params,
        "max_position_embeddings": spec.max_position_embeddings, "sliding_window": spec.sliding_window,
        "kv_eviction": kv_eviction, **({"note": QUALITY_NOTE} if kv_eviction else {}),
    }


def run(args: argparse.Namespace) -> int:
    if args.kv_heads is not None and args.kv_heads < 1:
        raise CliError(f"--kv-heads {args.kv_heads}: must be a positive integer")
    if args.tp < 1:
        raise CliError(f"--tp {args.tp}: must be a positive integer")
    report = kv_report(args.model, args.kv_dtype, args.kv_heads, args.tp, args.kv_eviction)
    if args.json:
        print_json(report)
        return 0
    print(f"{report['model']} ({report['family']}): {report['layers']} layers, {report['attention_heads']} attention heads, "
          f"{report['kv_heads']} kv heads, head dim {report['head_dim']}, {report['num_params'] / 1e9:.2f}B params")
    for g in report["kv_groups"]:
        what = f"{g['bytes_per_token']:,} B/token" if g["kind"] != "state" else f"{g['state_bytes']:,} B/sequence"
        print(f"  group {g['label']:<15} x {g['layers']:>3} layers: {what}")
    print(f"KV {report['kv_dtype']}: {report['bytes_per_token']:,} bytes per token "
          f"({report['bytes_per_token'] / 1024:g} KiB)"
          + (f" + {report['fixed_scale_bytes']} fixed scale bytes" if report["fixed_scale_bytes"] else ""))
    print(f"vs MHA ({report['attention_heads']} kv heads): {report['mha_bytes_per_token']:,} bytes per token, "
          f"saving {100 * report['gqa_saving']:.1f}%")
    for context, size in report["per_sequence_bytes"].items():
        full = report["per_sequence_bytes_all_full"][context]
        extra = f"  (all-full attention: {full / GIB:.4f} GiB)" if full != size else ""
        print(f"  {int(context):>7,} tokens: {size / GIB:8.4f} GiB per sequence{extra}")
    if report.get("note"):
        print(f"KV eviction {report['kv_eviction']}: {report['note']}")
    return 0

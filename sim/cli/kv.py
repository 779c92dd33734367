"""`python -m sim kv --model M`: exact KV bytes per token of a model for a KV dtype (scales included)."""

from __future__ import annotations

import argparse
from typing import Any

from sim.cli.common import CliError, print_json

GIB = 1 << 30
SHOWN_CONTEXTS = (2048, 8192, 32768, 131072)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from models.kv_dtypes import list_kv_dtypes

    p = subparsers.add_parser(
        "kv",
        help="KV-cache bytes per token of a model",
        description="Print the KV bytes one token costs (K and V, every layer, quantisation scales included) "
        "and the KV of one sequence at a few context lengths.",
    )
    p.add_argument("--model", required=True, help="catalog name, HF id (Qwen/Qwen2.5-7B), config.json or its directory")
    p.add_argument("--kv-dtype", default="bf16", choices=list_kv_dtypes(), help="KV storage dtype (default %(default)s)")
    p.add_argument("--kv-heads", type=int, help="GQA what-if: use N kv heads (a divisor of the attention heads)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def kv_report(model: str, kv_dtype: str = "bf16", kv_heads: int | None = None) -> dict[str, Any]:
    """The figures `kv` prints, as a dict (the dashboard can call this too)."""
    from models.spec import load_spec

    spec = load_spec(model)
    if kv_heads is not None:
        spec = spec.with_kv_heads(kv_heads)
    per_token = spec.kv_bytes_per_token(kv_dtype)
    mha = spec.with_kv_heads(spec.num_attention_heads).kv_bytes_per_token(kv_dtype)
    return {
        "model": spec.name, "family": spec.family, "layers": spec.num_layers,
        "attention_heads": spec.num_attention_heads, "kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim,
        "kv_dtype": kv_dtype, "bytes_per_token": per_token, "fixed_scale_bytes": spec.kv_fixed_bytes(kv_dtype),
        "mha_bytes_per_token": mha, "gqa_saving": 1 - per_token / mha,
        "per_sequence_bytes": {str(c): c * per_token for c in SHOWN_CONTEXTS},
        "num_params": spec.num_params, "max_position_embeddings": spec.max_position_embeddings,
        "sliding_window": spec.sliding_window,
    }


def run(args: argparse.Namespace) -> int:
    if args.kv_heads is not None and args.kv_heads < 1:
        raise CliError(f"--kv-heads {args.kv_heads}: must be a positive integer")
    report = kv_report(args.model, args.kv_dtype, args.kv_heads)
    if args.json:
        print_json(report)
        return 0
    print(f"{report['model']} ({report['family']}): {report['layers']} layers, {report['attention_heads']} attention heads, "
          f"{report['kv_heads']} kv heads, head dim {report['head_dim']}, {report['num_params'] / 1e9:.2f}B params")
    print(f"KV {report['kv_dtype']}: {report['bytes_per_token']:,} bytes per token "
          f"({report['bytes_per_token'] / 1024:g} KiB)"
          + (f" + {report['fixed_scale_bytes']} fixed scale bytes" if report["fixed_scale_bytes"] else ""))
    print(f"vs MHA ({report['attention_heads']} kv heads): {report['mha_bytes_per_token']:,} bytes per token, "
          f"saving {100 * report['gqa_saving']:.1f}%")
    for context, size in report["per_sequence_bytes"].items():
        print(f"  {int(context):>7,} tokens: {size / GIB:8.4f} GiB per sequence")
    return 0

"""KV pool bytes vs the formula, and the measured quantisation error of each KV dtype.

Pool bytes: for each model and KV dtype, a PagedKVCache sized from a KV budget is allocated and its
tensor bytes compared with ModelSpec.kv_bytes_per_token x slots + fixed scale bytes (must be equal).
Errors: attention output and logits with int8 / fp8 / bf16 KV against fp32 and fp16 pools
(gpu_backend.kv_error.attention_output_error / logits_error; tiny-llama, teacher-forced decode).

Run: .venv/bin/python bench/gpu_pool_bytes.py [--smoke] [--device cuda|cpu] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from gpu_backend import kv_error  # noqa: E402
from gpu_backend.model_loader import load_model  # noqa: E402
from gpu_backend.paged_cache import PagedKVCache  # noqa: E402
from models.spec import load_spec  # noqa: E402

MODELS = ("llama-3-8b", "qwen2.5-7b", "mistral-7b", "llama-2-7b")
KV_DTYPES = ("fp16", "bf16", "fp8", "int8")


def pool_rows(models, budget_bytes: int, device: str) -> list[dict]:
    rows = []
    for name in models:
        spec = load_spec(name)
        for kv in KV_DTYPES:
            cache = PagedKVCache.from_budget(spec, kv, 16, budget_bytes, device=device)
            formula = spec.kv_bytes_per_token(kv) * cache.num_blocks * 16 + spec.kv_fixed_bytes(kv)
            rows.append({"model": name, "kv_dtype": kv, "blocks": cache.num_blocks, "pool_bytes": cache.pool_bytes,
                         "formula_bytes": formula, "equal": cache.pool_bytes == formula})
            del cache
    return rows


def error_rows(device: str) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (9, 40, 100)]
    loaded = load_model("tiny-llama", seed=3, device=device)
    rows = []
    for ref in ("fp32", "fp16"):
        for kv in ("bf16", "fp8", "int8"):
            a = kv_error.attention_output_error(kv, ref)
            lg = kv_error.logits_error(loaded, kv, prompts, 16, ref)
            rows.append({"reference": ref, "kv_dtype": kv, "attn_max_abs": a.max_abs, "attn_rel_l2": a.rel_l2,
                         "logits_max_abs": lg.max_abs, "logits_rel_l2": lg.rel_l2})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="one model, a 16 MiB budget (CPU-friendly)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    models = MODELS[:1] if args.smoke else MODELS
    budget = (16 << 20) if args.smoke else (4 << 30)
    out = {"device": args.device, "pool": pool_rows(models, budget, args.device), "errors": error_rows(args.device)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for r in out["pool"]:
            print(f"{r['model']:<12} {r['kv_dtype']:<5} blocks {r['blocks']:>7} pool {r['pool_bytes']:>12} "
                  f"formula {r['formula_bytes']:>12} equal {r['equal']}")
        for r in out["errors"]:
            print(f"{r['kv_dtype']:<5} vs {r['reference']}: attention max {r['attn_max_abs']:.4g} rel {r['attn_rel_l2']:.4g}"
                  f" | logits max {r['logits_max_abs']:.4g} rel {r['logits_rel_l2']:.4g}")
    return 0 if all(r["equal"] for r in out["pool"]) else 1


if __name__ == "__main__":
    sys.exit(main())

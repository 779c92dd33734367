"""Decode step time vs the memory-bandwidth floor.

floor = (weight bytes + KV bytes read) / measured copy bandwidth, where the copy bandwidth is
timed here (a large device-to-device clone: read + write bytes / seconds). A decode step of batch
B over contexts of C tokens reads every weight once and B x C tokens of K/V. Target on a GPU:
step time within 1/0.7 of the floor (>= 70% of the floor's speed) at batch >= 32.

Full run (needs a GPU with ~20 GiB free): llama-3-8b-shaped model, random bf16 weights, batches
1, 8, 32, 64, context 1024 per sequence. --smoke: tiny-llama on CPU, fp32, to prove the script works.

Run: .venv/bin/python bench/gpu_decode.py [--smoke] [--context N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from gpu_backend.model_loader import load_model  # noqa: E402
from gpu_backend.profile import Grid, device_name, measure  # noqa: E402
from gpu_backend.telemetry import copy_bandwidth  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--context", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        model, device, dtype, batches, context, copy_bytes = "tiny-llama", "cpu", "fp32", (1, 2, 4), 64, 64 << 20
    else:
        if not torch.cuda.is_available():
            print("error: the full benchmark needs a CUDA GPU; use --smoke on CPU", file=sys.stderr)
            return 2
        model, device, dtype, batches, context, copy_bytes = "llama-3-8b", "cuda", "bf16", (1, 8, 32, 64), 1024, 2 << 30
    context = args.context or context
    loaded = load_model(model, dtype=dtype, device=device)
    weight_bytes = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    bpt = loaded.spec.kv_bytes_per_token(dtype)
    bw = copy_bandwidth(loaded.device, copy_bytes)
    rows = []
    for b, (_new, kv, _pairs, sec) in zip(batches, measure(loaded, Grid((), tuple((b, context) for b in batches)),
                                                          kv_dtype=dtype, repeats=5), strict=True):
        floor = (weight_bytes + kv * bpt) / bw
        rows.append({"batch": b, "context": context, "step_s": sec, "floor_s": floor, "floor_fraction": floor / sec})
    out = {"device": device_name(loaded.device), "model": model, "dtype": dtype, "weight_bytes": weight_bytes,
           "copy_bandwidth_Bps": bw, "rows": rows}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['device']}: {model} {dtype}, weights {weight_bytes / 2**30:.2f} GiB, copy bandwidth {bw / 1e9:.1f} GB/s")
        for r in rows:
            print(f"batch {r['batch']:>3} ctx {r['context']}: step {r['step_s'] * 1e3:.2f} ms, floor "
                  f"{r['floor_s'] * 1e3:.2f} ms, {r['floor_fraction']:.0%} of the floor's speed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Throughput of the backend (continuous batching over the paged pool) vs a plain transformers
generate() loop (one request at a time) vs transformers' own generate_batch, on the same requests.

Requests: the Azure conv trace (../shared/traces, else samples/azure2024_conv_small.csv), subsampled
to --n requests, contexts clamped to --max-context; all offered at once (offline). Output lengths
are forced (EOS ignored) in the backend and the plain loop; generate_batch takes one
max_new_tokens for all, so it is given the mean output length and its own token count is used.
Target on a GPU: the backend at >= 3x the plain loop's tokens/s.

Full run (GPU): llama-3-8b-shaped, random bf16 weights, 200 requests, contexts <= 4096.
--smoke: tiny-llama on CPU, 8 requests, contexts <= 128, to prove the script works.

Run: .venv/bin/python bench/gpu_throughput.py [--smoke] [--n N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from gpu_backend.executor import RunConfig, prompt_tokens, run  # noqa: E402
from gpu_backend.model_loader import load_model  # noqa: E402
from gpu_backend.profile import device_name  # noqa: E402
from sim.scenario import Scenario  # noqa: E402
from sim.trace import load_trace  # noqa: E402
from sim.trace.transforms import clamp_context, subsample  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
AZURE_CONV = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
SAMPLE = ROOT / "samples" / "azure2024_conv_small.csv"


def requests(n: int, max_context: int):
    trace = load_trace(str(AZURE_CONV if AZURE_CONV.is_file() else SAMPLE))
    return clamp_context(subsample(trace, n=min(n, len(trace)), seed=0), max_context)


def plain_generate(loaded_sdpa, trace, seed: int, sync) -> tuple[int, float]:
    vocab = loaded_sdpa.spec.vocab_size
    total, t0 = 0, time.perf_counter()
    for r, (p, o) in enumerate(zip(trace.df["input_tokens"], trace.df["output_tokens"], strict=True)):
        ids = torch.tensor([prompt_tokens(r, int(p), vocab, seed)], device=loaded_sdpa.device)
        loaded_sdpa.model.generate(ids, max_new_tokens=int(o), min_new_tokens=int(o), do_sample=False, pad_token_id=0)
        total += int(o)
    sync()
    return total, time.perf_counter() - t0


def generate_batch(loaded_sdpa, trace, seed: int, sync) -> tuple[int, float]:
    from transformers import GenerationConfig

    vocab = loaded_sdpa.spec.vocab_size
    inputs = [prompt_tokens(r, int(p), vocab, seed) for r, p in enumerate(trace.df["input_tokens"])]
    mean_out = max(int(trace.df["output_tokens"].mean()), 1)
    cfg = GenerationConfig(max_new_tokens=mean_out, do_sample=False, eos_token_id=-1, pad_token_id=0)
    t0 = time.perf_counter()
    out = loaded_sdpa.model.generate_batch(inputs, generation_config=cfg)
    sync()
    seconds = time.perf_counter() - t0
    return sum(len(v.generated_tokens) for v in out.values()), seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--n", type=int)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        model, device, dtype, n, max_ctx, budget = "tiny-llama", "cpu", "fp32", 8, 128, 0.01
    else:
        if not torch.cuda.is_available():
            print("error: the full benchmark needs a CUDA GPU; use --smoke on CPU", file=sys.stderr)
            return 2
        model, device, dtype, n, max_ctx, budget = "llama-3-8b", "cuda", "bf16", 200, 4096, None
    trace = requests(args.n or n, max_ctx)
    sync = (lambda: torch.cuda.synchronize()) if device == "cuda" else (lambda: None)
    scenario = Scenario(model=model, kv_dtype=dtype, weight_dtype=dtype, kv_budget_gib=budget)
    loaded = load_model(model, dtype=dtype, device=device)
    res = run(trace, scenario, RunConfig(device=device, dtype=dtype, offline=True), loaded=loaded)
    s = res.summary
    rows = {"backend": {"tokens": s["output_tokens"], "seconds": s["duration_s"]}}
    sdpa = load_model(model, dtype=dtype, device=device, attn_implementation="sdpa")
    sdpa.model.load_state_dict(loaded.model.state_dict())
    del loaded
    tok, sec = plain_generate(sdpa, trace, 0, sync)
    rows["plain_generate"] = {"tokens": tok, "seconds": sec}
    try:
        tok, sec = generate_batch(sdpa, trace, 0, sync)
        rows["generate_batch"] = {"tokens": tok, "seconds": sec}
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        rows["generate_batch"] = {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    for r in rows.values():
        if "tokens" in r:
            r["tok_per_s"] = r["tokens"] / r["seconds"]
    base = rows["plain_generate"]["tok_per_s"]
    out = {"device": device_name(sdpa.device), "model": model, "dtype": dtype, "requests": len(trace.df),
           "trace": trace.source, "results": rows, "backend_vs_plain": rows["backend"]["tok_per_s"] / base}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['device']}: {model} {dtype}, {out['requests']} requests from {out['trace']}")
        for name, r in rows.items():
            print(f"{name:<15} " + (f"{r['tokens']} tokens in {r['seconds']:.2f} s = {r['tok_per_s']:.1f} tok/s"
                                    if "tokens" in r else f"failed: {r['error']}"))
        print(f"backend / plain generate(): {out['backend_vs_plain']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One command for the first hour on a GPU: every measurement the GPU backend needs, one JSON + one table.

    python bench/gpu_suite.py                          # CUDA: llama-3-8b-shaped, random bf16 weights (<= 20 min on one H100)
    python bench/gpu_suite.py --device cpu --quick     # CI: tiny-llama on CPU, about a minute, same code path

Sections (docs/GPU_BACKEND.md says what each figure means):
  pool        KV pool bytes (tensor bytes, and on CUDA the allocator's growth) vs ModelSpec's formula
  decode      decode step time at batch 1..256 vs the HBM floor (weights + KV read) / copy bandwidth
  throughput  the backend vs plain transformers generate() on the same requests
  calibration a profile fitted on one grid of step shapes, re-validated on held-out shapes
  overlay     simulated vs measured on two traces (the calibrated profile), error per metric
  kv_dtypes   int8 / fp8 KV: a run on the device and the logits error vs the model dtype
  vllm        vLLM's numbers beside ours when vLLM is installed (gpu_backend.vllm_engine; else one line why not)
A section that fails records its error and the suite goes on: one hour, one run, every figure it can.
Writes OUT/gpu_suite.json and OUT/gpu_suite.md; exits 1 when a section failed.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from gpu_backend import kv_error  # noqa: E402
from gpu_backend.executor import RunConfig, prompt_tokens, run  # noqa: E402
from gpu_backend.model_loader import load_model  # noqa: E402
from gpu_backend.overlay import overlay_table, simulate_like  # noqa: E402
from gpu_backend.paged_cache import PagedKVCache  # noqa: E402
from gpu_backend.profile import Grid, device_name, measure  # noqa: E402
from gpu_backend.telemetry import copy_bandwidth  # noqa: E402
from sim.scenario import Scenario  # noqa: E402
from sim.trace import load_trace  # noqa: E402
from sim.trace.synthetic import synthetic  # noqa: E402
from sim.trace.transforms import clamp_context, speedup, subsample  # noqa: E402

GiB = 1 << 30


@dataclass(frozen=True)
class Plan:
    """Sizes of one suite run: the GPU hour or the CPU smoke run."""

    model: str
    dtype: str
    batches: tuple[int, ...]
    context: int
    copy_bytes: int
    requests: int
    prompt: int
    output: int
    max_context: int
    trace_seconds: float  # overlay traces are sped up to span about this long
    fit_grid: Grid
    check_grid: Grid
    kv_budget_gib: float | None  # None: measured from the device


FULL = Plan("llama-3-8b", "bf16", (1, 2, 4, 8, 16, 32, 64, 128, 256), 1024, 2 * GiB, 256, 512, 128, 4096, 60.0,
            Grid(prefill=((1, 128), (1, 512), (1, 2048), (4, 512), (1, 8192)),
                 decode=tuple((b, c) for b in (1, 16, 64, 256) for c in (256, 1024))),
            Grid(prefill=((2, 1024), (1, 4096)), decode=((8, 1024), (32, 512), (128, 1024))), None)
QUICK = Plan("tiny-llama", "fp32", (1, 4, 16), 64, 64 << 20, 8, 32, 8, 128, 5.0,
             Grid(prefill=((1, 16), (1, 64), (2, 32), (4, 16)), decode=((1, 32), (4, 32), (8, 64), (16, 16))),
             Grid(prefill=((2, 48),), decode=((2, 64), (8, 32))), 0.004)


# --- helpers --------------------------------------------------------------------------------------

def sync_fn(device: torch.device):
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def measure_apart(loaded, grid: Grid, kv_dtype: str, repeats: int = 5) -> list[tuple]:
    """profile.measure sizes one pool for its longest sequence times its largest batch: prefill and
    decode shapes are measured apart so an 8k prefill and a batch of 256 never share one pool."""
    rows = []
    for part in (Grid(prefill=grid.prefill, decode=()), Grid(prefill=(), decode=grid.decode)):
        if part.prefill or part.decode:
            rows += measure(loaded, part, kv_dtype=kv_dtype, repeats=repeats)
    return rows


def scenario(plan: Plan, **kw) -> Scenario:
    base = dict(model=plan.model, kv_dtype=plan.dtype, weight_dtype=plan.dtype, kv_budget_gib=plan.kv_budget_gib,
                max_num_seqs=max(plan.batches), block_size=16)
    return Scenario(**{**base, **kw})


def fixed_trace(plan: Plan):
    return synthetic(plan.requests, 1e6, input=f"fixed:value={plan.prompt}", output=f"fixed:value={plan.output}")


def sample_trace(name: str, plan: Plan):
    trace = clamp_context(subsample(load_trace(str(ROOT / "samples" / name)), n=plan.requests, seed=0),
                          plan.max_context)
    span = float(trace.df["arrival_s"].iloc[-1]) or 1.0
    return speedup(trace, max(span / plan.trace_seconds, 1.0))


# --- sections ---------------------------------------------------------------------------------------

def section_pool(plan: Plan, loaded) -> list[dict]:
    spec, dev = loaded.spec, loaded.device
    rows = []
    for kv in dict.fromkeys([plan.dtype, "bf16", "fp8", "int8"]):
        before = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else None
        cache = PagedKVCache.from_budget(spec, kv, 16, 256 << 20, loaded.dtype, dev)
        grown = torch.cuda.memory_allocated(dev) - before if before is not None else None
        formula = spec.kv_bytes_per_token(kv) * cache.num_blocks * 16 + spec.kv_fixed_bytes(kv)
        rows.append({"kv_dtype": kv, "pool_bytes": cache.pool_bytes, "allocator_growth_bytes": grown,
                     "formula_bytes": formula, "exact": cache.pool_bytes == formula})
        del cache
    return rows


def section_decode(plan: Plan, loaded) -> dict:
    bw = copy_bandwidth(loaded.device, plan.copy_bytes)
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    grid = Grid(prefill=(), decode=tuple((b, plan.context) for b in plan.batches))
    timed = measure_apart(loaded, grid, plan.dtype)
    per_token = loaded.spec.kv_bytes_per_token(plan.dtype)
    rows = []
    for b, (_new, kv_read, _pairs, sec) in zip(plan.batches, timed, strict=True):
        floor = (weights + kv_read * per_token) / bw
        rows.append({"batch": b, "context": plan.context, "step_s": sec, "floor_s": floor, "floor_over_step": floor / sec})
    return {"copy_bandwidth_Bps": bw, "weight_bytes": weights, "rows": rows}


def section_throughput(plan: Plan, loaded) -> dict:
    """Ours (continuous batching over the paged pool) vs plain transformers generate() in batches of
    the same size, the model's own SDPA attention and cache, on the same requests (one prompt length,
    so no padding); output lengths forced in both."""
    trace = fixed_trace(plan)
    res = run(trace, scenario(plan), RunConfig(device=str(loaded.device), dtype=plan.dtype, offline=True),
              loaded=loaded)
    ours = res.summary["throughput_tok_s"]
    vocab, sync, dev = loaded.spec.vocab_size, sync_fn(loaded.device), loaded.device
    ids = torch.tensor([prompt_tokens(r, plan.prompt, vocab, 0) for r in range(plan.requests)], device=dev)
    batch, cfg = max(plan.batches), loaded.model.config
    ours_attention, cfg._attn_implementation = cfg._attn_implementation, "sdpa"  # same weights, HF's attention
    try:
        loaded.model.generate(ids[:1], max_new_tokens=2, do_sample=False, pad_token_id=0)  # warm-up
        sync()
        t0 = time.perf_counter()
        for i in range(0, plan.requests, batch):
            loaded.model.generate(ids[i:i + batch], max_new_tokens=plan.output, min_new_tokens=plan.output,
                                  do_sample=False, pad_token_id=0)
        sync()
        hf = plan.requests * plan.output / (time.perf_counter() - t0)
    finally:
        cfg._attn_implementation = ours_attention
    return {"requests": plan.requests, "prompt": plan.prompt, "output": plan.output, "batch": batch,
            "ours_tok_s": ours, "hf_generate_tok_s": hf, "speedup": ours / hf,
            "attention": res.summary["attention"]}


def _predict(coef: dict, new: float, kv: float, pairs: float) -> float:
    return (coef["intercept_s"] + coef["per_new_token_s"] * new + coef["per_kv_read_token_s"] * kv
            + coef["per_attn_pair_s"] * pairs)


def section_calibration(plan: Plan, loaded, out: Path) -> dict:
    """Fit on one grid, re-validate on shapes the fit never saw."""
    from sim.timing.cost_model import fit_profile, save_profile

    fit_rows = measure_apart(loaded, plan.fit_grid, plan.dtype)
    prof = fit_profile(fit_rows, model=plan.model, device=device_name(loaded.device), tp=1, kv_dtype=plan.dtype,
                       weight_dtype=plan.dtype, block_size=16, grid="suite", attention="sdpa",
                       torch_version=torch.__version__, samples_raw=[list(r) for r in fit_rows])
    path = save_profile(prof, out / "profile.json")
    check = [{"new_tokens": n, "kv_read_tokens": kv, "attn_pairs": p, "measured_s": s,
              "predicted_s": _predict(prof["coefficients"], n, kv, p)}
             for n, kv, p, s in measure_apart(loaded, plan.check_grid, plan.dtype)]
    for r in check:
        r["rel_error"] = (r["predicted_s"] - r["measured_s"]) / r["measured_s"]
    errs = [abs(r["rel_error"]) for r in check]
    return {"profile": str(path), "fit": prof["fit"], "coefficients": prof["coefficients"], "held_out": check,
            "held_out_median_abs_rel_error": statistics.median(errs), "held_out_max_abs_rel_error": max(errs)}


def section_overlay(plan: Plan, loaded, profile_path: str | None) -> dict:
    out = {}
    for name in ("azure2024_conv_small.csv", "azure_code_small.csv"):
        trace = sample_trace(name, plan)
        sc = scenario(plan, profile=profile_path) if profile_path else scenario(plan)
        measured = run(trace, sc, RunConfig(device=str(loaded.device), dtype=plan.dtype), loaded=loaded)
        table = overlay_table(measured.summary, simulate_like(measured, trace, False).summary)
        out[name] = {"requests": len(trace.df), "profile": profile_path,
                     "rows": json.loads(table.to_json(orient="records"))}
    return out


def section_kv_dtypes(plan: Plan, loaded) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, loaded.spec.vocab_size, (n,), generator=g).tolist() for n in (9, 40, 100)]
    for kv in ("int8", "fp8"):
        res = run(fixed_trace(plan), scenario(plan, kv_dtype=kv),
                  RunConfig(device=str(loaded.device), dtype=plan.dtype, offline=True), loaded=loaded)
        err = kv_error.logits_error(loaded, kv, prompts, 8, plan.dtype)
        rows.append({"kv_dtype": kv, "completed": res.summary["completed"],
                     "throughput_tok_s": res.summary["throughput_tok_s"], "kv_pool_bytes": res.summary["kv_pool_bytes"],
                     "logits_max_abs_vs_model_dtype": err.max_abs, "logits_rel_l2_vs_model_dtype": err.rel_l2})
    return rows


def section_vllm(plan: Plan, device: str, quick: bool) -> dict:
    """vLLM V1 on the same requests through gpu_backend.vllm_engine (its own venv, a subprocess)."""
    from gpu_backend.vllm_engine.client import vllm_available

    if not vllm_available():
        return {"skipped": "vLLM is not installed here (no .venv-vllm, KVSIM_VLLM_PYTHON unset): no vLLM figures"}
    if device != "cpu":
        return {"skipped": "gpu_backend.vllm_engine drives CPU vLLM only: no CUDA vLLM figures"}
    if quick:
        return {"skipped": "--quick does not start vLLM (tests/ cover the CPU engine); run without --quick"}
    from gpu_backend.vllm_engine.run import run_vllm

    sc = scenario(plan, block_size=32)  # vLLM's CPU attention wants blocks of a multiple of 32 tokens
    blocks = plan.requests * -(-(plan.prompt + plan.output) // 32)
    s = run_vllm(fixed_trace(plan), sc, num_blocks=blocks, offline=True).summary
    return {"vllm_version": s.get("vllm_version"), "device": s.get("device"), "throughput_tok_s": s["throughput_tok_s"]}


# --- the Markdown table ----------------------------------------------------------------------------

def _f(x, fmt: str = "{:.3g}") -> str:
    return "" if x is None else fmt.format(x)


def table_rows(report: dict) -> list[tuple[str, str, str, str, str]]:
    """(section, figure, measured, reference, ratio or error) for every figure in the report."""
    s, rows = report["sections"], []
    for r in s.get("pool", []):
        rows.append(("pool", f"{r['kv_dtype']} pool bytes", str(r["pool_bytes"]), f"formula {r['formula_bytes']}",
                     "exact" if r["exact"] else "MISMATCH"))
    if "decode" in s:
        for r in s["decode"]["rows"]:
            rows.append(("decode", f"step, batch {r['batch']} x {r['context']} ctx", _f(r["step_s"]) + " s",
                         "memory floor " + _f(r["floor_s"]) + " s", "floor/step " + _f(r["floor_over_step"], "{:.2f}")))
    if "throughput" in s:
        t = s["throughput"]
        rows.append(("throughput", f"{t['requests']} req x {t['output']} out tokens", _f(t["ours_tok_s"]) + " tok/s",
                     "HF generate() " + _f(t["hf_generate_tok_s"]) + " tok/s", "x" + _f(t["speedup"], "{:.2f}")))
    if "calibration" in s:
        c = s["calibration"]
        rows.append(("calibration", f"fit on {c['fit']['samples']} shapes", "r2 " + _f(c["fit"]["r2"], "{:.3f}"),
                     "held-out shapes", "median |err| " + _f(c["held_out_median_abs_rel_error"], "{:.1%}")))
    for trace, o in s.get("overlay", {}).items():
        for r in o["rows"]:
            rows.append(("overlay", f"{trace}: {r['metric']}", _f(r["measured"]), "sim " + _f(r["simulated"]),
                         "" if r["error"] is None else _f(r["error"], "{:+.1%}")))
    for r in s.get("kv_dtypes", []):
        rows.append(("kv_dtypes", f"{r['kv_dtype']} run", _f(r["throughput_tok_s"]) + " tok/s",
                     f"{r['completed']} completed", "logits rel L2 " + _f(r["logits_rel_l2_vs_model_dtype"])))
    if "vllm" in s:
        v = s["vllm"]
        rows.append(("vllm", "vLLM", v.get("skipped", _f(v.get("throughput_tok_s")) + " tok/s"), "", ""))
    rows += [(name, "FAILED", err.splitlines()[0][:120], "", "") for name, err in report["errors"].items()]
    return rows


def markdown(report: dict) -> str:
    m = report["machine"]
    head = (f"# GPU suite: {report['plan']['model']} {report['plan']['dtype']} on {m['device']}\n\n"
            f"torch {m['torch']}, transformers {m['transformers']}, Python {m['python']}; "
            f"{report.get('wall_s', 0):.0f} s in all.\n\n"
            "| section | figure | measured | reference | ratio / error |\n|---|---|---|---|---|\n")
    return head + "".join(f"| {' | '.join(c.replace('|', '/') for c in row)} |\n" for row in table_rows(report))


# --- the run ----------------------------------------------------------------------------------------

def run_suite(plan: Plan, device: str, out: Path, only: set[str] | None = None, quick: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    loaded = load_model(plan.model, dtype=plan.dtype, device=device)
    report = {"machine": {"device": device_name(loaded.device), "torch": torch.__version__,
                          "transformers": __import__("transformers").__version__, "python": platform.python_version()},
              "plan": {"model": plan.model, "dtype": plan.dtype}, "sections": {}, "errors": {}}
    profile_path: list[str | None] = [None]

    def calibration():
        r = section_calibration(plan, loaded, out)
        profile_path[0] = r["profile"]
        return r

    steps = {"pool": lambda: section_pool(plan, loaded), "decode": lambda: section_decode(plan, loaded),
             "throughput": lambda: section_throughput(plan, loaded), "calibration": calibration,
             "overlay": lambda: section_overlay(plan, loaded, profile_path[0]),
             "kv_dtypes": lambda: section_kv_dtypes(plan, loaded), "vllm": lambda: section_vllm(plan, device, quick)}
    for name, fn in steps.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        print(f"[gpu_suite] {name} ...", flush=True)
        try:
            report["sections"][name] = fn()
        except Exception as exc:  # noqa: BLE001 - one failed section must not lose the others' figures
            report["errors"][name] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        print(f"[gpu_suite] {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
    report["wall_s"] = time.perf_counter() - t_start
    (out / "gpu_suite.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "gpu_suite.md").write_text(markdown(report))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--quick", action="store_true", help="tiny model, tiny shapes: proves the suite runs (CI)")
    ap.add_argument("--model", help="override the plan's model (catalog name or config.json)")
    ap.add_argument("--only", help="comma-separated sections to run (default: all)")
    ap.add_argument("--out", default="gpu_suite_out", help="folder for gpu_suite.json and gpu_suite.md")
    args = ap.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no CUDA device; use --device cpu --quick", file=sys.stderr)
        return 2
    plan = QUICK if args.quick else FULL
    if args.model:
        from dataclasses import replace

        plan = replace(plan, model=args.model)
    only = set(args.only.split(",")) if args.only else None
    report = run_suite(plan, device, Path(args.out), only, args.quick)
    print(f"[gpu_suite] wrote {args.out}/gpu_suite.json and gpu_suite.md in {report['wall_s']:.0f} s; "
          f"{len(report['errors'])} section(s) failed", flush=True)
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Bit-identity check for refactors: five varied scenarios, a hash of each run's steps and requests frames.

A refactor that must not change results (issue 23) is run before and after: every hash must match.
The scenarios cover the main roads through the code: a dense model on a paged pool under pressure
(preemption, the kv-heads what-if), prefix caching on the Mooncake sample, a contiguous pool with a
reserve policy and placement, a hybrid model with layer groups (gpt-oss-20b: sliding + full
attention), and static batching plus swap preemption.

Run: .venv/bin/python bench/hash_frames.py [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.run.engine import simulate  # noqa: E402
from sim.scenario import Scenario  # noqa: E402
from sim.trace import load_trace  # noqa: E402

SAMPLES = ROOT / "samples"

# name -> (trace file, scenario fields)
SCENARIOS: dict[str, tuple[str, dict]] = {
    "dense-paged": ("chat_small.csv", dict(model="llama-3-8b", kv_budget_gib=1.0, kv_heads=4, speedup=4.0,
                                           max_num_seqs=64)),
    "prefix-mooncake": ("mooncake_small.jsonl", dict(model="qwen2.5-7b", prefix_caching=True, kv_budget_gib=4.0,
                                                     speedup=20.0)),
    "contiguous": ("azure_code_small.csv", dict(model="mistral-7b", allocator="contiguous", reserve="max",
                                                placement="best-fit", kv_budget_gib=3.0, speedup=3.0,
                                                max_model_len=4096)),
    "hybrid-gpt-oss": ("azure_conv_slice.csv", dict(model="gpt-oss-20b", gpu="h100-sxm", speedup=3.0,
                                                    kv_budget_gib=2.0, kv_dtype="fp8")),
    "static-swap": ("burstgpt_small.csv", dict(model="llama-2-7b", static_batch=16, preemption="swap",
                                               kv_budget_gib=2.0, speedup=2.0)),
}


def frame_hash(df) -> str:
    """sha256 of a frame's columns, dtypes and every value (floats written with repr: bit-exact)."""
    h = hashlib.sha256()
    h.update(repr(list(df.columns)).encode())
    h.update(repr([str(t) for t in df.dtypes]).encode())
    h.update(df.to_csv(index=True, float_format=None).encode())
    return h.hexdigest()[:16]


def run_all() -> dict[str, dict[str, str]]:
    out = {}
    for name, (trace_file, fields) in SCENARIOS.items():
        res = simulate(load_trace(SAMPLES / trace_file), Scenario(**fields))
        out[name] = {"steps": frame_hash(res.steps), "requests": frame_hash(res.requests),
                     "n_steps": str(len(res.steps)), "completed": str(res.summary.get("completed")),
                     "preempted": str(res.summary.get("num_preemptions"))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    hashes = run_all()
    if args.json:
        print(json.dumps(hashes, indent=1))
        return
    for name, h in hashes.items():
        print(f"{name:16s} steps {h['steps']}  requests {h['requests']}  ({h['n_steps']} steps, {h['completed']} done, {h['preempted']} preemptions)")


if __name__ == "__main__":
    main()

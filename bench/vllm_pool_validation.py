"""kvsim's vLLM pool (num_gpu_blocks) against public vLLM start-up logs: the error table.

Reads tests/data/vllm_startup_logs.jsonl (one real vLLM V1 start-up per row, each with the URL
and the exact lines it came from; sim/memory/startup_logs.py) and predicts every row with
sim/memory/vllm_profile.py at the row's vLLM version. Prints per row the measured and predicted
num_gpu_blocks, vLLM's and kvsim's available KV memory, the compile cache the log shows and
kvsim's num_gpu_blocks_range, each logged term beside kvsim's, and the median and worst |error|. docs/CALIBRATION.md ("Validation on public start-up logs") holds the table.

Run: .venv/bin/python bench/vllm_pool_validation.py [--json] [--file PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.memory.startup_logs import DATA, StartupLogError, check, load_logs, summary, table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path, default=DATA, help="JSONL of start-up logs (default: the repo's)")
    ap.add_argument("--json", action="store_true", help="print the rows and the summary as JSON")
    args = ap.parse_args(argv)
    try:
        checks = [check(log) for log in load_logs(args.file)]
    except (OSError, StartupLogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        rows = [{"id": c.log.id, "url": c.log.url, "vllm_version": c.log.vllm_version, "gpu": c.log.gpu,
                 "model": c.log.model, "tp": c.log.tp, "pp": c.log.pp, "measured_blocks": c.measured_blocks,
                 "predicted_blocks": c.predicted_blocks, "error": c.error,
                 "available_error_gib": c.available_error_gib, "terms_gib": c.terms,
                 "compile_cache": c.profile.compile_cache, "num_gpu_blocks_range": list(c.profile.num_gpu_blocks_range),
                 "in_range": c.in_range} for c in checks]
        print(json.dumps({"rows": rows, "summary": summary(checks)}, indent=1))
    else:
        print(table(checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Drive a real vLLM V1 engine step by step and report what its scheduler decided (runs in .venv-vllm).

Run by gpu_backend/vllm_engine/client.py as `.venv-vllm/bin/python worker.py`: one JSON request on
stdin, or a JSON list of them run one after another, each on a fresh engine (docs/CONFORMANCE.md,
"Protocol"), JSON lines on stdout. Imports only the standard library and vLLM, because it runs in
vLLM's own virtual environment, not the project's.

Each engine step is one `Scheduler.schedule()` call; the worker wraps that method to read the
`SchedulerOutput` (tokens scheduled per request, new and resumed requests with their prefix-cache
hits, preemptions) and the block pool around it. Arrivals are replayed either as steps (request k
is added before the first step numbered >= its `arrival_step`: the clock both sides of `conform`
share) or on the wall clock (`arrival_s`, for `run --engine vllm`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

from protocol import PROTOCOL  # the sibling module (this script's folder is on sys.path); stdlib only

del sys.path[0]  # nothing else of this folder may shadow a package vLLM imports

_SUFFIX = re.compile(r"-[0-9a-f]{8}$")  # the engine appends "-<8 hex>" to every request id

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in-process: scheduler reachable
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


# vLLM logs to stdout: keep the real stdout for the protocol and send everything else to stderr.
_OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)


def emit(obj: dict) -> None:
    _OUT.write(json.dumps(obj, separators=(",", ":")) + "\n")
    _OUT.flush()


def external_id(rid: str) -> str:
    return _SUFFIX.sub("", rid)


def build_engine(model_dir: str, eng: dict):
    from vllm import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    args = EngineArgs(
        model=model_dir, load_format="dummy", skip_tokenizer_init=True, seed=int(eng.get("seed", 0)),
        dtype=eng.get("dtype", "float32"), block_size=int(eng["block_size"]),
        # vLLM keeps one block of the pool as its null block: ask for one more than the usable count.
        num_gpu_blocks_override=int(eng["num_blocks"]) + 1,
        max_num_seqs=int(eng["max_num_seqs"]), max_num_batched_tokens=int(eng["max_num_batched_tokens"]),
        enable_chunked_prefill=bool(eng["chunked_prefill"]), enable_prefix_caching=bool(eng["prefix_caching"]),
        max_model_len=int(eng["max_model_len"]), gpu_memory_utilization=float(eng.get("gpu_memory_utilization", 0.2)),
        prefix_cache_retention_interval=eng.get("prefix_cache_retention_interval", 0),
        # as asked; vLLM's CPU platform turns it off (platforms/cpu.py line 331): one schedule() per
        # step, outputs applied before the next, what kvsim models ("hello" reports what vLLM chose)
        async_scheduling=eng.get("async_scheduling"),
        enforce_eager=bool(eng.get("enforce_eager", True)),
    )
    return LLMEngine.from_engine_args(args)


class StepProbe:
    """Wraps the V1 scheduler's schedule() to capture each step's decisions."""

    def __init__(self, scheduler) -> None:
        self.sched = scheduler
        self.last: dict | None = None
        self._orig = scheduler.schedule
        scheduler.schedule = self._schedule

    def _schedule(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self._orig(*args, **kwargs)
        hits = {external_id(r.req_id): r.num_computed_tokens for r in out.scheduled_new_reqs}
        cached = out.scheduled_cached_reqs
        for rid, n in zip(cached.req_ids, cached.num_computed_tokens, strict=True):
            if rid in cached.resumed_req_ids:
                hits[external_id(rid)] = n
        reqs = self.sched.requests
        decode = sum(1 for rid, n in out.num_scheduled_tokens.items()
                     if n == 1 and reqs[rid].num_output_tokens >= 1 and external_id(rid) not in hits)
        pool = self.sched.kv_cache_manager.block_pool
        self.last = {
            "t_schedule": t0,
            "scheduled": [(external_id(r), n) for r, n in out.num_scheduled_tokens.items()],
            "admitted": list(hits.items()),  # (id, prefix-cache hit tokens) in admission order
            "preempted": [external_id(r) for r in out.preempted_req_ids or ()],
            "running_ids": [external_id(r.request_id) for r in self.sched.running],
            "waiting_ids": [external_id(r.request_id) for r in self.sched.waiting],
            # the null block is "used" in vLLM's books; kvsim has no null block
            "blocks_in_use": pool.num_gpu_blocks - pool.get_num_free_blocks() - 1,
            "decode_tokens": decode,
            "kv_tokens": sum(r.num_computed_tokens for r in self.sched.running),
        }
        return out


def main() -> int:
    """One request, or a list run in turn: vLLM is imported once (most of a start's time), then each
    run builds its own engine and shuts it down; every run ends with its "done" (or an "error")."""
    try:
        req = json.loads(sys.stdin.read())
    except json.JSONDecodeError as exc:
        emit({"type": "error", "message": f"request is not JSON: {exc}"})
        return 2
    runs = req if isinstance(req, list) else [req]
    for one in runs:
        if not isinstance(one, dict) or one.get("protocol") != PROTOCOL:
            got = one.get("protocol") if isinstance(one, dict) else one
            emit({"type": "error", "message": f"protocol {got!r} not spoken (this worker: {PROTOCOL})"})
            return 2
    engine = None
    for one in runs:
        if engine is not None:  # the last run's engine goes with the process
            engine.engine_core.shutdown()  # frees it in-process, as vLLM's own unit tests do
        engine = build_engine(one["model_dir"], one["engine"])
        code = drive(engine, one)
        if code:
            return code
    return 0


def drive(engine, req: dict) -> int:
    """Replay one request's arrivals through `engine`, a step record per scheduler step."""
    import vllm
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    clock = req.get("clock", "steps")
    core = engine.engine_core.engine_core
    probe = StepProbe(core.scheduler)
    emit({"type": "hello", "protocol": PROTOCOL, "vllm_version": vllm.__version__,
          "async_scheduling": bool(engine.vllm_config.scheduler_config.async_scheduling)})

    pending = sorted(req["requests"], key=lambda r: (r["arrival_step"] if clock == "steps" else r["arrival_s"]))
    max_steps = req.get("max_steps")
    times: dict[str, dict] = {}
    step, i, t0 = 0, 0, time.perf_counter()

    def add(r: dict) -> None:
        # Random sampling (the engine's global seed): outputs differ between requests, so output
        # blocks are never shared across requests (kvsim's side assumes so). Per-request seeds fail on CPU.
        sp = SamplingParams(max_tokens=int(r["max_tokens"]), ignore_eos=True, temperature=1.0, detokenize=False)
        engine.add_request(r["id"], TokensPrompt(prompt_token_ids=r["prompt"]), sp)
        times[r["id"]] = {"arrival_s": time.perf_counter() - t0, "arrival_step": step}

    while i < len(pending) or engine.has_unfinished_requests():
        if max_steps is not None and step >= max_steps:
            break
        if clock == "steps":
            while i < len(pending) and pending[i]["arrival_step"] <= step:
                add(pending[i])
                i += 1
            if not engine.has_unfinished_requests():
                step = pending[i]["arrival_step"]
                continue
        else:
            now = time.perf_counter() - t0
            while i < len(pending) and pending[i]["arrival_s"] <= now:
                add(pending[i])
                i += 1
            if not engine.has_unfinished_requests():
                time.sleep(max(pending[i]["arrival_s"] - (time.perf_counter() - t0), 0.0))
                continue
        probe.last = None
        outputs = engine.step()
        t_end = time.perf_counter() - t0
        if probe.last is None:  # no schedule() this step (nothing schedulable): nothing to report
            step += 1
            continue
        rec = probe.last
        if not rec["scheduled"] and not rec["running_ids"] and i == len(pending):
            emit({"type": "error", "message": f"vLLM cannot schedule request {rec['waiting_ids'][0]} at step {step}"})
            return 1
        t_start = rec.pop("t_schedule") - t0
        finished = []
        for o in outputs:
            ts = times.get(o.request_id)
            if ts is None:
                continue
            if "first_token_s" not in ts and o.outputs and len(o.outputs[0].token_ids) > 0:
                ts["first_token_s"] = t_end
            if o.finished:
                ts["finish_s"] = t_end
                finished.append(o.request_id)
        for rid, _ in rec["scheduled"]:
            ts = times.get(rid)
            if ts is not None and "first_scheduled_s" not in ts:
                ts["first_scheduled_s"] = t_start
        emit({"type": "step", "step": step, "t_start_s": t_start, "t_end_s": t_end, "finished": finished, **rec})
        step += 1
    for rid, ts in times.items():
        emit({"type": "request", "id": rid, **ts})
    emit({"type": "done", "steps": step, "wall_s": time.perf_counter() - t0})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # one line for the client; the traceback goes to stderr
        import traceback

        traceback.print_exc(file=sys.stderr)
        emit({"type": "error", "message": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
        sys.exit(1)

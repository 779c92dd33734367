"""The versioned JSON protocol between kvsim and the vLLM worker, and the step record both sides emit.

Request (one JSON object on the worker's stdin):
    {"protocol": 1, "model_dir": DIR, "clock": "steps" | "wall", "max_steps": int | null,
     "engine": EngineConfig fields, "requests": [{"id", "prompt": [token ids], "max_tokens",
     "arrival_step", "arrival_s"}]}
Reply (JSON lines on its stdout): {"type": "hello", "protocol", "vllm_version", "async_scheduling"}, one
{"type": "step", ...StepRecord fields, "t_start_s", "t_end_s"} per engine step, one
{"type": "request", "id", "arrival_s", "arrival_step", "first_scheduled_s", "first_token_s",
"finish_s"} per request, then {"type": "done", "steps", "wall_s"}; or {"type": "error", "message"}.
A new field is backward compatible; a changed meaning bumps PROTOCOL (the worker refuses others).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PROTOCOL = 1

# Compared step by step by `conform`, in this order (the first field that differs is reported).
COMPARED_FIELDS = ("scheduled", "preempted", "admitted", "finished", "running_ids", "waiting_ids", "blocks_in_use")


@dataclass(frozen=True)
class EngineConfig:
    """What both engines are configured with (vLLM EngineArgs names where they exist)."""

    block_size: int
    num_blocks: int  # usable KV blocks (vLLM gets one more: its null block)
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    prefix_caching: bool
    max_model_len: int
    seed: int = 0
    dtype: str = "float32"
    # vLLM's: which sliding-window / state blocks the prefix cache keys (0, its default: only
    # where a request may resume; None: every block; sim/core/kv/sliding_retention.py)
    prefix_cache_retention_interval: int | None = 0
    # vLLM's async_scheduling as asked (None: its default). The worker's vLLM runs on CPU, whose
    # platform turns it off whatever is asked (vllm/platforms/cpu.py line 331): one batch in flight.
    async_scheduling: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EngineRequest:
    """One request as token ids; `rid` is its row in the trace (the protocol id is f"r{rid}")."""

    rid: int
    prompt: list[int]
    max_tokens: int
    arrival_step: int
    arrival_s: float

    @property
    def id(self) -> str:
        return f"r{self.rid}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "max_tokens": self.max_tokens,
                "arrival_step": self.arrival_step, "arrival_s": self.arrival_s}


@dataclass
class StepRecord:
    """What one engine step decided. Ids are protocol ids ("r3"); lists in the engine's order
    except `scheduled`, `preempted` and `finished`, which are sorted (sets in vLLM's output)."""

    step: int
    scheduled: list[tuple[str, int]]  # (id, tokens computed this step), sorted by id
    admitted: list[tuple[str, int]]  # (id, prefix-cache hit tokens) of requests admitted this step
    preempted: list[str]
    finished: list[str]
    running_ids: list[str]  # the running queue after scheduling, in its order
    waiting_ids: list[str]  # the waiting queue after scheduling, head first
    blocks_in_use: int
    kv_tokens: int = 0  # K/V tokens of the running requests after the step's tokens are counted
    decode_tokens: int = 0  # scheduled requests computing one token after their prompt (not compared)
    t_start_s: float = 0.0
    t_end_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepRecord:
        return cls(step=int(d["step"]), scheduled=sorted((str(i), int(n)) for i, n in d["scheduled"]),
                   admitted=sorted((str(i), int(n)) for i, n in d["admitted"]), preempted=sorted(d["preempted"]),
                   finished=sorted(d["finished"]), running_ids=list(d["running_ids"]),
                   waiting_ids=list(d["waiting_ids"]), blocks_in_use=int(d["blocks_in_use"]),
                   kv_tokens=int(d.get("kv_tokens", 0)), decode_tokens=int(d.get("decode_tokens", 0)), t_start_s=float(d.get("t_start_s", 0.0)),
                   t_end_s=float(d.get("t_end_s", 0.0)))

    def value(self, name: str) -> Any:
        v = getattr(self, name)
        return [list(x) for x in v] if name in ("scheduled", "admitted") else v

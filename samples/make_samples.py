"""Regenerate the bundled sample traces (seeded; our own synthetic data, not copies of public traces).

Run from the repository root:  .venv/bin/python samples/make_samples.py
Each file exercises one loader format with realistic-looking shapes (see samples/README.md).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def gaps(rng: np.random.Generator, n: int, rate: float, cv: float = 1.0) -> np.ndarray:
    shape = 1 / cv**2
    t = np.concatenate([[0.0], np.cumsum(rng.gamma(shape, 1 / (rate * shape), n - 1))])
    return t


def lognormal(rng: np.random.Generator, n: int, mean: float, sigma: float, hi: int) -> np.ndarray:
    mu = np.log(mean) - sigma**2 / 2
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), 1, hi).astype(int)


def chat_small(rng: np.random.Generator) -> None:
    """Generic CSV, 300 chat requests over ~60 s; multi-turn sessions whose prompt carries the history."""
    n = 300
    arrival = gaps(rng, n, rate=5.0, cv=1.5)
    sessions: list[tuple[str, int, float]] = []  # (id, context so far, last arrival)
    rows = []
    for i in range(n):
        message = int(lognormal(rng, 1, 180, 0.9, 2000)[0])
        answer = int(lognormal(rng, 1, 260, 0.7, 1500)[0])
        idle = [k for k, (_, _, last) in enumerate(sessions) if arrival[i] - last > 8.0]  # user read + typed
        if idle and rng.random() < 0.6:
            k = idle[int(rng.integers(len(idle)))]
            sid, context, _ = sessions[k]
        else:
            sid, context, k = f"s{len(sessions) + 1:03d}", 40, len(sessions)  # 40-token system prompt
            sessions.append((sid, context, 0.0))
        prompt = min(context + message, 7000)
        rows.append(f"{arrival[i]:.3f},{prompt},{answer},{sid}")
        sessions[k] = (sid, prompt + answer, float(arrival[i]))
    (HERE / "chat_small.csv").write_text("arrival_s,input_tokens,output_tokens,session_id\n" + "\n".join(rows) + "\n")


def azure_small(rng: np.random.Generator) -> None:
    """Azure 2023 style (7-decimal timestamps, code-completion shapes) and 2024 style (+00:00, mixed fractions)."""
    start = datetime(2024, 1, 8, 9, 30, 0)
    n = 200
    t = gaps(rng, n, rate=2.5, cv=2.0)
    ctx, gen = lognormal(rng, n, 2000, 1.0, 7437), lognormal(rng, n, 28, 0.9, 1900)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):
        ticks = int(round(t[i] * 1e7))  # 100 ns ticks: the 7th decimal
        stamp = start + timedelta(microseconds=ticks // 10)
        lines.append(f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}{ticks % 10},{ctx[i]},{gen[i]}")
    (HERE / "azure_code_small.csv").write_text("\n".join(lines) + "\n")

    start = datetime(2024, 5, 13, 0, 0, 0, tzinfo=UTC)
    n = 150
    t = np.round(gaps(rng, n, rate=3.0, cv=1.2), 4)
    t[::7] = np.floor(t[::7])  # some stamps land on whole seconds and are written without a fraction
    t = np.maximum.accumulate(t)
    ctx, gen = lognormal(rng, n, 1100, 0.9, 14000), lognormal(rng, n, 210, 0.8, 1000)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):
        stamp = start + timedelta(seconds=float(t[i]))
        frac = "" if stamp.microsecond == 0 else f".{stamp.microsecond:06d}0"
        lines.append(f"{stamp:%Y-%m-%d %H:%M:%S}{frac}+00:00,{ctx[i]},{gen[i]}")
    (HERE / "azure2024_conv_small.csv").write_text("\n".join(lines) + "\n")


def burstgpt_small(rng: np.random.Generator) -> None:
    """BurstGPT 8-column (two models, two log types, ~5% failed) and a 6-column file."""
    n = 300
    t = np.round(gaps(rng, n, rate=1.0, cv=2.5), 0) + 5
    req, resp = lognormal(rng, n, 600, 1.1, 8000), lognormal(rng, n, 300, 0.9, 2000)
    resp[rng.random(n) < 0.05] = 0
    model = np.where(rng.random(n) < 0.7, "ChatGPT", "GPT-4")
    log = np.where(rng.random(n) < 0.8, "Conversation log", "API log")
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type,Session ID,Elapsed time"]
    for i in range(n):
        elapsed = 0.0 if resp[i] == 0 else 0.4 + resp[i] * 0.02
        session = int(rng.integers(1, 80))
        lines.append(f"{t[i]:.0f},{model[i]},{req[i]},{resp[i]},{req[i] + resp[i]},{log[i]},{session},{elapsed:.2f}")
    (HERE / "burstgpt_small.csv").write_text("\n".join(lines) + "\n")

    n = 120
    t = np.round(gaps(rng, n, rate=0.5), 0)
    req, resp = lognormal(rng, n, 400, 1.0, 8000), lognormal(rng, n, 250, 0.9, 2000)
    resp[rng.random(n) < 0.05] = 0
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    lines += [f"{t[i]:.0f},ChatGPT,{req[i]},{resp[i]},{req[i] + resp[i]},Conversation log" for i in range(n)]
    (HERE / "burstgpt6_small.csv").write_text("\n".join(lines) + "\n")


def mooncake_small(rng: np.random.Generator) -> None:
    """Mooncake-style JSONL: ms timestamps; hash_ids share leading blocks across 5 'system prompts'."""
    n = 200
    t = np.floor(gaps(rng, n, rate=4.0, cv=1.3) * 1000).astype(int)
    next_id = 0
    prefixes = []
    for _ in range(5):
        blocks = int(rng.integers(1, 5))
        prefixes.append(list(range(next_id, next_id + blocks)))
        next_id += blocks
    lines = []
    for i in range(n):
        prefix = prefixes[int(rng.integers(5))]
        extra = int(lognormal(rng, 1, 3000, 0.8, 30000)[0])
        length = len(prefix) * 512 + extra
        blocks = -(-length // 512)
        ids = prefix + list(range(next_id, next_id + blocks - len(prefix)))
        next_id += blocks - len(prefix)
        out = int(lognormal(rng, 1, 340, 0.8, 2000)[0])
        lines.append(json.dumps({"timestamp": int(t[i]), "input_length": length, "output_length": out, "hash_ids": ids}))
    (HERE / "mooncake_small.jsonl").write_text("\n".join(lines) + "\n")


def simulator_formats(rng: np.random.Generator) -> None:
    """Vidur and SplitwiseSim CSVs, and a generic JSONL."""
    n = 200
    t = gaps(rng, n, rate=6.0)
    p, d = lognormal(rng, n, 1024, 0.8, 4096), lognormal(rng, n, 256, 0.8, 1024)
    lines = ["arrived_at,num_prefill_tokens,num_decode_tokens"] + [f"{t[i]:.6f},{p[i]},{d[i]}" for i in range(n)]
    (HERE / "vidur_small.csv").write_text("\n".join(lines) + "\n")

    t = gaps(rng, n, rate=3.0, cv=1.5)
    p, d = lognormal(rng, n, 1500, 0.9, 8192), lognormal(rng, n, 150, 0.9, 1024)
    lines = ["request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size"]
    lines += [f"{i},2,0,{t[i]:.6f},1,{p[i]},{d[i]}" for i in range(n)]
    (HERE / "splitwise_small.csv").write_text("\n".join(lines) + "\n")

    n = 100
    t = gaps(rng, n, rate=2.0)
    p, d = lognormal(rng, n, 300, 0.7, 4096), lognormal(rng, n, 120, 0.7, 1024)
    rows = [json.dumps({"arrival_s": round(float(t[i]), 4), "input_tokens": int(p[i]), "output_tokens": int(d[i])}) for i in range(n)]
    (HERE / "generic_small.jsonl").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    for i, make in enumerate((chat_small, azure_small, burstgpt_small, mooncake_small, simulator_formats)):
        make(np.random.default_rng(1000 + i))

"""A trace as engine requests: token ids, step arrivals, and the block keys kvsim's prefix cache uses.

vLLM's prefix cache keys a full block by its token ids (chained with the block before it); kvsim's
keys a block by the trace's prefix hash ids. To make both see the same sharing:
- a trace with prefix hash ids (Mooncake) gets token ids made FROM the hash ids: hash block j with
  id h is the same `hash_block_tokens` ids in every request that carries h, so vLLM finds the
  shared prefix; rows without hash ids get per-request random ids (no sharing);
- kvsim is given one content id per KV block: the hash of the block's prompt token ids, or, for a
  block holding generated tokens, an id of (request, block) (vLLM samples randomly, so generated
  tokens are never shared across requests, but a preempted request finds its own again).
Lengths can be scaled down (`scale`) so that a real trace runs on a tiny CPU model; a trace's
hash block size scales with it, so prompts still cover the same hash ids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gpu_backend.vllm_engine.protocol import EngineRequest


def _ids(rng_key: Sequence[int], n: int, vocab: int) -> list[int]:
    return np.random.default_rng(list(rng_key)).integers(3, max(vocab, 4), size=n).tolist()


def engine_requests(trace, *, step_s: float, vocab: int, max_model_len: int, scale: float = 1.0,
                    max_requests: int | None = None, seed: int = 0) -> list[EngineRequest]:
    """The first `max_requests` rows of `trace` as requests (arrival step = floor(arrival_s / step_s)).

    Lengths are multiplied by `scale` (at least 1 token each), then cut to fit max_model_len (the
    prompt first, as sim.trace.transforms.clamp_context does)."""
    if step_s <= 0 or scale <= 0:
        raise ValueError(f"conform: step_s and scale must be > 0 (got {step_s}, {scale})")
    df = trace.df if max_requests is None else trace.df.iloc[:max_requests]
    hashes = df["prefix_hashes"].tolist() if "prefix_hashes" in df.columns else [None] * len(df)
    hb = max(1, round((trace.prefix_block_size or 1) * scale))  # tokens per hash id after scaling
    out = []
    for rid, (arr, inp, outp, hs) in enumerate(zip(df["arrival_s"], df["input_tokens"], df["output_tokens"], hashes,
                                                     strict=True)):
        n_out = min(max(1, round(int(outp) * scale)), max_model_len - 1)
        n_in = min(max(1, round(int(inp) * scale)), max_model_len - n_out)
        prompt: list[int] = []
        if hs is not None and len(hs):
            for h in hs:
                if len(prompt) >= n_in:
                    break
                prompt += _ids((seed, 1, int(h)), hb, vocab)
        prompt = prompt[:n_in]
        if len(prompt) < n_in:  # beyond the hashed range: this request's own tokens
            prompt += _ids((seed, 2, rid), n_in - len(prompt), vocab)
        out.append(EngineRequest(rid, prompt, n_out, int(math.floor(float(arr) / step_s + 1e-9)), float(arr)))
    return out


def block_content_ids(req: EngineRequest, block_size: int) -> list[int]:
    """One id per KV block of the request's whole life (prompt + output): the hash of the block's
    prompt token ids when the block is all prompt, else an id unique to (request, block)."""
    n_blocks = -(-(len(req.prompt) + req.max_tokens) // block_size)
    full_prompt = len(req.prompt) // block_size
    ids = [hash(tuple(req.prompt[k * block_size:(k + 1) * block_size])) for k in range(full_prompt)]
    ids += [hash(("generated", req.rid, k)) for k in range(full_prompt, n_blocks)]
    return ids

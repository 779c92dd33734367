"""A trace's rows as the requests `sim observe` sends: token-id prompts of the exact length.

A prompt is sent as token ids (the OpenAI completions API takes a list of ints; vLLM and SGLang
accept it with or without a tokenizer), so the server sees exactly the trace's input length, with
no tokenizer round trip. Ids are drawn in [FIRST_ID, 1000), or below the vocabulary when kvsim
knows the model and it is smaller: valid for any real vocabulary, even when the model kvsim is
told (--model-config, the dashboard's sidebar) is not quite the one served. The ids' values do not
change the work a request costs; only their count and their sharing do. A trace with prefix hash
ids (Mooncake) gets the same ids for the same hash block in every request that carries it, so the
server's prefix cache finds the sharing the trace describes (as gpu_backend/vllm_engine does for
the in-process engine); other rows get ids of their own.

`max_tokens` is the trace's output length with `ignore_eos`, so the server generates exactly that
many tokens. A row longer than the server's max_model_len is cut, prompt first (as
sim.trace.transforms.clamp_context does), and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FIRST_ID = 10  # below: special tokens in small vocabularies (bos 1, eos 2, pad 0)
FALLBACK_VOCAB = 1000


@dataclass(frozen=True)
class PlannedRequest:
    """One request to send: when (trace seconds, before speed-up), its prompt's recipe, tokens asked.

    The prompt ids are made when the request is sent (`prompt`), not when the trace is planned: a
    100,000-request trace would otherwise hold every prompt in memory for the whole run."""

    rid: int
    arrival_s: float
    input_tokens: int
    max_tokens: int
    clamped: bool
    hashes: tuple[int, ...] = ()  # the trace's prefix hash ids, one per `block` tokens
    block: int = 1
    vocab: int = FALLBACK_VOCAB
    seed: int = 0

    @property
    def prompt(self) -> list[int]:
        ids: list[int] = []
        for h in self.hashes:
            if len(ids) >= self.input_tokens:
                break
            ids += _ids((self.seed, 1, h), self.block, self.vocab)
        ids = ids[:self.input_tokens]
        if len(ids) < self.input_tokens:
            ids += _ids((self.seed, 2, self.rid), self.input_tokens - len(ids), self.vocab)
        return ids


def _ids(key: tuple[int, ...], n: int, vocab: int) -> list[int]:
    return np.random.default_rng(list(key)).integers(FIRST_ID, max(vocab, FIRST_ID + 1), size=n).tolist()


def plan_requests(trace, *, vocab: int | None, max_model_len: int | None, seed: int = 0) -> list[PlannedRequest]:
    """Every row of `trace` as a PlannedRequest, in arrival order."""
    df = trace.df
    vocab = min(vocab or FALLBACK_VOCAB, FALLBACK_VOCAB)
    hashes = df["prefix_hashes"].tolist() if "prefix_hashes" in df.columns else [None] * len(df)
    block = max(1, int(trace.prefix_block_size or 1))
    out = []
    for rid, (arr, inp, outp, hs) in enumerate(zip(df["arrival_s"], df["input_tokens"], df["output_tokens"], hashes,
                                                     strict=True)):
        n_in, n_out = int(inp), int(outp)
        clamped = False
        if max_model_len is not None and n_in + n_out > max_model_len:
            n_out = min(n_out, max_model_len - 1)
            n_in = max(1, min(n_in, max_model_len - n_out))
            clamped = True
        keys = tuple(int(h) for h in hs) if hs is not None and len(hs) else ()
        out.append(PlannedRequest(rid, float(arr), n_in, n_out, clamped, keys, block, vocab, seed))
    return out

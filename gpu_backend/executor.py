"""Run the shared Scheduler's steps through a real model over the paged KV pool, on a wall clock.

ModelRunner: one forward of a packed ragged batch (prefill chunks + decode tokens) with greedy
sampling of each request's next token. Executor: the serving loop (arrivals at trace times or all
at once offline -> Scheduler.schedule -> ModelRunner -> Scheduler.complete_step), recording the
simulator's frames. Output lengths are forced from the trace: the scheduler finishes a request
after its trace output count, whatever tokens the model samples (EOS is ignored).
"""

from __future__ import annotations

import torch

from gpu_backend.attention import SeqChunk, build_batch
from gpu_backend.model_loader import LoadedModel
from gpu_backend.paged_cache import PagedKVCache


class ModelRunner:
    """Packs a step's chunks into one sequence, runs the model, samples greedily."""

    def __init__(self, loaded: LoadedModel, cache: PagedKVCache, impl: str | None = None) -> None:
        self.model, self.cache, self.impl = loaded.model, cache, impl
        self.device = loaded.device

    @torch.inference_mode()
    def logits(self, chunks: list[SeqChunk], tokens: list[list[int]]) -> torch.Tensor:
        """Last-position logits [len(chunks), vocab] (fp32); tokens[i] are chunk i's new token ids."""
        batch = build_batch(self.cache, chunks, self.impl)
        ids: list[int] = []
        pos: list[int] = []
        for c, tk in zip(chunks, tokens, strict=True):
            if len(tk) != c.num_new:
                raise ValueError(f"chunk of {c.num_new} tokens given {len(tk)} token ids")
            ids += tk
            pos += range(c.start, c.context_len)
        dev = self.device
        last = torch.tensor(batch.query_start_loc[1:], device=dev) - 1
        out = self.model(input_ids=torch.tensor([ids], device=dev), position_ids=torch.tensor([pos], device=dev),
                         use_cache=False, kvsim_batch=batch, logits_to_keep=last)
        return out.logits[0].float()

    def greedy(self, chunks: list[SeqChunk], tokens: list[list[int]]) -> list[int]:
        return self.logits(chunks, tokens).argmax(-1).tolist()

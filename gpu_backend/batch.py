"""Per-step attention metadata: built once per step from the scheduler's host-side numbers.

Everything per token (slot of each new token, its request and position) is computed with tensor
ops on the device from per-request tensors; per-request numbers (start, new tokens, context) are
host ints the scheduler already has. Nothing here reads a device tensor back to the host, so
building a batch never synchronises (tests build one on the meta device, where any such read fails).

The SDPA path's grouping (`plan_groups`) is planned on the host from the same ints: requests sorted
by context, grouped while padding stays within SLACK of the real tokens and the group's gathered
K/V and scores stay under the workspace cap; a long prefill is cut into query chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_backend.paged_cache import PAD_BLOCK, PagedKVCache

SLACK = 1.25  # a group may pad up to 25% more tokens (keys or queries) than its requests hold
WORKSPACE_BYTES = 256 << 20  # cap on a group's gathered K/V plus scores: the attention's transient memory
SCORE_BYTES = 4  # an attention score element, conservatively fp32 (the math kernel; fused kernels keep none)


@dataclass
class SeqChunk:
    """One request's share of a step: `num_new` tokens at positions [start, start + num_new)."""

    block_table: list[int]  # allocator block ids, token order
    start: int
    num_new: int

    @property
    def context_len(self) -> int:
        return self.start + self.num_new


@dataclass
class Group:
    """Requests attended together by one SDPA call (index tensors on the device)."""

    rows: torch.Tensor  # [b] request indices into the batch
    ctx: int  # keys gathered per request (a whole number of blocks)
    q_index: torch.Tensor  # [b, q_len] packed token index of each query row (0 for padding)
    q_pos: torch.Tensor  # [b, q_len] position of each query row (0 for padding)
    valid_rows: torch.Tensor  # [n] flat indices of the real rows in [b * q_len]
    out_index: torch.Tensor  # [n] packed token index of each real row


@dataclass
class PagedBatch:
    """Per-step attention metadata (tensors on the pool's device; per-request numbers also on the host)."""

    cache: PagedKVCache
    impl: str
    slot_mapping: torch.Tensor  # [T] pool slot of each packed token
    block_tables: torch.Tensor  # [B, max_blocks] pool block ids (padding -> PAD_BLOCK)
    query_start_loc: list[int]  # B + 1 offsets into the packed tokens
    context_lens: list[int]  # tokens in the cache for each request after this step's writes
    context_lens_t: torch.Tensor  # [B] the same on the device
    token_seq: torch.Tensor  # [T] request of each packed token
    token_pos: torch.Tensor  # [T] position of each packed token
    groups: list[Group]
    used: set[str] = field(default_factory=set)  # attention paths that really ran this step
    flex_cache: dict = field(default_factory=dict, repr=False)

    @property
    def num_tokens(self) -> int:
        return self.query_start_loc[-1]

    @property
    def num_context_tokens(self) -> int:
        return sum(self.context_lens)


def gathered_bytes_per_token(cache: PagedKVCache) -> int:
    """Transient bytes one gathered context token costs (K and V, all kv heads): the copy in the compute
    dtype, plus the fp32 intermediates of dequantisation for a quantised pool."""
    elems = 2 * cache.num_kv_heads * cache.head_dim
    compute = torch.empty(0, dtype=cache.compute_dtype).element_size()
    if cache.quantised:
        return elems * (1 + 4 + 4 + compute)  # stored value, its fp32 copy, the scaled product, the result
    return elems * compute


def plan_groups(num_new: np.ndarray, ctx: np.ndarray, block_size: int, token_bytes: int, heads: int,
                cap: int = WORKSPACE_BYTES) -> list[tuple[list[int], int, int, int]]:
    """Groups as (request indices, padded context, first query row, query rows), host ints only."""
    order = np.argsort(-ctx, kind="stable")
    groups: list[tuple[list[int], int, int, int]] = []
    i = 0
    while i < len(order):
        first = int(order[i])
        c = -(-int(ctx[first]) // block_size) * block_size
        rows_cap = max(1, cap // max(heads * c * SCORE_BYTES, 1))
        if num_new[first] > rows_cap:  # a long prefill: its queries in chunks, alone
            groups += [([first], c, off, min(rows_cap, int(num_new[first]) - off))
                       for off in range(0, int(num_new[first]), rows_cap)]
            i += 1
            continue
        members, q_len, real_k, real_q = [first], int(num_new[first]), int(ctx[first]), int(num_new[first])
        for j in order[i + 1:]:
            n, ql = len(members) + 1, max(q_len, int(num_new[j]))
            fits = n * c * token_bytes + n * heads * ql * c * SCORE_BYTES <= cap
            if not (fits and n * c <= SLACK * (real_k + ctx[j]) and n * ql <= SLACK * (real_q + num_new[j])):
                break
            members.append(int(j))
            q_len, real_k, real_q = ql, real_k + int(ctx[j]), real_q + int(num_new[j])
        groups.append((members, c, 0, q_len))
        i += len(members)
    return groups


def _group_tensors(members, c, off, q_len, start, num_new, qsl, dev) -> Group:
    rows = np.asarray(members)
    tok = off + np.arange(q_len)[None, :]  # [b, q_len] query row within its request's new tokens
    valid = tok < num_new[rows, None]
    q_pos = np.where(valid, start[rows, None] + tok, 0)
    q_index = np.where(valid, qsl[rows, None] + tok, 0)
    flat_valid = np.flatnonzero(valid.reshape(-1))

    def t(x):
        return torch.as_tensor(np.ascontiguousarray(x), dtype=torch.long).to(dev)

    return Group(rows=t(rows), ctx=c, q_index=t(q_index), q_pos=t(q_pos), valid_rows=t(flat_valid),
                 out_index=t(q_index.reshape(-1)[flat_valid]))


def build_batch(cache: PagedKVCache, chunks: list[SeqChunk], impl: str | None = None,
                heads: int | None = None) -> PagedBatch:
    """The step's metadata: block tables copied once to the device, per-token tensors derived there.
    `heads` (query heads) sizes the SDPA groups' scores; the kv heads are assumed when not given."""
    dev, bs = cache.device, cache.block_size
    start = np.fromiter((c.start for c in chunks), dtype=np.int64, count=len(chunks))
    num_new = np.fromiter((c.num_new for c in chunks), dtype=np.int64, count=len(chunks))
    ctx = start + num_new
    n_blocks = -(-ctx // bs)
    tables = np.full((len(chunks), int(n_blocks.max())), PAD_BLOCK, dtype=np.int64)
    for i, c in enumerate(chunks):
        if n_blocks[i] > len(c.block_table):
            raise ValueError(f"block table of {len(c.block_table)} blocks cannot hold {ctx[i]} tokens")
        tables[i, : n_blocks[i]] = np.asarray(c.block_table[: n_blocks[i]]) + 1  # allocator id b -> pool block b+1
    qsl = np.concatenate([[0], np.cumsum(num_new)])
    total = int(qsl[-1])

    def t(x):
        return torch.as_tensor(x, dtype=torch.long).to(dev)

    tables_t, start_t, qsl_t = t(tables), t(start), t(qsl[:-1])
    token_seq = torch.repeat_interleave(torch.arange(len(chunks), device=dev), t(num_new), output_size=total)
    token_pos = start_t[token_seq] + torch.arange(total, device=dev) - qsl_t[token_seq]
    slots = tables_t[token_seq, token_pos // bs] * bs + token_pos % bs
    plan = plan_groups(num_new, ctx, bs, gathered_bytes_per_token(cache), heads or cache.num_kv_heads)
    groups = [_group_tensors(m, c, off, q, start, num_new, qsl, dev) for m, c, off, q in plan]
    return PagedBatch(cache=cache, impl=impl or "sdpa", slot_mapping=slots, block_tables=tables_t,
                      query_start_loc=qsl.tolist(), context_lens=ctx.tolist(), context_lens_t=t(ctx),
                      token_seq=token_seq, token_pos=token_pos, groups=groups)

"""Attention work per KV group: what each kind of layer reads and computes in one step.

Full-attention layers read every cached token of a sequence; the other kinds read less, and the
step time must follow what they keep (models/kv_groups.py), not the context:
- sliding(window) and eviction-capped layers read the tokens they keep: min(context, window);
- chunked(size) layers (Llama-4's local layers) read the tokens of the current chunk: context mod
  size for one sequence; a batch whose mean context is past the first chunk reads half a chunk
  per sequence on average (its members' chunk phases are spread);
- MLA layers read one latent row per token (their bytes per token are the latent's; FLOPs are the
  absorbed kernel's for decode, the decompressed multi-head attention's for prefill);
- state layers (Gated DeltaNet, Mamba) read and write a fixed state per sequence per step, whatever
  the context, and compute a fixed number of FLOPs per token.

The step shape carries sums over the batch (sim/core/scheduler.StepPlan.step_shape), so a group's
reads are taken at the batch's mean context (mean prompt chunk and mean cached prefix for prefill),
the same mean-field rule the measured kernel tables use; it is exact for a batch of equal contexts
and never reads more than all-full attention would.

`attention_groups(spec, kv_dtype, tp)` returns () for a model whose every attention layer reads its
whole context (all-full, or MLA alone): the cost model then keeps its one-group formula.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.kv_groups import ChunkedLocal, KVGroup, State
from models.spec import ModelSpec

# The gated delta rule's recurrent step (Yang, Kautz, Hatamizadeh, "Gated Delta Networks", 2024),
# counted here per value head and token: S k (2 dk dv), the rank-1 update (2 dk dv), the decay
# (dk dv) and the output S^T q (2 dk dv) = 7 dk dv FLOPs. Decode is bound by the state's bytes anyway.
STATE_FLOPS_PER_DK_DV = 7


@dataclass(frozen=True)
class AttnGroup:
    """One KV group's attention terms on one TP rank."""

    kind: str  # models/kv_groups.py kinds: full, sliding, chunked, mla, state
    layers: int  # layers in the group (the measured-db source times one layer and scales)
    bytes_per_token: float  # KV bytes per kept token (all the group's layers)
    flops_per_pair: float  # decode: per (query, cached token) pair, all the group's layers
    prefill_flops_per_pair: float
    span: float = 0.0  # tokens kept (window or eviction cap); 0 = all
    chunk: float = 0.0  # chunked local attention: chunk size
    state_bytes: float = 0.0  # per sequence (state groups)
    state_flops_per_token: float = 0.0

    def reads_per_seq(self, x: Any, n: Any) -> Any:
        """Cached tokens one of n sequences of mean context x reads (x: float or array)."""
        if self.chunk:
            if n <= 1:
                x = np.mod(x, self.chunk) if isinstance(x, np.ndarray) else x % self.chunk
            elif isinstance(x, np.ndarray):
                x = np.where(x <= self.chunk, x, self.chunk / 2)
            elif x > self.chunk:
                x = self.chunk / 2
        if self.span:
            x = np.minimum(x, self.span) if isinstance(x, np.ndarray) else min(x, self.span)
        return x

    @property
    def reads_everything(self) -> bool:
        """True when the group reads every cached token (full or MLA without a cap)."""
        return not self.span and not self.chunk and self.kind != "state"

    def decode_seconds(self, d: Any, x: Any, attn_peak: float, bw: float, maximum: Callable[[Any, Any], Any]) -> Any:
        """Roofline decode attention of d sequences at mean context x: max(compute, memory)."""
        if self.kind == "state":  # a fixed state read and written per sequence, whatever the context
            return maximum(self.state_flops_per_token * d / attn_peak, 2.0 * self.state_bytes * d / bw)
        reads = d * self.reads_per_seq(x, d)
        return maximum(self.flops_per_pair * reads / attn_peak, (reads + d) * self.bytes_per_token / bw)

    def prefill_seconds(self, p: float, kp: float, pp: float, np_: float, attn_peak: float, bw: float,
                        maximum: Callable[[Any, Any], Any]) -> Any:
        """Roofline attention of np_ prompt chunks: p tokens after kp cached, pp pairs if all-full."""
        if self.kind == "state":  # one state read and written per chunk; FLOPs per token
            return maximum(self.state_flops_per_token * p / attn_peak, 2.0 * self.state_bytes * np_ / bw)
        pairs, reads = pp, kp
        if not self.reads_everything:
            pairs = np_ * self.pairs_per_chunk(p / np_, kp / np_)
            reads = np_ * self.reads_per_seq(kp / np_, np_)
        return maximum(self.prefill_flops_per_pair * pairs / attn_peak, (reads + p) * self.bytes_per_token / bw)

    def pair_share(self, q: float, s: float) -> float:
        """Pairs of a q-token chunk after s cached in this group over the same chunk's all-full pairs."""
        if self.reads_everything:
            return 1.0
        full = q * s + q * (q + 1) / 2
        return self.pairs_per_chunk(q, s) / full if full > 0 else 1.0

    def pairs_per_chunk(self, q: float, s: float) -> float:
        """(query, key) pairs of one prompt chunk of q tokens after s cached: query t (1-based
        position s+1 .. s+q) attends to min(t, span) tokens, or to its chunk's first t mod chunk."""
        return _attended_upto(s + q, self.span, self.chunk) - _attended_upto(s, self.span, self.chunk)


def _attended_upto(n: float, span: float, chunk: float) -> float:
    """Sum over positions t = 1..n of the tokens query t attends to."""
    if chunk:
        m = n // chunk
        r = n - m * chunk
        total = m * chunk * (chunk + 1) / 2 + r * (r + 1) / 2
        if span and span < chunk:  # an eviction cap inside a chunk: rare; bound each query by the cap
            total = min(total, _attended_upto(n, span, 0.0))
        return total
    if span and n > span:
        return span * (span + 1) / 2 + (n - span) * span
    return n * (n + 1) / 2


def _state_flops_per_layer(cfg: dict[str, Any], tp: int) -> float:
    heads = int(cfg.get("linear_num_value_heads") or 0)
    dk, dv = int(cfg.get("linear_key_head_dim") or 0), int(cfg.get("linear_value_head_dim") or 0)
    return float(STATE_FLOPS_PER_DK_DV * max(heads // tp, 1) * dk * dv) if heads else 0.0


def _group_terms(spec: ModelSpec, g: KVGroup, kv_dtype: str, tp: int) -> AttnGroup:
    heads = spec.num_attention_heads // tp
    if isinstance(g, State):
        return AttnGroup("state", g.num_layers, 0.0, 0.0, 0.0, state_bytes=float(g.state_bytes(tp)),
                         state_flops_per_token=g.num_layers * _state_flops_per_layer(spec.config, tp))
    if spec.mla is not None:
        m = spec.mla
        decode = float(m.attention_flops_per_token(heads, 1) * g.num_layers)
        prefill = 2.0 * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) * g.num_layers
    else:
        decode = prefill = 4.0 * g.num_layers * heads * spec.head_dim
    chunk = float(g.chunk) if isinstance(g, ChunkedLocal) else 0.0
    span = g.window_tokens if not chunk else g.cap
    return AttnGroup(g.kind, g.num_layers, float(g.bytes_per_token(kv_dtype, tp)), decode, prefill, span=float(span or 0),
                     chunk=chunk)


def attention_groups(spec: ModelSpec, kv_dtype: str, tp: int) -> tuple[AttnGroup, ...]:
    """Per-group attention terms, or () when every attention layer reads its whole context."""
    groups = spec.groups
    if all(g.kind in ("full", "mla") and g.window_tokens is None for g in groups):
        return ()
    return tuple(_group_terms(spec, g, kv_dtype, tp) for g in groups)


def terms_of(spec: ModelSpec, groups: tuple[KVGroup, ...], kv_dtype: str, tp: int) -> tuple[AttnGroup, ...]:
    """The attention terms of `groups` (some of spec's layers: layer offload's offloaded part)."""
    return tuple(_group_terms(spec, g, kv_dtype, tp) for g in groups)


def mla_prefill_flops_per_pair(spec: ModelSpec, tp: int) -> float:
    """Prefill attention FLOPs per pair: MLA decompresses the latent and runs multi-head attention
    over qk_nope + qk_rope key dims and v_head_dim value dims (vLLM's MLA prefill path); other
    models the same as decode."""
    if spec.mla is None:
        return spec.attention_flops_per_pair(tp)
    m, heads = spec.mla, spec.num_attention_heads // tp
    return 2.0 * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) * spec.num_layers

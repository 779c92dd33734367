"""Model families whose transformers code does not route attention through AttentionInterface.

Most decoder models (Llama, Mistral, Qwen2, OPT, Gemma, GPT-NeoX) call the registered attention
function, so `attn_implementation="kvsim_paged"` is all they need. Falcon picks its attention class
from its own table (FALCON_ATTENTION_CLASSES) and its decoder layer passes no **kwargs down, so it
gets a paged attention module instead: the same projections and RoPE, then paged_attention_forward
with the step's batch from attention.current_batch(). A family listed nowhere and without
AttentionInterface support is refused at load time with one line, never a KeyError mid-build.
"""

from __future__ import annotations

import torch

from gpu_backend.attention import ATTN_NAME, paged_attention_forward


class UnsupportedFamily(ValueError):
    """The model's transformers code cannot take the paged attention (one-line message)."""


def _falcon_attention_class():
    from transformers.models.falcon.modeling_falcon import FalconAttention, apply_rotary_pos_emb

    class PagedFalconAttention(FalconAttention):
        """FalconAttention's fused QKV split and RoPE, attention over the paged pool."""

        def forward(self, hidden_states, alibi, attention_mask, position_ids=None, layer_past=None, use_cache=False,
                    output_attentions=False, position_embeddings=None, **kwargs):
            b, t, _ = hidden_states.shape
            q, k, v = self._split_kv_heads(self.query_key_value(hidden_states), b, t)  # [b, t, heads, d]
            q, k, v = (x.transpose(1, 2) for x in (q, k, v))
            cos, sin = position_embeddings
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            out, _ = paged_attention_forward(self, q, k, v, None, scaling=self.inv_norm_factor)
            return self.dense(out.reshape(b, t, self.num_heads * self.head_dim)), None

        def _split_kv_heads(self, fused: torch.Tensor, b: int, t: int):
            """Q with all heads, K and V with the real kv heads (Falcon's own split broadcasts K/V to
            every head in the new architecture; the pool stores them once per kv head)."""
            d = self.head_dim
            if self.new_decoder_architecture:
                kv = self.config.num_kv_heads
                qkv = fused.view(b, t, kv, self.num_heads // kv + 2, d)
                return qkv[:, :, :, :-2].reshape(b, t, self.num_heads, d), qkv[:, :, :, -2], qkv[:, :, :, -1]
            if self.multi_query:
                qkv = fused.view(b, t, self.num_heads + 2, d)
                return qkv[:, :, :-2], qkv[:, :, -2:-1], qkv[:, :, -1:]
            qkv = fused.view(b, t, self.num_heads, 3, d)
            return qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]

    return PagedFalconAttention


def _install_falcon(model) -> None:
    if getattr(model.config, "alibi", False):
        raise UnsupportedFamily("falcon with alibi positions is not supported by the paged attention (RoPE only)")
    cls = _falcon_attention_class()
    for layer in model.transformer.h:
        layer.self_attention.__class__ = cls  # same weights and attributes, paged forward
    model.config._attn_implementation = ATTN_NAME  # the model then builds no dense causal mask


ADAPTERS = {"falcon": _install_falcon}  # model_type -> installs the paged attention on a built model


def build_attention(config) -> str:
    """The attn_implementation to build a model of this config with: the paged one where the family
    routes through AttentionInterface, "sdpa" where an adapter replaces it after the build."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    if config.model_type in ADAPTERS:
        return "sdpa"
    try:
        cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except KeyError:
        raise UnsupportedFamily(f"model_type {config.model_type!r} has no causal-LM class in transformers") from None
    if not getattr(cls, "_supports_attention_backend", False):
        raise UnsupportedFamily(f"model_type {config.model_type!r}: its transformers code does not use "
                                f"AttentionInterface and kvsim has no paged-attention adapter for it "
                                f"(adapters: {', '.join(ADAPTERS)})")
    return ATTN_NAME


def install(model) -> None:
    """Give a built model the paged attention where its family needs an adapter."""
    if model.config.model_type in ADAPTERS:
        ADAPTERS[model.config.model_type](model)

"""Mixture-of-experts and latent/linear attention shapes, read from a config.json.

MoE models hold every expert in memory but compute with `experts_per_tok` of them (plus shared
experts) per token, so the weight budget uses `total` parameters and the step time `active` ones.
The fields vLLM and transformers read:
- routed experts: num_experts / num_local_experts / n_routed_experts; per token:
  num_experts_per_tok / experts_per_token; width: moe_intermediate_size, else intermediate_size
  (Mixtral, gpt-oss, Llama-4);
- shared experts: n_shared_experts (num_shared_experts) x moe_intermediate_size (DeepSeek), shared_expert_intermediate_size
  with a sigmoid gate (Qwen2-MoE/Qwen3-Next), shared_intermediate_size (Granite-4.0-H), or one of
  intermediate_size (Llama-4); NemotronH's experts are not gated and may work in a latent width
  (models/nemotron_h.py); ERNIE-4.5 names them moe_num_experts, moe_k, moe_num_shared_experts
  (models/ernie_moe.py);
- which layers are MoE: mlp_layer_types ("dense" / "sparse" per layer, transformers 5), num_dense_layers
  (AFMoE), first_k_dense_replace (DeepSeek), interleave_moe_layer_step (Llama-4),
  decoder_sparse_step and mlp_only_layers (Qwen), the "E" blocks of a NemotronH pattern, ERNIE's
  moe_layer_start_index / end_index / interval; dense layers
  use intermediate_size (intermediate_size_mlp on Llama-4).
MLA (DeepSeek): q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim; the sparse-attention
indexer (DeepSeek-V3.2, GLM-5): index_n_heads, index_head_dim, in the layers models/kv_groups.py's
indexer_layer_flags picks.
Gated DeltaNet (Qwen3-Next linear layers): linear_* dims.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from models import ernie_moe
from models.kv_groups import indexer_layer_flags
from models.nemotron_h import block_pattern, is_block_model
from models.nemotron_h import moe_fields as nemotron_moe_fields


def _int(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


@dataclass(frozen=True)
class MoEShape:
    """Experts of one MoE layer and how many layers are MoE."""

    num_experts: int
    experts_per_tok: int
    expert_intermediate: int
    moe_layers: int
    dense_intermediate: int  # MLP width of the remaining (dense) layers
    shared_intermediate: int = 0  # total width of the shared expert(s), 0 = none
    shared_gate: bool = False  # Qwen's sigmoid gate on the shared expert (hidden x 1)
    expert_bias: bool = False  # gpt-oss: biases on expert and router projections
    expert_gated: bool = True  # gate + up + down (SwiGLU); False: up + down (NemotronH's relu2)
    router_bias: bool = False  # a bias per expert on the router without expert biases (NemotronH)
    latent: int = 0  # width the routed experts work in, projected from and back to hidden (0: hidden)
    projection_bias: bool = False  # biases on those two projections
    router_fp32: bool = False  # the router's weights kept in float32 whatever the model dtype (ERNIE-4.5)

    @property
    def matrices(self) -> int:
        """Weight matrices of one expert: 3 gated, 2 not."""
        return 3 if self.expert_gated else 2

    def expert_params(self, hidden: int) -> int:
        """One routed expert: gate + up + down (SwiGLU), or up + down, over `latent` when the model
        has one, with biases where the model has them."""
        inter, width = self.expert_intermediate, self.latent or hidden
        return self.matrices * width * inter + (2 * inter + width if self.expert_bias else 0)

    def shared_params(self, hidden: int) -> int:
        return self.matrices * hidden * self.shared_intermediate + (hidden if self.shared_gate else 0)

    def router_params(self, hidden: int) -> int:
        return hidden * self.num_experts + (self.num_experts if self.expert_bias or self.router_bias else 0)

    def latent_params(self, hidden: int) -> int:
        """The projections into and out of the latent width (0 without one)."""
        return 2 * hidden * self.latent + (self.latent + hidden) * self.projection_bias if self.latent else 0

    def layer_params(self, hidden: int) -> int:
        """All parameters of one MoE layer's MLP (every expert)."""
        return (self.router_params(hidden) + self.num_experts * self.expert_params(hidden) + self.shared_params(hidden)
                + self.latent_params(hidden))


SPARSE_MLP_NAMES = ("sparse", "moe")  # mlp_layer_types' names for an MoE layer


def moe_layer_flags(cfg: dict[str, Any], num_layers: int) -> tuple[bool, ...]:
    """Which layers are MoE, in order (a pipeline stage counts its own range of them)."""
    if is_block_model(cfg):  # NemotronH: its "E" blocks
        return tuple(block == "E" for block in block_pattern(cfg, num_layers))
    if ernie_moe.is_ernie_moe(cfg):  # ERNIE-4.5: a range of layers, every interval-th
        return ernie_moe.moe_layer_flags(cfg, num_layers)
    kinds = cfg.get("mlp_layer_types")
    if isinstance(kinds, list) and len(kinds) == num_layers:  # transformers 5: "dense" or "sparse" per layer
        return tuple(str(kind) in SPARSE_MLP_NAMES for kind in kinds)
    if isinstance(cfg.get("num_dense_layers"), int):  # AFMoE: the first n layers dense
        return tuple(i >= _int(cfg, "num_dense_layers") for i in range(num_layers))
    if cfg.get("first_k_dense_replace") is not None:  # DeepSeek: the first k layers dense
        first_moe = _int(cfg, "first_k_dense_replace")
        return tuple(i >= first_moe for i in range(num_layers))
    if cfg.get("interleave_moe_layer_step"):  # Llama-4: every step-th layer
        step = _int(cfg, "interleave_moe_layer_step", default=1)
        return tuple((i + 1) % step == 0 for i in range(num_layers))
    # Qwen-style decoder_sparse_step and mlp_only_layers; Mixtral/gpt-oss: every layer
    step = _int(cfg, "decoder_sparse_step", default=1) or 1
    dense = set(cfg.get("mlp_only_layers") or [])
    return tuple(i not in dense and (i + 1) % step == 0 for i in range(num_layers))


def moe_from_config(cfg: dict[str, Any], num_layers: int, intermediate: int) -> MoEShape | None:
    """The MoE shape, or None for a dense model."""
    if ernie_moe.is_ernie_moe(cfg):
        experts, per_tok, width = ernie_moe.moe_counts(cfg)
        width = width or intermediate
    else:
        experts = _int(cfg, "num_experts", "num_local_experts", "n_routed_experts")
        per_tok = _int(cfg, "num_experts_per_tok", "experts_per_token", default=1)
        width = _int(cfg, "moe_intermediate_size", default=intermediate)
    if experts <= 1:
        return None
    dense_width = _int(cfg, "intermediate_size_mlp", default=intermediate)
    moe_layers = sum(moe_layer_flags(cfg, num_layers))
    if cfg.get("n_shared_experts") or cfg.get("num_shared_experts"):
        shared, gate = _int(cfg, "n_shared_experts", "num_shared_experts") * width, False
    elif cfg.get("shared_expert_intermediate_size"):
        shared, gate = _int(cfg, "shared_expert_intermediate_size"), True
    elif cfg.get("shared_intermediate_size"):  # Granite-4.0-H's shared_mlp (granitemoeshared.py): gated, no gate on it
        shared, gate = _int(cfg, "shared_intermediate_size"), False
    elif str(cfg.get("model_type", "")).startswith("llama4"):
        shared, gate = intermediate, False  # Llama-4's one shared expert has the expert width
    else:
        shared, gate = 0, False
    shape = MoEShape(num_experts=experts, experts_per_tok=per_tok, expert_intermediate=width, moe_layers=moe_layers,
                     dense_intermediate=dense_width, shared_intermediate=shared, shared_gate=gate,
                     expert_bias=str(cfg.get("model_type", "")) == "gpt_oss")
    if is_block_model(cfg):
        return replace(shape, **nemotron_moe_fields(cfg))
    if ernie_moe.is_ernie_moe(cfg):
        return replace(shape, **ernie_moe.moe_fields(cfg, width))
    return shape


@dataclass(frozen=True)
class MLAShape:
    """DeepSeek's multi-head latent attention projections."""

    q_lora_rank: int  # 0 = q projected directly from hidden
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_n_heads: int = 0  # DeepSeek sparse attention's indexer (0: none): its heads, key width and layers
    index_head_dim: int = 0
    indexer_layers: int = 0

    def indexer_parts(self, hidden: int) -> tuple[int, int, int]:
        """One layer's indexer (vLLM 0.32 deepseek_v2.py Indexer; transformers' DeepseekV32Indexer), by the
        dtype vLLM keeps each in: (wq_b from the q latent to every index head; wk and weights_proj from hidden,
        a key and a weight per head; k_norm, a LayerNorm with bias). (0, 0, 0) without an indexer."""
        if not self.index_head_dim:
            return 0, 0, 0
        dim, heads = self.index_head_dim, self.index_n_heads
        return self.q_lora_rank * heads * dim, hidden * (dim + heads), 2 * dim

    def indexer_params(self, hidden: int) -> int:
        """One layer's indexer parameters (`indexer_parts` summed)."""
        return sum(self.indexer_parts(hidden))

    def layer_params(self, hidden: int, heads: int) -> int:
        """q (low-rank with its norm, or direct), kv_a (latent + rope key) with its norm, kv_b, o."""
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank:
            q = hidden * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk
        else:
            q = hidden * heads * qk
        kv_a = hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_a + kv_b + heads * self.v_head_dim * hidden

    def attention_flops_per_token(self, heads: int, context: int) -> int:
        """Decode attention FLOPs of one token against `context` cached latents in one layer, with
        the absorbed kv_b (what vLLM's MLA kernels run): scores over kv_lora + rope dims and the
        weighted sum over kv_lora dims, for every head: 2 x heads x context x (2 x kv_lora + rope)."""
        return 2 * heads * context * (2 * self.kv_lora_rank + self.qk_rope_head_dim)


def mla_from_config(cfg: dict[str, Any], num_layers: int) -> MLAShape | None:
    if not cfg.get("kv_lora_rank"):
        return None
    indexed = cfg.get("index_topk")
    return MLAShape(q_lora_rank=_int(cfg, "q_lora_rank"), kv_lora_rank=_int(cfg, "kv_lora_rank"),
                    qk_nope_head_dim=_int(cfg, "qk_nope_head_dim"), qk_rope_head_dim=_int(cfg, "qk_rope_head_dim"),
                    v_head_dim=_int(cfg, "v_head_dim"),
                    index_n_heads=_int(cfg, "index_n_heads") if indexed else 0,
                    index_head_dim=_int(cfg, "index_head_dim") if indexed else 0,
                    indexer_layers=sum(indexer_layer_flags(cfg, num_layers)))


def gated_deltanet_params(cfg: dict[str, Any], hidden: int) -> int:
    """One Gated DeltaNet layer (Qwen3-Next): in_proj_qkvz, in_proj_ba, conv1d, dt_bias, A_log, the
    gated norm over a value head, out_proj."""
    k_heads, v_heads = _int(cfg, "linear_num_key_heads"), _int(cfg, "linear_num_value_heads")
    key_dim = k_heads * _int(cfg, "linear_key_head_dim")
    value_dim = v_heads * _int(cfg, "linear_value_head_dim")
    conv_dim = 2 * key_dim + value_dim
    return (hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * v_heads + conv_dim * _int(cfg, "linear_conv_kernel_dim")
            + 2 * v_heads + _int(cfg, "linear_value_head_dim") + value_dim * hidden)

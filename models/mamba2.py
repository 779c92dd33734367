"""The Mamba-2 mixer of hybrid decoders: its parameters and the state one sequence keeps in it.

vLLM builds every Mamba-2 layer with one class (layers/mamba/mamba_mixer2.py MambaMixer2, vLLM 0.32)
and sizes its state with one function (mamba_utils.py MambaStateShapeCalculator.mamba2_state_shape);
the models differ only in what their configs call the dimensions:

| | heads | head dim | groups | state | conv kernel | width | biases |
|---|---|---|---|---|---|---|---|
| NemotronH | mamba_num_heads | mamba_head_dim | n_groups | ssm_state_size | conv_kernel | heads x head dim | use_bias, use_conv_bias |
| Granite-4.0-H, Bamba | mamba_n_heads | mamba_d_head | mamba_n_groups | mamba_d_state | mamba_d_conv | mamba_expand x hidden | mamba_proj_bias, mamba_conv_bias |

Which dtype the SSM state is kept in is the model's rule, not the mixer's (NemotronH: its config's
mamba_ssm_cache_dtype, else float32; the others: the model dtype), so callers pass it.

This module imports nothing from the project.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}  # a state's dtypes (Gated DeltaNet's too: models/kv_groups.py)
# (heads, head dim, groups, state, kernel, proj bias, conv bias) by naming; the width is computed
NAMINGS = (
    ("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel", "use_bias", "use_conv_bias"),
    ("mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv", "mamba_proj_bias",
     "mamba_conv_bias"),
)


class Mamba2ConfigError(ValueError):
    """A Mamba-2 dimension is missing or not a positive integer; one line (the caller adds the file)."""


def _positive(cfg: dict[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Mamba2ConfigError(f"{key} must be a positive integer, got {value!r}"[:120])
    return value


@dataclass(frozen=True)
class Mamba2:
    """One Mamba-2 mixer's dimensions."""

    width: int  # the mixer's intermediate size: heads x head_dim
    groups: int
    heads: int
    head_dim: int
    state: int
    kernel: int
    proj_bias: bool = False
    conv_bias: bool = True

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Mamba2 | None:
        """The mixer a config describes, in either naming (module docstring); None if it names none."""
        for heads_key, dim_key, groups_key, state_key, kernel_key, bias_key, conv_bias_key in NAMINGS:
            if heads_key in cfg:
                heads, head_dim = _positive(cfg, heads_key), _positive(cfg, dim_key)
                width = heads * head_dim
                if heads_key == "mamba_n_heads" and "mamba_expand" in cfg:  # MambaMixer2(intermediate_size=expand x hidden)
                    width = _positive(cfg, "mamba_expand") * _positive(cfg, "hidden_size")
                return cls(width, _positive(cfg, groups_key, 1), heads, head_dim, _positive(cfg, state_key),
                           _positive(cfg, kernel_key), bool(cfg.get(bias_key, False)), bool(cfg.get(conv_bias_key, True)))
        return None

    @property
    def conv_dim(self) -> int:
        return self.width + 2 * self.groups * self.state

    def params(self, hidden: int) -> int:
        """The mixer as the checkpoint holds it (MambaMixer2.__init__): in_proj to z, x, B, C and dt
        (width + conv_dim + heads), the depthwise conv1d over x, B and C (with its bias), A, D and dt_bias
        (one each a head), the gated RMSNorm over the width, out_proj; in_proj and out_proj biases when
        the config has them."""
        in_out = self.width + self.conv_dim + self.heads
        in_proj = hidden * in_out + in_out * self.proj_bias
        conv = self.conv_dim * self.kernel + self.conv_dim * self.conv_bias
        return in_proj + conv + 3 * self.heads + self.width + self.width * hidden + hidden * self.proj_bias

    def state_bytes(self, ssm_dtype: str, model_dtype_bytes: int = 2) -> tuple[int, int]:
        """One sequence's state in one layer as (bytes split over TP ranks, bytes every rank holds): the
        conv window, (kernel - 1) x conv_dim in the model dtype, and the SSM state, heads x head_dim x
        state in `ssm_dtype`. With one group vLLM gives every rank its own copy of B and C
        (extra_groups_for_head_shards); more groups split with the heads (vLLM refuses a TP degree that
        does not divide them)."""
        if ssm_dtype not in DTYPE_BYTES:
            raise Mamba2ConfigError(f"mamba_ssm_cache_dtype {ssm_dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
        ssm = self.heads * self.head_dim * self.state * DTYPE_BYTES[ssm_dtype]
        conv_x = (self.kernel - 1) * self.width * model_dtype_bytes
        conv_bc = (self.kernel - 1) * 2 * self.groups * self.state * model_dtype_bytes
        if self.groups == 1:
            return conv_x + ssm, conv_bc
        return conv_x + conv_bc + ssm, 0

    def peak_values(self, tp: int) -> int:
        """Values a token holds at once in the mixer on one rank (an estimate from its shapes, not a
        traced peak): in_proj's output beside the scan's output."""
        return (self.width + self.conv_dim + self.heads) // tp + self.width // tp

"""Layer-wise KV offload (FlexGen-style, `--offload-layers F`): the KV of a fraction of the layers lives
in CPU memory and crosses the GPU's host link every step.

What it changes, and its cost, plainly:
- capacity: the GPU pool holds only the other layers' KV, so the same budget holds
  L / (L - L_off) times as many tokens (L_off = round(F x L) whole layers);
- step time: every step reads the offloaded layers' KV of the whole batch's context from host
  memory (host -> GPU) and writes the new tokens' KV back (GPU -> host). The copies are pipelined
  with compute layer by layer (FlexGen's overlap), so a step takes
      max(GPU step, (Kd + Kp) x offloaded bytes per token / host bw, (D + P) x offloaded bytes per token / host bw)
  per TP rank. With a PCIe link 20-50x slower than HBM the host read binds as soon as the batch's
  context is large: decode throughput then falls to host bw / (offloaded bytes per token x context),
  which is the price of the extra capacity. docs/TIERS.md works an example.
"""

from __future__ import annotations


def offloaded_layers(num_layers: int, fraction: float) -> int:
    """Whole layers whose KV lives in CPU memory (never all of them)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"offload_layers must be in [0, 1), got {fraction!r}")
    return min(round(fraction * num_layers), num_layers - 1)


def gpu_share(num_layers: int, fraction: float) -> float:
    """Share of each token's KV bytes the GPU pool holds."""
    return (num_layers - offloaded_layers(num_layers, fraction)) / num_layers

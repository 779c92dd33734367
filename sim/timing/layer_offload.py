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

Models with several KV groups (sliding window + full attention, linear-attention states): each group
offloads round(F x its layers) of its layers, never all of them (so every group keeps a manager in
the GPU pool and a one-group model offloads what it always did). What streams is what each kind of
layer keeps and reads (sim/timing/attention_groups.py): a full or MLA layer's KV of the whole
context, a sliding layer's only the window (min(context, window) per sequence), a chunked layer's
its current chunk, a state layer's fixed state per sequence, read and written back every step
(`host_bytes`). The GPU pool holds the kept layers of every group (`split_groups`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from models.kv_groups import KVGroup
    from sim.timing.attention_groups import AttnGroup


def offloaded_layers(num_layers: int, fraction: float) -> int:
    """Whole layers whose KV lives in CPU memory (never all of them)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"offload_layers must be in [0, 1), got {fraction!r}")
    return min(round(fraction * num_layers), num_layers - 1)


def gpu_share(num_layers: int, fraction: float) -> float:
    """Share of each token's KV bytes the GPU pool holds."""
    return (num_layers - offloaded_layers(num_layers, fraction)) / num_layers


def split_groups(groups: tuple[KVGroup, ...], fraction: float) -> tuple[tuple[KVGroup, ...], tuple[KVGroup, ...]]:
    """(the layers each group keeps on the GPU, the layers it offloads): offloaded_layers per group;
    a group that offloads nothing is left out of the second tuple."""
    kept, off = [], []
    for g in groups:
        n = offloaded_layers(g.num_layers, fraction)
        kept.append(dataclasses.replace(g, num_layers=g.num_layers - n))
        if n:
            off.append(dataclasses.replace(g, num_layers=n))
    return tuple(kept), tuple(off)


def host_bytes(groups: tuple[AttnGroup, ...], d: Any, kd: Any, p: Any, kp: Any, np_: Any) -> tuple[Any, Any]:
    """(bytes read host -> GPU, bytes written back) in one step, per TP rank, by the offloaded layers
    `groups`: d decode sequences reading kd context tokens, np_ prompt chunks of p tokens after kp
    cached (the step shape's sums; each group reads at the mean context, as its attention does)."""
    read: Any = 0.0
    write: Any = 0.0
    for g in groups:
        if g.kind == "state":  # the state of every sequence in the step, in and back out
            read = read + g.state_bytes * (d + np_)
            write = write + g.state_bytes * (d + np_)
            continue
        tokens: Any = 0.0
        if d > 0:
            tokens = tokens + d * g.reads_per_seq(kd / d, d)
        if np_ > 0:
            tokens = tokens + np_ * g.reads_per_seq(kp / np_, np_)
        read = read + g.bytes_per_token * tokens
        write = write + g.bytes_per_token * (d + p)
    return read, write


def offload_bound(gpu: Any, groups: tuple[AttnGroup, ...], host_bw: float, d: Any, kd: Any, p: Any, kp: Any,
                  np_: Any, maximum: Callable[[Any, Any], Any]) -> Any:
    """The step with its host copies overlapped: max(GPU step, read / bw, write / bw)."""
    read, write = host_bytes(groups, d, kd, p, kp, np_)
    return maximum(maximum(gpu, read / host_bw), write / host_bw)

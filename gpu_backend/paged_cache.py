"""The KV pool: one K and one V tensor per deployment, shaped [layers, blocks, block_size, kv_heads, head_dim].

The shared allocators (sim/kv) hand out block ids and never touch tensors; this module turns
their ids into slots of the pool. Physical block 0 is reserved as the padding block (writes for
padded positions and table padding land there), so allocator block id b lives in physical block
b + 1: the allocator is built with `usable_blocks = num_blocks - 1` and keeps its own ids
0..usable-1, which keeps a contiguous allocator's runs of consecutive ids contiguous in memory.

fp8 values are stored in uint8 tensors and viewed as float8_e4m3fn only to convert: every indexing
op (write, gather, block copies, swap) then runs on a 1-byte integer dtype, which every torch build
supports on every device, instead of relying on float8 index kernels.

Bytes: K and V in the storage dtype, plus scales (int8: fp32 per slot per kv head for K and V;
fp8: one fp32 per layer for K and V). `pool_bytes` equals
`kv_bytes_per_token(kv_dtype) * num_blocks * block_size + kv_fixed_bytes(kv_dtype)` exactly
(ModelSpec's formula), padding block included; a test checks it.
"""

from __future__ import annotations

import torch

from gpu_backend import quant
from models.spec import ModelSpec

PAD_BLOCK = 0


class PagedKVCache:
    """K/V pool tensors plus their quantisation scales; reads dequantise to `compute_dtype`."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 kv_dtype: str = "fp32", compute_dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu") -> None:
        if num_blocks < 2:
            raise ValueError(f"KV pool needs at least 2 blocks (1 padding + 1 usable), got {num_blocks}")
        self.num_layers, self.num_blocks, self.block_size = num_layers, num_blocks, block_size
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        self.kv_dtype, self.compute_dtype, self.device = kv_dtype, compute_dtype, torch.device(device)
        store = quant.storage_dtype(kv_dtype)
        self.fp8 = store == torch.float8_e4m3fn
        self.int8 = store == torch.int8
        if self.fp8:
            store = torch.uint8  # the bytes of float8_e4m3fn values (see the module docstring)
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=store, device=self.device)
        self.v = torch.zeros(shape, dtype=store, device=self.device)
        self.k_scale: torch.Tensor | None = None
        self.v_scale: torch.Tensor | None = None
        self.fp8_calibrated: list[bool] = []
        if self.int8:
            self.k_scale = torch.zeros(shape[:-1], dtype=torch.float32, device=self.device)
            self.v_scale = torch.zeros(shape[:-1], dtype=torch.float32, device=self.device)
        elif self.fp8:
            self.k_scale = torch.ones(num_layers, dtype=torch.float32, device=self.device)
            self.v_scale = torch.ones(num_layers, dtype=torch.float32, device=self.device)
            self.fp8_calibrated = [False] * num_layers

    # --- sizing -----------------------------------------------------------------------------
    @classmethod
    def from_budget(cls, spec: ModelSpec, kv_dtype: str, block_size: int, budget_bytes: int,
                    compute_dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> PagedKVCache:
        """As many blocks as fit in `budget_bytes` (padding block included in the budget)."""
        blocks = blocks_for_budget(spec, kv_dtype, block_size, budget_bytes)
        return cls(spec.num_layers, blocks, block_size, spec.num_kv_heads, spec.head_dim, kv_dtype,
                   compute_dtype, device)

    @property
    def quantised(self) -> bool:
        return self.int8 or self.fp8

    @property
    def usable_blocks(self) -> int:
        """Blocks the allocator may hand out (all but the padding block)."""
        return self.num_blocks - 1

    @property
    def pool_bytes(self) -> int:
        tensors = [self.k, self.v] + [t for t in (self.k_scale, self.v_scale) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)

    # --- ids -> slots ------------------------------------------------------------------------
    @staticmethod
    def physical(block_ids: list[int]) -> list[int]:
        """Allocator block ids -> pool block ids (skip the padding block)."""
        return [b + 1 for b in block_ids]

    def slots(self, block_table: list[int], start: int, end: int) -> list[int]:
        """Pool slot ids of token positions [start, end) of a request with this allocator block table."""
        bs = self.block_size
        return [(block_table[p // bs] + 1) * bs + p % bs for p in range(start, end)]

    # --- write / read --------------------------------------------------------------------------
    def write(self, layer: int, slot_mapping: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store key/value [tokens, kv_heads, head_dim] at pool slots `slot_mapping` [tokens]."""
        k_flat = self.k[layer].view(-1, self.num_kv_heads, self.head_dim)
        v_flat = self.v[layer].view(-1, self.num_kv_heads, self.head_dim)
        if self.int8:
            qk, sk = quant.quantise_int8(key)
            qv, sv = quant.quantise_int8(value)
            k_flat[slot_mapping], v_flat[slot_mapping] = qk, qv
            self.k_scale[layer].view(-1, self.num_kv_heads)[slot_mapping] = sk
            self.v_scale[layer].view(-1, self.num_kv_heads)[slot_mapping] = sv
        elif self.fp8:
            if not self.fp8_calibrated[layer]:
                self.k_scale[layer] = quant.fp8_scale_for(key)
                self.v_scale[layer] = quant.fp8_scale_for(value)
                self.fp8_calibrated[layer] = True
            k_flat[slot_mapping] = quant.quantise_fp8(key, self.k_scale[layer]).view(torch.uint8)
            v_flat[slot_mapping] = quant.quantise_fp8(value, self.v_scale[layer]).view(torch.uint8)
        else:
            k_flat[slot_mapping] = key.to(self.k.dtype)
            v_flat[slot_mapping] = value.to(self.v.dtype)

    def gather(self, layer: int, block_tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """block_tables [batch, max_blocks] of pool block ids -> K, V [batch, max_blocks*block_size,
        kv_heads, head_dim] in compute_dtype (padding entries read the padding block)."""
        b, m = block_tables.shape
        out_shape = (b, m * self.block_size, self.num_kv_heads, self.head_dim)
        k, v = self.k[layer][block_tables], self.v[layer][block_tables]
        if self.int8:
            k = quant.dequantise_int8(k, self.k_scale[layer][block_tables], self.compute_dtype)
            v = quant.dequantise_int8(v, self.v_scale[layer][block_tables], self.compute_dtype)
        elif self.fp8:
            k = quant.dequantise_fp8(k.view(torch.float8_e4m3fn), self.k_scale[layer], self.compute_dtype)
            v = quant.dequantise_fp8(v.view(torch.float8_e4m3fn), self.v_scale[layer], self.compute_dtype)
        else:
            k, v = k.to(self.compute_dtype), v.to(self.compute_dtype)
        return k.reshape(out_shape), v.reshape(out_shape)

    # --- whole blocks: swap ----------------------------------------------------
    def _block_tensors(self) -> list[torch.Tensor]:
        """Tensors indexed [layer, block, ...] (values and per-slot scales; per-layer scales stay)."""
        out = [self.k, self.v]
        if self.int8:
            out += [self.k_scale, self.v_scale]
        return out

    def read_blocks(self, block_ids: list[int]) -> list[torch.Tensor]:
        """Host copies of allocator blocks (swap out)."""
        idx = torch.tensor(self.physical(block_ids), device=self.device)
        return [t[:, idx].to("cpu") for t in self._block_tensors()]

    def write_blocks(self, block_ids: list[int], saved: list[torch.Tensor]) -> None:
        """Restore host copies into (possibly different) allocator blocks (swap in)."""
        idx = torch.tensor(self.physical(block_ids), device=self.device)
        for t, s in zip(self._block_tensors(), saved, strict=True):
            t[:, idx] = s.to(self.device)

    def gather_slots(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pool slot ids [n] -> K, V [n, kv_heads, head_dim] in compute_dtype (packed, no padding)."""
        flat = (-1, self.num_kv_heads, self.head_dim)
        k, v = self.k[layer].view(flat)[slots], self.v[layer].view(flat)[slots]
        if self.int8:
            k = quant.dequantise_int8(k, self.k_scale[layer].view(-1, self.num_kv_heads)[slots], self.compute_dtype)
            v = quant.dequantise_int8(v, self.v_scale[layer].view(-1, self.num_kv_heads)[slots], self.compute_dtype)
        elif self.fp8:
            k = quant.dequantise_fp8(k.view(torch.float8_e4m3fn), self.k_scale[layer], self.compute_dtype)
            v = quant.dequantise_fp8(v.view(torch.float8_e4m3fn), self.v_scale[layer], self.compute_dtype)
        return k.to(self.compute_dtype), v.to(self.compute_dtype)


def blocks_for_budget(spec: ModelSpec, kv_dtype: str, block_size: int, budget_bytes: int) -> int:
    """Pool blocks (padding block included) that fit in `budget_bytes` by ModelSpec's formula."""
    per_block = spec.kv_bytes_per_token(kv_dtype) * block_size
    blocks = (int(budget_bytes) - spec.kv_fixed_bytes(kv_dtype)) // per_block
    if blocks < 2:
        raise ValueError(f"KV budget of {budget_bytes} bytes holds {max(blocks, 0)} blocks of {block_size} "
                         f"tokens; at least 2 (1 padding + 1 usable) are needed")
    return int(blocks)


def cuda_kv_budget_bytes(total_bytes: int, gpu_memory_utilization: float, non_kv_bytes: int) -> int:
    """vLLM's sizing: the share of the GPU we may use minus everything that is not KV (weights,
    activations at the largest batch, CUDA context and library workspaces). Pure arithmetic."""
    return int(total_bytes * gpu_memory_utilization) - int(non_kv_bytes)

"""How much a contiguous allocator holds up front for one request (the reserve policies).

A contiguous KV region cannot grow in place, so a serving system without paging must decide at
admission how many token slots a request may ever use. The policies bracket reality:
- `max`:    the model's max length (what a naive server must do: it does not know the output);
- `pow2`:   the prompt plus the true output length rounded up to a power of two (Orca's
            "Pow2" baseline in the vLLM paper, Kwon et al. 2023, section 6.1: the system is told
            the output length only up to the next power of two), capped at the max length;
- `oracle`: exactly prompt + true output (the best any up-front reservation can do).
A new policy is one ReservePolicy registered in RESERVE_POLICIES. Rounding up to whole blocks is the
allocator's job; these functions return tokens. The scheduler and the GPU backend both call this one
function, so they reserve identically.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from models.registry import Registry


@dataclass(frozen=True)
class ReservePolicy:
    """One policy: token slots for one request (`tokens`) and the same over trace columns (`tokens_array`)."""

    name: str
    tokens: Callable[[int, int, int], int]  # (prompt, output, max_model_len) -> slots
    tokens_array: Callable[[np.ndarray, np.ndarray, int], np.ndarray]
    description: str = ""


def _max(prompt: int, output: int, max_model_len: int) -> int:
    return int(max_model_len)


def _pow2(prompt: int, output: int, max_model_len: int) -> int:
    rounded = output if output <= 1 else 1 << (output - 1).bit_length()
    return min(prompt + rounded, max(int(max_model_len), prompt + output))


def _oracle(prompt: int, output: int, max_model_len: int) -> int:
    return prompt + output


def _max_array(prompt: np.ndarray, output: np.ndarray, max_model_len: int) -> np.ndarray:
    return np.full(prompt.shape, int(max_model_len), dtype=np.int64)


def _pow2_array(prompt: np.ndarray, output: np.ndarray, max_model_len: int) -> np.ndarray:
    total = prompt + output
    at_least_1 = np.maximum(output, 1)
    bits = np.ceil(np.log2(at_least_1.astype(np.float64))).astype(np.int64)
    pow2 = np.left_shift(np.int64(1), bits)
    # float log2 can be off by one far above any context length; fix up exactly in ints.
    pow2 = np.where(pow2 // 2 >= at_least_1, pow2 // 2, pow2)
    pow2 = np.where(pow2 < at_least_1, pow2 * 2, pow2)
    pow2 = np.where(output <= 1, output, pow2)
    return np.minimum(prompt + pow2, np.maximum(int(max_model_len), total))


def _oracle_array(prompt: np.ndarray, output: np.ndarray, max_model_len: int) -> np.ndarray:
    return prompt + output


RESERVE_POLICIES: Registry[ReservePolicy] = Registry("reserve policy", ((p.name, p) for p in (
    ReservePolicy("max", _max, _max_array, "the whole max_model_len (the output length is unknown)"),
    ReservePolicy("pow2", _pow2, _pow2_array, "prompt + the output rounded up to a power of two (Orca)"),
    ReservePolicy("oracle", _oracle, _oracle_array, "exactly prompt + output (the best up-front reservation)"),
)))


def reserve_tokens(policy: str, prompt_tokens: int, output_tokens: int, max_model_len: int) -> int:
    """Token slots to reserve for one request under `policy`.

    pow2 is prompt + next_pow2(output); it never exceeds max_model_len unless prompt + output
    itself does (then it is prompt + output: a longer request was let through and must still fit
    its own tokens). `max` returns max_model_len as is: requests longer than that must be clamped
    or rejected by the caller.
    """
    return RESERVE_POLICIES.lookup(policy).tokens(int(prompt_tokens), int(output_tokens), max_model_len)


def reserve_tokens_array(policy: str, prompt_tokens, output_tokens, max_model_len: int) -> np.ndarray:
    """Vectorised reserve_tokens over whole trace columns (int64), identical element by element."""
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    output = np.asarray(output_tokens, dtype=np.int64)
    return RESERVE_POLICIES.lookup(policy).tokens_array(prompt, output, max_model_len)

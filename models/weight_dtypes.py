"""Weight storage dtypes: bytes per parameter (quantisation scales of int4/int8 weights ignored).

The one list of weight dtypes: the Scenario checks, the CLI choices, the form and the capacity
arithmetic (ModelSpec.weight_bytes) all read WEIGHT_DTYPES. Register one from outside with
`register_weight_dtype`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from models.registry import Registry


@dataclass(frozen=True)
class WeightDtype:
    """How one weight is stored: bytes per parameter (0.5 for int4, packed two per byte)."""

    name: str
    bytes_per_param: float | None  # None: resolved per model ("native": what the checkpoint ships)
    description: str = ""


WEIGHT_DTYPES: Registry[WeightDtype] = Registry("weight dtype", (
    (d.name, d)
    for d in (
        WeightDtype("fp32", 4.0, "IEEE float32"),
        WeightDtype("fp16", 2.0, "IEEE float16"),
        WeightDtype("bf16", 2.0, "bfloat16"),
        WeightDtype("fp8", 1.0, "fp8 e4m3"),
        WeightDtype("int8", 1.0, "int8 (scales not counted)"),
        WeightDtype("int4", 0.5, "int4 packed two per byte (scales not counted)"),
        # mxfp4: 4-bit values plus one 8-bit scale per 32 (the OCP microscaling format gpt-oss ships).
        WeightDtype("mxfp4", 4.25 / 8, "OCP microscaling fp4: 4-bit values + one 8-bit scale per 32"),
        WeightDtype("native", None, "as the checkpoint ships (its quantization_config; ModelSpec.shipped_dtypes)"),
    )
))


class _StoredBytes(Mapping[str, float]):
    """name -> bytes per parameter for the dtypes that have a fixed size (a live view of WEIGHT_DTYPES)."""

    def __getitem__(self, name: str) -> float:
        size = WEIGHT_DTYPES[name].bytes_per_param
        if size is None:
            raise KeyError(name)
        return size

    def __iter__(self) -> Iterator[str]:
        return (n for n, d in WEIGHT_DTYPES.items() if d.bytes_per_param is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in WEIGHT_DTYPES and WEIGHT_DTYPES[name].bytes_per_param is not None


WEIGHT_BYTES: Mapping[str, float] = _StoredBytes()


def register_weight_dtype(dtype: WeightDtype) -> WeightDtype:
    return WEIGHT_DTYPES.register(dtype.name, dtype)

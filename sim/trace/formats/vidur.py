"""Vidur simulator request traces: arrived_at (seconds), num_prefill_tokens, num_decode_tokens."""

from sim.trace.model import TraceFormat

FORMAT = TraceFormat(
    name="vidur",
    description="Vidur CSV: arrived_at,num_prefill_tokens,num_decode_tokens",
    kinds=("csv",),
    arrival="arrived_at",
    input="num_prefill_tokens",
    output="num_decode_tokens",
)

"""SplitwiseSim traces: request_id,request_type,application_id,arrival_timestamp (s),batch_size,
prompt_size,token_size. Only arrival, prompt and token sizes matter to a KV simulation."""

from sim.trace.model import TraceFormat

FORMAT = TraceFormat(
    name="splitwise",
    description="SplitwiseSim CSV: ...,arrival_timestamp,...,prompt_size,token_size",
    kinds=("csv",),
    arrival="arrival_timestamp",
    input="prompt_size",
    output="token_size",
)

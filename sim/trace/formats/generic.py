"""The project's own plain format: arrival_s (seconds),input_tokens,output_tokens[,session_id].

CSV or JSONL; it is also what samples/chat_small.csv uses and what `python -m sim` writes.
"""

from sim.trace.model import TraceFormat

FORMAT = TraceFormat(
    name="generic",
    description="generic CSV/JSONL: arrival_s,input_tokens,output_tokens[,session_id]",
    kinds=("csv", "jsonl"),
    arrival="arrival_s",
    input="input_tokens",
    output="output_tokens",
    session="session_id",
)

"""Mooncake (FAST'25) JSONL: timestamp (ms), input_length, output_length, hash_ids.

hash_ids are the prefix-block hashes of the prompt, one per 512 tokens; equal leading ids mean a
shared prefix, which is what a prefix cache can reuse. They are kept as prefix_hashes.
"""

from sim.trace.model import TraceFormat

FORMAT = TraceFormat(
    name="mooncake",
    description="Mooncake JSONL: timestamp (ms),input_length,output_length[,hash_ids]",
    kinds=("jsonl",),
    arrival="timestamp",
    input="input_length",
    output="output_length",
    time_unit="ms",
    prefix_hashes="hash_ids",
    prefix_block_size=512,
)

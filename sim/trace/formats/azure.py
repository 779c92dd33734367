"""Azure LLM inference traces (AzurePublicDataset), 2023 and 2024 editions.

2023: TIMESTAMP like "2023-11-16 18:17:03.9799600" (7 decimals). 2024 week-long files add "+00:00"
and sometimes drop the fraction; every variant parses (ISO-8601, offsets converted to UTC).
"""

from sim.trace.model import TraceFormat

FORMAT = TraceFormat(
    name="azure",
    description="Azure LLM inference CSV: TIMESTAMP,ContextTokens,GeneratedTokens",
    kinds=("csv",),
    arrival="TIMESTAMP",
    input="ContextTokens",
    output="GeneratedTokens",
    time_unit="datetime",
)

"""The words every page uses, defined once: one sentence per part of the KV pool, and the units of the
capacity planner. Pages show them in one expander (ui/glossary.py); the HTML report lists them too."""

from __future__ import annotations

# The five-way KV breakdown (docs/METRICS.md), in the order the memory chart stacks them.
KV_PARTS = (
    ("token states", "K/V already written for tokens the model has processed: the useful part of the pool."),
    ("reserved (not yet written)", "Slots a running request holds for tokens it will still generate; contiguous "
     "allocation reserves them up front, paging never does."),
    ("internal fragmentation", "Held slots that will never be written: a reservation longer than the request turns "
     "out to be, or the unused tail of a request's last block."),
    ("external fragmentation", "Free memory split into holes too small for any of the next waiting requests "
     "(contiguous allocation only; paging has none)."),
    ("free", "Memory no request holds (with prefix caching, cached blocks that can be evicted count as free)."),
)

# The capacity planner's nouns.
TERMS = (
    ("sequence", "One request's context held in the KV cache: its prompt plus the tokens generated so far."),
    ("user", "Someone with one conversation open: one sequence at the chosen context length at a time, so N users "
     "need N concurrent sequences."),
)

# What a token costs in the pool: shown wherever bytes per token are (every page's glossary, the report).
KV_BYTES = (
    ("KV bytes per token", "Memory one token's keys and values take on one GPU, summed over all layers and "
     "layer groups (a replica of N tensor-parallel GPUs holds N times this, shown beside it)."),
    ("int8 vs fp8 KV", "Both store one byte per value. int8 adds a 4-byte scale for K and for V per token, kv head "
     "and layer, so its bytes per token are a little higher; fp8 (e4m3) keeps one scale per layer, a few fixed "
     "bytes outside the per-token figure."),
)

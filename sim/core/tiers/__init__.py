"""KV memory tiers below the GPU pool: CPU DRAM, local NVMe, a shared remote store (clock-free policy).

kinds.py: the TIERS registry (each tier kind's medium, scope, bandwidth and sources);
policy.py: the TIER_POLICIES registry (when a block is stored, in what chunk, copy or move);
lru.py: one tier's LRU of chunk keys within its capacity (an object several replicas may share);
stack.py: one replica's lower tiers in lookup order, the hit query, stores and loads, and the bytes
each moves over which link. docs/TIERS.md has every figure with its source.
"""

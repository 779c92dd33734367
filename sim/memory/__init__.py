"""Memory arithmetic (vLLM-like): how a GPU's memory splits into weights, activations, overhead and KV,
and what fits. Pure functions of the model spec, the GPU and a few knobs; read by timing, run and plan."""

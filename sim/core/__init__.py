"""The policy core shared by the simulator and the GPU backend: request state, KV allocators, schedulers."""

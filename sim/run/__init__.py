"""One run: the SimPy engine over the policy core, and the metrics it records."""

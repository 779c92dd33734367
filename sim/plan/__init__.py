"""Planning answers derived from formulas and runs: capacity (and, later, search under an SLO)."""

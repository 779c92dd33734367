"""Step-time sources: how long one scheduled engine step takes."""

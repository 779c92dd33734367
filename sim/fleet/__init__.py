"""The fleet: replicas behind a router on one clock (engine.py), what a router sees of a replica
(live_view.py) and the fleet's summary keys (fleet_metrics.py). docs/FLEET.md explains the model."""

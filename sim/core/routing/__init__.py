"""Routers: which replica of a fleet serves each arriving request (policy only, clock-free).

view.py is what a router sees, routers.py the policies, registry.py the ROUTERS registry (each
entry's description names its source). The fleet that calls them is sim/fleet/.
"""

"""ROUTERS: the one registry of routing policies (CLI `--router`, Scenario checks, docs/OPTIONS.md).

Each entry builds a router for a fleet (routers.py has the policies and their sources); the
description is the policy's docstring, so the docs say where each comes from.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from models.registry import Registry
from sim.core.routing.routers import (
    KVAwareApprox,
    KVAwarePrecise,
    LeastKVLoad,
    LeastOutstanding,
    PowerOfTwo,
    Random,
    RoundRobin,
    Router,
    RouterParams,
    SessionAffinity,
)
from sim.native import source_path


@dataclass(frozen=True)
class RouterKind:
    name: str
    make: Callable[[RouterParams], Router]
    state_free: bool
    description: str
    kv_weighted: bool = False  # reads RouterParams.kv_weight (--router-kv-weight): forms show that knob


def _kind(name: str, cls: Any) -> tuple[str, RouterKind]:
    doc = " ".join((inspect.getdoc(cls) or _source_docs(cls.__module__).get(cls.__name__) or name).split())
    return name, RouterKind(name, cls, bool(cls.state_free), doc, bool(getattr(cls, "uses_kv_weight", False)))


@cache
def _source_docs(module: str) -> dict[str, str]:
    """Class name -> docstring, read from the module's source: a class compiled by mypyc (sim/native)
    keeps no docstring of its own, and the registry's descriptions are the policies' docstrings."""
    try:
        tree = ast.parse(source_path(module).read_text())
    except (OSError, SyntaxError):
        return {}
    return {node.name: ast.get_docstring(node) or "" for node in tree.body if isinstance(node, ast.ClassDef)}


ROUTERS: Registry[RouterKind] = Registry("router", (
    _kind("round-robin", RoundRobin),
    _kind("random", Random),
    _kind("least-outstanding", LeastOutstanding),
    _kind("least-kv", LeastKVLoad),
    _kind("power-of-two", PowerOfTwo),
    _kind("session", SessionAffinity),
    _kind("kv-precise", KVAwarePrecise),
    _kind("kv-approx", KVAwareApprox),
))


def make_router(name: str, params: RouterParams) -> Router:
    return ROUTERS.lookup(name).make(params)

"""Kernels that differ only in their Variables' names share one compiled program.

A kernel AST names its symbolic Variables (`start_pos`, `row3_pos`, `chunk_pos16_2`...). The LLM's batched step
gives each row a position Variable of its own, so a step of 32 rows had 32 attention kernels that were the same
kernel but for a name: each one linearized, rendered and compiled (a 32-row capture of a tiny model took 10.5 s on
the CPU, a 1B model's minutes on a GPU). `canonical(ast)` renames the Variables to `_v0`, `_v1`... in the order the
AST first reaches them (same min and max), so two such ASTs become one; the engine compiles that one and runs it
with each AST's own Variables (`renames`: canonical -> the AST's).

Two ASTs equal after renaming compute the same thing with each one's values put in for the names, so sharing never
changes a result; an order that differs between two such ASTs only misses a share. An argument this module does not
know how to look into (anything but LazyOps, buffer arguments, trackers, symbolic nodes, tuples and plain values)
leaves the AST as it is.
"""
from __future__ import annotations

import enum
from typing import Any

from tinygrad.dtype import DType
from tinygrad.ops import ConstBuffer, LazyOp, MemBuffer
from tinygrad.shape.shapetracker import ShapeTracker
from tinygrad.shape.symbolic import Node, Variable

_PLAIN = (int, float, str, bool, bytes, type(None), DType, enum.Enum)


class _Opaque(Exception):
    """An argument this module can't look into: the AST keeps its names."""


def _vars_in(x: Any, out: dict[Variable, None]) -> None:
    """Adds the Variables of argument `x` to `out` (in a fixed order: by name within one tracker or node)."""
    if isinstance(x, _PLAIN):
        return
    if isinstance(x, Node):
        found = x.vars()
    elif isinstance(x, ShapeTracker):
        found = x.vars()
    elif isinstance(x, (MemBuffer, ConstBuffer)):
        for a in x.__reduce__()[1]:
            _vars_in(a, out)
        return
    elif isinstance(x, tuple):
        for a in x:
            _vars_in(a, out)
        return
    else:
        raise _Opaque(type(x).__name__)
    for v in sorted(found, key=lambda v: v.expr):
        out.setdefault(v, None)


def _sub(x: Any, sub: dict) -> Any:
    """Argument `x` with its Variables replaced as `sub` says."""
    if isinstance(x, _PLAIN):
        return x
    if isinstance(x, Node):
        return x.substitute(sub)
    if isinstance(x, ShapeTracker):
        return ShapeTracker(tuple(v.substitute(sub) for v in x.views))
    if isinstance(x, (MemBuffer, ConstBuffer)):
        cls, args = x.__reduce__()
        return cls(*[_sub(a, sub) for a in args])
    if isinstance(x, tuple):
        return tuple(_sub(a, sub) for a in x)
    raise _Opaque(type(x).__name__)


def canonical(ast: tuple) -> tuple[tuple, dict[Variable, Variable]]:
    """(the AST with its Variables renamed _v0, _v1..., {canonical Variable: the AST's}); (ast, {}) where it has
    none or an argument can't be looked into."""
    nodes: list[LazyOp] = []
    seen: set[int] = set()
    for root in ast:
        for n in root.toposort():
            if id(n) not in seen:
                seen.add(id(n))
                nodes.append(n)
    found: dict[Variable, None] = {}
    try:
        for n in nodes:
            _vars_in(n.arg, found)
    except _Opaque:
        return ast, {}
    if not found:
        return ast, {}
    sub = {v: Variable(f"_v{i}", v.min, v.max) for i, v in enumerate(found)}
    if all(v.expr == c.expr for v, c in sub.items()):
        return ast, {}
    new: dict[int, LazyOp] = {}
    try:
        for n in nodes:  # toposort: sources come first
            new[id(n)] = LazyOp(n.op, tuple(new[id(s)] for s in n.src), _sub(n.arg, sub))
    except _Opaque:
        return ast, {}
    return tuple(new[id(r)] for r in ast), {c: v for v, c in sub.items()}

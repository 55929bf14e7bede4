"""The primitive op families every backend implements, and LazyOp, the AST node of one kernel.

A kernel's AST is a tree of LazyOps whose roots are BufferOps.STORE and whose leaves are BufferOps.LOAD/CONST;
in between sit UnaryOps/BinaryOps/TernaryOps (elementwise) and at most one ReduceOps node, except in a row kernel:
a chain of reduces over the same shape and axes, each reading the ones before it (engine/fuse_rows.py).
MovementOps never reach a compiled kernel: the ShapeTracker of each LOAD/CONST/STORE absorbs them.
"""
from __future__ import annotations

import math
from enum import Enum, auto
from typing import Any, Union

from tinygrad.dtype import DType
from tinygrad.helpers import toposort


class UnaryOps(Enum):
    EXP2 = auto()
    LOG2 = auto()
    CAST = auto()
    BITCAST = auto()
    SIN = auto()
    SQRT = auto()
    NEG = auto()
    RECIP = auto()


class BinaryOps(Enum):
    ADD = auto()
    SUB = auto()
    MUL = auto()
    DIV = auto()
    MAX = auto()
    MOD = auto()
    CMPLT = auto()
    CMPEQ = auto()
    CMPNE = auto()
    XOR = auto()
    AND = auto()
    OR = auto()
    SHL = auto()
    SHR = auto()


class ReduceOps(Enum):
    SUM = auto()
    MAX = auto()
    PROD = auto()


class MovementOps(Enum):
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    STRIDE = auto()


class TernaryOps(Enum):
    MULACC = auto()
    WHERE = auto()


class LoadOps(Enum):
    EMPTY = auto()
    CONST = auto()
    COPY = auto()
    CONTIGUOUS = auto()
    CUSTOM = auto()
    ASSIGN = auto()
    # the flat index of each element: arange without data, inlined into kernels like a CONST
    IOTA = auto()


class BufferOps(Enum):
    LOAD = auto()
    CONST = auto()
    STORE = auto()
    IOTA = auto()


Op = Union[UnaryOps, BinaryOps, ReduceOps, MovementOps, TernaryOps, LoadOps, BufferOps]

# ops whose value at all-zero inputs is not zero: a padded (masked) view must not be fused through them, since the
# padding would read as f(0) instead of 0 (fmod(0, 0) is nan, and an int 0 % 0 traps)
UNSAFE_PAD_OPS = {UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.RECIP, BinaryOps.DIV, BinaryOps.MOD, BinaryOps.CMPEQ}


def _const_identity(val: Any) -> Any:
    """What makes two constants the same kernel: the value's type (1, 1.0 and True render differently), and for
    floats the sign of zero (0.0 == -0.0) and NaN-ness (NaN != NaN)."""
    if type(val) is float:
        return (float, "nan") if val != val else (float, val, math.copysign(1.0, val))
    return (type(val), val)


class MemBuffer:
    """A LOAD/STORE's argument: buffer number `idx` in the kernel's argument list, read through `st`."""
    __slots__ = ("idx", "dtype", "st", "_hash")

    def __init__(self, idx: int, dtype: DType, st):
        self.idx, self.dtype, self.st = idx, dtype, st
        self._hash = hash((idx, dtype, st))

    def __reduce__(self):
        # NOTE: the cached hash is per process (enum and str hashes are salted): pickles rebuild it
        return MemBuffer, (self.idx, self.dtype, self.st)

    def __eq__(self, o) -> bool:
        return isinstance(o, MemBuffer) and (self.idx, self.dtype, self.st) == (o.idx, o.dtype, o.st)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"MemBuffer(idx={self.idx}, dtype={self.dtype}, st={self.st})"


class ConstBuffer:
    """A CONST's argument: the value `val` broadcast through `st` (its mask makes padded areas 0)."""
    __slots__ = ("val", "dtype", "st", "_hash")

    def __init__(self, val: Any, dtype: DType, st):
        self.val, self.dtype, self.st = val, dtype, st
        self._hash = hash((_const_identity(val), dtype, st))

    def __reduce__(self):
        return ConstBuffer, (self.val, self.dtype, self.st)

    def __eq__(self, o) -> bool:
        return isinstance(o, ConstBuffer) and (_const_identity(self.val), self.dtype, self.st) == \
            (_const_identity(o.val), o.dtype, o.st)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"ConstBuffer(val={self.val}, dtype={self.dtype}, st={self.st})"


class LazyOp:
    """One node of a kernel AST: `op` applied to `src` with a static `arg`. Immutable and hashed by structure."""
    __slots__ = ("op", "src", "arg", "_hash")

    def __init__(self, op: Op, src: tuple[LazyOp, ...] = (), arg: Any = None):
        self.op, self.src, self.arg = op, tuple(src), arg
        # NOTE: children hash first, so hashing a deep AST stays linear and never recurses
        self._hash = hash((op, tuple(s._hash for s in self.src), arg))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return LazyOp, (self.op, self.src, self.arg)

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, LazyOp) or self._hash != other._hash:
            return False
        # iterative structural comparison: ASTs can be deep and shared
        todo, seen = [(self, other)], set()
        while todo:
            a, b = todo.pop()
            if a is b or (id(a), id(b)) in seen:
                continue
            seen.add((id(a), id(b)))
            if a.op != b.op or a.arg != b.arg or len(a.src) != len(b.src) or a._hash != b._hash:
                return False
            todo.extend(zip(a.src, b.src))
        return True

    def __repr__(self) -> str:
        return f"LazyOp(op={self.op}, src=<{len(self.src)}>, arg={self.arg})"

    def toposort(self) -> list[LazyOp]:
        """Every node of this AST once, sources before users."""
        return toposort(self, lambda op: op.src)

    @property
    def lazyops(self) -> list[LazyOp]:
        return self.toposort()


def ast_key(ast: tuple[LazyOp, ...]) -> str:
    """A text naming every detail of a kernel AST, the same in every process (hashes are salted per process, so
    they can't key a cache on disk): one line per node, sources by number."""
    names: dict[int, int] = {}
    lines: list[str] = []
    for root in ast:
        for node in root.toposort():
            if id(node) in names:
                continue
            names[id(node)] = len(names)
            arg = node.arg
            if isinstance(arg, ConstBuffer):
                arg = f"ConstBuffer({_const_identity(arg.val)!r}, {arg.dtype!r}, {arg.st!r})"
            lines.append(f"{node.op} {[names[id(s)] for s in node.src]} {arg!r}")
        lines.append(f"root {names[id(root)]}")
    return "\n".join(lines)


def print_ast(ast: LazyOp | tuple[LazyOp, ...]) -> str:
    """An indented text dump of an AST (DEBUG=5), shared subtrees printed once and then referred to by number."""
    roots = ast if isinstance(ast, tuple) else (ast,)
    lines: list[str] = []
    names: dict[int, int] = {}
    for root in roots:
        stack = [(root, 0)]
        while stack:
            node, depth = stack.pop()
            if id(node) in names:
                lines.append("  " * depth + f"@{names[id(node)]}")
                continue
            names[id(node)] = len(names)
            lines.append("  " * depth + f"#{names[id(node)]} {node.op} {node.arg if node.arg is not None else ''}")
            stack.extend((s, depth + 1) for s in reversed(node.src))
    return "\n".join(lines)

"""What the disk cache keeps of the engine's work (schedules, rendered kernels, BEAM's choices), as JSON records.

A cache file is data that another process, or another user, may have written: reading it must never run code. A
pickle runs whatever its bytes name, so none is stored. A record names only this project's own value types, by a
fixed tag, and reading one builds them through their constructors from plain JSON values:

    {"format": 1, "nodes": [[op, [src node numbers], arg], ...], "value": value}

A value is a JSON null, boolean, number or string, or a list whose first item is one of the tags below. LazyOps
are numbered once in `nodes`, sources before users (ASTs share subtrees, and a deep one must not recurse), and
named by number elsewhere. Anything else (a type not listed, a malformed record) is a `RecordError`: the writer
then keeps nothing, the reader treats the row as missing.
"""
from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any

from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.codegen.program import ProgramSpec, TensorMapSpec
from tinygrad.dtype import DTYPES_DICT, INVERSE_DTYPES_DICT, DType, PtrDType
from tinygrad.ops import (
    BinaryOps,
    BufferOps,
    ConstBuffer,
    LazyOp,
    LoadOps,
    MemBuffer,
    MovementOps,
    ReduceOps,
    TernaryOps,
    UnaryOps,
)
from tinygrad.shape.shapetracker import ShapeTracker
from tinygrad.shape.symbolic import AndNode, DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode, Variable
from tinygrad.shape.view import View

FORMAT = 1
ENUMS: dict[str, type[Enum]] = {e.__name__: e for e in (UnaryOps, BinaryOps, ReduceOps, MovementOps, TernaryOps,
                                                        LoadOps, BufferOps, OptOps)}
OP_NODES = {MulNode: "mul", DivNode: "div", ModNode: "mod", LtNode: "lt"}
RED_NODES = {SumNode: "sum", AndNode: "and"}
PROGRAM_FIELDS = dataclasses.fields(ProgramSpec)
NODE_TAGS = {**{v: k for k, v in OP_NODES.items()}, **{v: k for k, v in RED_NODES.items()}}


class RecordError(ValueError):
    """A value the cache's record format can't hold, or bytes that are not a well-formed record."""


def dumps(value: Any) -> bytes:
    """`value` as a record (see the module docstring); RecordError if it holds a type the format doesn't name."""
    nodes: list = []
    numbers: dict[int, int] = {}
    try:
        enc = _Encoder(nodes, numbers).value(value)
        return json.dumps({"format": FORMAT, "nodes": nodes, "value": enc}, separators=(",", ":")).encode()
    except RecursionError:
        raise RecordError("value nested too deeply for a record") from None


def loads(data: bytes) -> Any:
    """The value a record holds. Raises RecordError on anything but a well-formed record of this format."""
    try:
        rec = json.loads(data)
        if not isinstance(rec, dict) or rec.get("format") != FORMAT or not isinstance(rec.get("nodes"), list):
            raise RecordError("not a record of this format")
        dec = _Decoder()
        for entry in rec["nodes"]:
            dec.node(entry)
        return dec.value(rec.get("value"))
    except RecordError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, AssertionError, RecursionError,
            OverflowError, UnicodeDecodeError) as e:
        # the constructors' own checks of what a malformed record hands them
        raise RecordError(f"malformed record: {type(e).__name__}: {e}") from None


class _Encoder:
    def __init__(self, nodes: list, numbers: dict[int, int]):
        self.nodes, self.numbers = nodes, numbers

    def value(self, x: Any) -> Any:
        t = type(x)
        if x is None or t in (bool, int, float, str):
            return x
        if t is tuple or t is list:
            return ["t" if t is tuple else "l", *[self.value(v) for v in x]]
        if t is bytes:
            return ["b", x.hex()]
        if isinstance(x, Enum) and ENUMS.get(t.__name__) is t:
            return ["e", t.__name__, x.name]
        if isinstance(x, DType):
            return self.dtype(x)
        if t is LazyOp:
            return ["op", self.lazyop(x)]
        if t is MemBuffer:
            return ["mb", x.idx, self.dtype(x.dtype), self.value(x.st)]
        if t is ConstBuffer:
            return ["cb", self.value(x.val), self.dtype(x.dtype), self.value(x.st)]
        if t is ShapeTracker:
            return ["st", *[self.value(v) for v in x.views]]
        if t is View:
            return ["v", self.value(x.shape), self.value(x.strides), self.value(x.offset), self.value(x.mask),
                    bool(x.contiguous)]
        if t is Opt:
            return ["opt", self.value(x.op), x.axis, x.amt]
        if t is ProgramSpec:
            # by field, in declaration order (a new field is a new format: diskcache.VERSION)
            return ["prog", *[self.value(getattr(x, f.name)) for f in PROGRAM_FIELDS]]
        if t is TensorMapSpec:
            return ["tmap", x.arg, x.offset, x.elem, self.value(x.dims), self.value(x.strides), self.value(x.box),
                    x.swizzle]
        if isinstance(x, Node):
            return self.node(x)
        raise RecordError(f"the cache's records can't hold a {t.__module__}.{t.__qualname__}")

    def dtype(self, d: DType) -> list:
        if type(d) is PtrDType:
            return ["dp", self.dtype(d.base)]
        if type(d) is DType:
            scalar = d.scalar()
            name = INVERSE_DTYPES_DICT.get(scalar)
            if name is not None and (d.count == 1 and d is scalar or d.count > 1 and d == scalar.vec(d.count)):
                return ["d", name, d.count]
        raise RecordError(f"the cache's records can't hold dtype {d!r}")

    def node(self, n: Node) -> list:
        t = type(n)
        if t is NumNode:
            return ["n", n.b]
        if t is Variable:
            return ["var", n.expr, n.min, n.max, n._val]
        if t in OP_NODES:
            return [OP_NODES[t], self.value(n.a), self.value(n.b)]
        if t in RED_NODES:
            return [RED_NODES[t], *[self.value(s) for s in n.nodes]]
        raise RecordError(f"the cache's records can't hold a {t.__name__}")

    def lazyop(self, root: LazyOp) -> int:
        # iterative: numbered sources first
        for op in root.toposort():
            if id(op) not in self.numbers:
                self.nodes.append([self.value(op.op), [self.numbers[id(s)] for s in op.src], self.value(op.arg)])
                self.numbers[id(op)] = len(self.nodes) - 1
        return self.numbers[id(root)]


def _ints(x: Any, what: str) -> int:
    if type(x) is not int:
        raise RecordError(f"{what} must be an int, not {type(x).__name__}")
    return x


class _Decoder:
    def __init__(self):
        self.ops: list[LazyOp] = []

    def node(self, entry: Any) -> None:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[1], list)):
            raise RecordError("malformed LazyOp entry")
        op = self.value(entry[0])
        if not isinstance(op, Enum) or isinstance(op, OptOps):
            raise RecordError(f"a LazyOp's op must be an op, not {op!r}")
        srcs = []
        for i in entry[1]:
            if type(i) is not int or not 0 <= i < len(self.ops):
                raise RecordError(f"a LazyOp's source {i!r} is not an earlier node")
            srcs.append(self.ops[i])
        self.ops.append(LazyOp(op, tuple(srcs), self.value(entry[2])))

    def value(self, x: Any) -> Any:
        if x is None or type(x) in (bool, int, float, str):
            return x
        if type(x) is not list or not x or type(x[0]) is not str:
            raise RecordError(f"malformed value {x!r:.80}")
        tag, args = x[0], x[1:]
        if tag in ("t", "l"):
            items = [self.value(v) for v in args]
            return tuple(items) if tag == "t" else items
        if tag == "b":
            return bytes.fromhex(args[0])
        if tag == "e":
            enum = ENUMS.get(args[0])
            if enum is None or args[1] not in enum.__members__:
                raise RecordError(f"unknown enum member {args!r:.80}")
            return enum.__members__[args[1]]
        if tag in ("d", "dp"):
            return self.dtype(x)
        if tag == "op":
            i = args[0]
            if type(i) is not int or not 0 <= i < len(self.ops):
                raise RecordError(f"LazyOp number {i!r} is not in the record")
            return self.ops[i]
        if tag == "mb":
            return MemBuffer(_ints(args[0], "a buffer number"), self.dtype(args[1]), self.tracker(args[2]))
        if tag == "cb":
            val = self.value(args[0])
            if not (type(val) in (bool, int, float) or isinstance(val, Node)):
                raise RecordError(f"a constant must be a number, not {val!r:.80}")
            return ConstBuffer(val, self.dtype(args[1]), self.tracker(args[2]))
        if tag == "st":
            return self.tracker(x)
        if tag == "v":
            return self.view(x)
        if tag == "prog":
            return self.program(args)
        if tag == "tmap":
            if len(args) != 7:
                raise RecordError("a tensor map has 7 fields")
            arg, offset, elem, dims, strides, box, swizzle = (self.value(a) for a in args)
            if not all(type(v) is tuple and all(type(i) is int for i in v) for v in (dims, strides, box)):
                raise RecordError("a tensor map's sizes are tuples of ints")
            return TensorMapSpec(_ints(arg, "a tensor map's arg"), _ints(offset, "a tensor map's offset"),
                                 _ints(elem, "a tensor map's element size"), dims, strides, box,
                                 _ints(swizzle, "a tensor map's swizzle"))
        if tag == "opt":
            op = self.value(args[0])
            if not isinstance(op, OptOps):
                raise RecordError(f"an Opt's op must be an OptOps, not {op!r}")
            return Opt(op, _ints(args[1], "an Opt's axis"), _ints(args[2], "an Opt's amount"))
        return self.symbolic(x)

    def program(self, args: list) -> ProgramSpec:
        if len(args) != len(PROGRAM_FIELDS):
            raise RecordError(f"a ProgramSpec has {len(PROGRAM_FIELDS)} fields")
        f = {field.name: self.value(a) for field, a in zip(PROGRAM_FIELDS, args)}
        if type(f["name"]) is not str or type(f["src"]) is not str:
            raise RecordError("a ProgramSpec's name and source are strings")
        for name in ("global_size", "local_size"):
            if f[name] is not None and not (type(f[name]) is tuple and
                                            all(type(d) is int or isinstance(d, Node) for d in f[name])):
                raise RecordError(f"a ProgramSpec's {name} is None or a tuple of sizes")
        if not (type(f["vars"]) is tuple and all(type(v) is Variable for v in f["vars"])):
            raise RecordError("a ProgramSpec's vars are Variables")
        if not (type(f["applied_opts"]) is tuple and all(type(o) is Opt for o in f["applied_opts"])):
            raise RecordError("a ProgramSpec's applied_opts are Opts")
        launch = f["launch"]
        if launch is not None and not (type(launch) is tuple and len(launch) == 2 and
                                       all(type(d) is tuple and all(type(i) is int for i in d) for d in launch)):
            raise RecordError("a ProgramSpec's launch is None or (grid, block)")
        if type(f["persistent"]) is not bool or type(f["waits_for_grid"]) is not bool:
            raise RecordError("a ProgramSpec's flags are booleans")
        _ints(f["dynamic_shared"], "a ProgramSpec's dynamic shared bytes")
        if not (type(f["tensor_maps"]) is tuple and all(type(m) is TensorMapSpec for m in f["tensor_maps"])):
            raise RecordError("a ProgramSpec's tensor maps are TensorMapSpecs")
        return ProgramSpec(**f)

    def dtype(self, x: Any) -> DType:
        if type(x) is not list or not x:
            raise RecordError(f"malformed dtype {x!r:.80}")
        if x[0] == "dp" and len(x) == 2:
            return PtrDType(self.dtype(x[1]))
        if x[0] == "d" and len(x) == 3 and x[1] in DTYPES_DICT and type(x[2]) is int and x[2] >= 1:
            d = DTYPES_DICT[x[1]]
            return d if x[2] == 1 else d.vec(x[2])
        raise RecordError(f"malformed dtype {x!r:.80}")

    def tracker(self, x: Any) -> ShapeTracker:
        if type(x) is not list or not x or x[0] != "st":
            raise RecordError(f"malformed ShapeTracker {x!r:.80}")
        return ShapeTracker(tuple(self.view(v) for v in x[1:]))

    def view(self, x: Any) -> View:
        if type(x) is not list or len(x) != 6 or x[0] != "v" or type(x[5]) is not bool:
            raise RecordError(f"malformed View {x!r:.80}")
        shape, strides, offset, mask = (self.value(v) for v in x[1:5])
        if not (type(shape) is tuple and type(strides) is tuple and len(shape) == len(strides)):
            raise RecordError("a View's shape and strides must be tuples of one length")
        if mask is not None and not (type(mask) is tuple and len(mask) == len(shape) and
                                     all(type(m) is tuple and len(m) == 2 for m in mask)):
            raise RecordError("a View's mask must be None or a (begin, end) pair per dim")
        for s in (*shape, *strides, offset, *(b for m in (mask or ()) for b in m)):
            if not (type(s) is int or isinstance(s, Node)):
                raise RecordError(f"a View holds ints and symbolic nodes, not {s!r:.80}")
        return View(shape, strides, offset, mask, x[5])

    def symbolic(self, x: list) -> Node:
        tag, args = x[0], x[1:]
        if tag == "n" and len(args) == 1:
            return NumNode(_ints(args[0], "a NumNode"))
        if tag == "var" and len(args) == 4 and type(args[0]) is str:
            v = Variable(args[0], self.value(args[1]), self.value(args[2]))
            return v if args[3] is None else v.bind(_ints(args[3], "a Variable's value"))
        cls = NODE_TAGS.get(tag)
        if cls is None:
            raise RecordError(f"unknown tag {tag!r:.40}")
        parts = [self.value(a) for a in args]
        if not all(type(p) is int or isinstance(p, Node) for p in parts):
            raise RecordError(f"a {cls.__name__} holds ints and symbolic nodes")
        if cls in RED_NODES:
            return cls(parts)
        if len(parts) != 2:
            raise RecordError(f"a {cls.__name__} has two operands")
        return cls(*parts)

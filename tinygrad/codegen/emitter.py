"""The uop emitter: how a kernel's flat list of UOps is made, one instruction at a time.

The linearizer and the lowerings it hands work to (codegen/lower_tc.py) make uops only through an `Emitter`:
identical uops are made once (common subexpressions), in scopes so that nothing made inside a loop body is reused
after the loop closes; symbolic index expressions (shape/symbolic.py Nodes) become int32 ALU uops, each Variable
standing for the uop `bind` gave it (a loop counter, a thread index); constant operands of index arithmetic are
folded (x+0, x*1) so kernels carry no arithmetic on literals.

>>> from tinygrad.dtype import dtypes
>>> em = Emitter([])
>>> em.add(em.const(3), em.const(0)).arg, len(em.uops)
(3, 2)
"""
from __future__ import annotations

from tinygrad.codegen.uops import UOp, UOps
from tinygrad.dtype import dtypes
from tinygrad.ops import BinaryOps, _const_identity
from tinygrad.shape.symbolic import AndNode, DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode, Variable


class Emitter:
    """Appends uops to `uops` (the kernel's list), deduplicated within the open scopes; `var_uops` maps each
    symbolic Variable of the kernel's index expressions to the uop that holds its value."""

    def __init__(self, uops: list[UOp]):
        self.uops = uops
        self.var_uops: dict[Variable, UOp] = {}
        # CSE table and the keys made in each open loop scope
        self._cse: dict[tuple, UOp] = {}
        self._scope: list[list[tuple]] = [[]]

    def uop(self, uop: UOps, dtype, vin: tuple, arg, cachable: bool = True) -> UOp:
        """The uop (uop, dtype, vin, arg): a new one appended to the kernel, or (`cachable`) an equal one already
        made in an open scope."""
        if not cachable:
            u = UOp(uop, dtype, vin, arg)
            self.uops.append(u)
            return u
        # NOTE: the uop kind by id (an Enum member is one object; Enum's own __hash__ is Python code, and this is the
        # linearizer's hottest line), the inputs by identity (equal inputs were made once)
        key = (id(uop), dtype, tuple(map(id, vin)), arg if uop is not UOps.CONST else _const_identity(arg))
        hit = self._cse.get(key)
        if hit is not None:
            return hit
        u = UOp(uop, dtype, vin, arg)
        self.uops.append(u)
        self._cse[key] = u
        self._scope[len(self._scope) - 1].append(key)
        return u

    def const(self, val, dtype=dtypes.int32) -> UOp:
        return self.uop(UOps.CONST, dtype, (), val)

    def open_scope(self) -> None:
        self._scope.append([])

    def close_scope(self) -> None:
        # values made inside a loop body are out of scope after it
        for key in self._scope.pop():
            self._cse.pop(key, None)

    def bind(self, var: Variable, u: UOp) -> None:
        """From now on `var` in an index expression is the value of `u`."""
        self.var_uops[var] = u

    def alu(self, op, dtype, vin: tuple) -> UOp:
        # fold constants in index math so kernels don't carry arithmetic on literals
        if op is BinaryOps.ADD:
            if vin[0].uop is UOps.CONST and vin[0].arg == 0:
                return vin[1]
            if vin[1].uop is UOps.CONST and vin[1].arg == 0:
                return vin[0]
        if op is BinaryOps.MUL:
            if vin[1].uop is UOps.CONST and vin[1].arg == 1:
                return vin[0]
            if vin[0].uop is UOps.CONST and vin[0].arg == 1:
                return vin[1]
        return self.uop(UOps.ALU, dtype, vin, op)

    # ---- int32 index arithmetic and bool conditions, the shorthands a lowering reads best in ----
    def add(self, a: UOp, b: UOp) -> UOp:
        return self.alu(BinaryOps.ADD, dtypes.int32, (a, b))

    def sub(self, a: UOp, b: UOp) -> UOp:
        return self.alu(BinaryOps.SUB, dtypes.int32, (a, b))

    def mul(self, a: UOp, b: UOp) -> UOp:
        return self.alu(BinaryOps.MUL, dtypes.int32, (a, b))

    def div(self, a: UOp, b: UOp) -> UOp:
        return self.alu(BinaryOps.DIV, dtypes.int32, (a, b))

    def mod(self, a: UOp, b: UOp) -> UOp:
        return self.alu(BinaryOps.MOD, dtypes.int32, (a, b))

    def xor(self, a: UOp, b: UOp) -> UOp:
        return self.alu(BinaryOps.XOR, dtypes.int32, (a, b))

    def lt(self, a: UOp, b: UOp) -> UOp:
        return self.alu(BinaryOps.CMPLT, dtypes.bool, (a, b))

    def eq(self, a: UOp, b: UOp) -> UOp:
        return self.alu(BinaryOps.CMPEQ, dtypes.bool, (a, b))

    def both(self, a: UOp, b: UOp) -> UOp:
        return self.alu(BinaryOps.AND, dtypes.bool, (a, b))

    # ---- symbolic index expressions -> uops ----
    def lower_node(self, node) -> UOp:
        """Lower an int or symbolic Node to int32 uops (floor division and modulo, as the symbolic engine means)."""
        i32 = dtypes.int32
        if isinstance(node, int):
            return self.const(node, i32)
        if isinstance(node, NumNode):
            return self.const(node.b, i32)
        if isinstance(node, Variable):
            u = self.var_uops.get(node)
            if u is None:
                raise RuntimeError(f"kernel uses variable {node!r} with no loop or argument for it")
            return u
        if isinstance(node, MulNode):
            return self.alu(BinaryOps.MUL, i32, (self.lower_node(node.a), self.lower_node(node.b)))
        if isinstance(node, SumNode):
            acc = None
            for n in node.nodes:
                u = self.lower_node(n)
                acc = u if acc is None else self.alu(BinaryOps.ADD, i32, (acc, u))
            return acc if acc is not None else self.const(0, i32)
        if isinstance(node, DivNode) or isinstance(node, ModNode):
            a = self.lower_node(node.a)
            b = self.lower_node(node.b)
            if node.a.min >= 0:
                op = BinaryOps.DIV if isinstance(node, DivNode) else BinaryOps.MOD
                return self.alu(op, i32, (a, b))
            # C truncates toward zero; floor semantics need the remainder made non-negative first
            r = self.alu(BinaryOps.MOD, i32, (self.alu(BinaryOps.ADD, i32, (self.alu(BinaryOps.MOD, i32, (a, b)), b)),
                                              b))
            if isinstance(node, ModNode):
                return r
            return self.alu(BinaryOps.DIV, i32, (self.alu(BinaryOps.SUB, i32, (a, r)), b))
        if isinstance(node, LtNode):
            return self.alu(BinaryOps.CMPLT, dtypes.bool, (self.lower_node(node.a), self.lower_node(node.b)))
        if isinstance(node, AndNode):
            acc = None
            for n in node.nodes:
                u = self.lower_node(n)
                acc = u if acc is None else self.alu(BinaryOps.AND, dtypes.bool, (acc, u))
            return acc
        raise TypeError(f"can't lower symbolic {type(node).__name__} {node!r}")


# ---- facts about index expressions (symbolic Nodes) ----
def lane_base(idx, lane):
    """The index of lane 0 when `idx` is that plus the lane (consecutive lanes, consecutive elements), else None."""
    terms = idx.nodes if isinstance(idx, SumNode) else (idx,)
    rest = []
    found = False
    for t in terms:
        if isinstance(t, Variable) and t.expr == lane.expr:
            if found:
                return None
            found = True
        elif lane in t.vars():
            return None
        else:
            rest.append(t)
    if not found:
        return None
    return Node.sum(rest) if rest else NumNode(0)


def is_true(valid):
    return isinstance(valid, int) and valid == 1 or isinstance(valid, NumNode) and valid.b == 1


def is_false(valid):
    return isinstance(valid, int) and valid == 0 or isinstance(valid, NumNode) and valid.b == 0

# cython: language_level=3
"""The linearizer: lowers one kernel's AST (a tree of LazyOps) to a flat list of UOps.

The kernel iterates over its full shape (the reduce's input shape when it has a reduce, else the output's):
the output dimensions are outer loops (or GPU grid indices), the reduced dimensions inner loops around an
accumulator. Index arithmetic comes from each buffer's ShapeTracker as symbolic expressions, lowered to ALU uops.
Identical uops are made once (CSE), scoped so that nothing defined inside a loop is used after it.
"""
from tinygrad.codegen.uops import UOp, UOps
from tinygrad.dtype import PtrDType, dtypes
from tinygrad.helpers import DEBUG, to_function_name
from tinygrad.ops import BinaryOps, BufferOps, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.symbolic import (AndNode, DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode,
                                     Variable)


cdef object _out_dtype(object op, dict dts):
    """The dtype a LazyOp produces, from its sources' dtypes."""
    if op.op is BufferOps.LOAD or op.op is BufferOps.CONST or op.op is BufferOps.IOTA:
        return op.arg.dtype
    if op.op is UnaryOps.CAST or op.op is UnaryOps.BITCAST:
        return op.arg[0]
    if op.op is BinaryOps.CMPLT or op.op is BinaryOps.CMPEQ or op.op is BinaryOps.CMPNE:
        return dtypes.bool
    if op.op is TernaryOps.WHERE:
        return dts[id(op.src[1])]
    return dts[id(op.src[0])]


cdef class Linearizer:
    """`Linearizer(ast, opts).linearize()` fills `uops`; `name`, `global_size`, `local_size` and `vars` describe
    how the rendered kernel is called."""

    def __init__(self, ast, opts=None):
        self.ast = ast if isinstance(ast, tuple) else (ast,)
        self.opts = opts
        for root in self.ast:
            if root.op is not BufferOps.STORE:
                raise ValueError(f"a kernel AST must be rooted at STOREs, got {root.op}")
        self.uops = []
        self.global_size = None
        self.local_size = None
        self.vars = []
        self.applied_opts = []
        # the single reduce, and the shapes the kernel iterates over
        self.reduceop = None
        for root in self.ast:
            for op in root.toposort():
                if isinstance(op.op, ReduceOps):
                    if self.reduceop is not None and self.reduceop is not op:
                        raise ValueError("a kernel can hold at most one reduce")
                    self.reduceop = op
        self.output_shape = tuple(self.ast[0].arg.st.shape)
        self.full_shape = self._reduce_input_shape() if self.reduceop is not None else self.output_shape
        self.name = self._make_name()

    def _reduce_input_shape(self):
        for op in self.reduceop.toposort():
            if op.op in (BufferOps.LOAD, BufferOps.CONST, BufferOps.IOTA):
                return tuple(op.arg.st.shape)
        raise ValueError("a reduce with no input")

    def _make_name(self):
        dims = "_".join(str(s) if isinstance(s, int) else s.render() for s in self.full_shape)
        return to_function_name(("r_" if self.reduceop is not None else "E_") + (dims or "0"))

    # ---- uop construction with CSE ----
    cdef object _uop(self, object uop, object dtype, tuple vin, object arg, bint cachable=True):
        key = (uop, dtype, tuple([id(v) for v in vin]), arg if uop is not UOps.CONST else (type(arg), arg))
        if cachable:
            hit = self._cse.get(key)
            if hit is not None:
                return hit
        u = UOp(uop, dtype, vin, arg)
        self.uops.append(u)
        if cachable:
            self._cse[key] = u
            self._scope[len(self._scope) - 1].append(key)
        return u

    cdef object _const(self, object val, object dtype):
        return self._uop(UOps.CONST, dtype, (), val)

    cdef void _open_scope(self):
        self._scope.append([])

    cdef void _close_scope(self):
        # values made inside a loop body are out of scope after it
        for key in self._scope.pop():
            self._cse.pop(key, None)

    # ---- symbolic index expressions -> uops ----
    cdef object _lower_node(self, object node):
        """Lower an int or symbolic Node to int32 uops (floor division and modulo, as the symbolic engine means)."""
        i32 = dtypes.int32
        if isinstance(node, int):
            return self._const(node, i32)
        if isinstance(node, NumNode):
            return self._const(node.b, i32)
        if isinstance(node, Variable):
            u = self._var_uops.get(node)
            if u is None:
                raise RuntimeError(f"kernel uses variable {node!r} with no loop or argument for it")
            return u
        if isinstance(node, MulNode):
            return self._alu(BinaryOps.MUL, i32, (self._lower_node(node.a), self._lower_node(node.b)))
        if isinstance(node, SumNode):
            acc = None
            for n in node.nodes:
                u = self._lower_node(n)
                acc = u if acc is None else self._alu(BinaryOps.ADD, i32, (acc, u))
            return acc if acc is not None else self._const(0, i32)
        if isinstance(node, DivNode) or isinstance(node, ModNode):
            a = self._lower_node(node.a)
            b = self._lower_node(node.b)
            if node.a.min >= 0:
                op = BinaryOps.DIV if isinstance(node, DivNode) else BinaryOps.MOD
                return self._alu(op, i32, (a, b))
            # C truncates toward zero; floor semantics need the remainder made non-negative first
            r = self._alu(BinaryOps.MOD, i32, (self._alu(BinaryOps.ADD, i32, (self._alu(BinaryOps.MOD, i32, (a, b)),
                                                                              b)), b))
            if isinstance(node, ModNode):
                return r
            return self._alu(BinaryOps.DIV, i32, (self._alu(BinaryOps.SUB, i32, (a, r)), b))
        if isinstance(node, LtNode):
            return self._alu(BinaryOps.CMPLT, dtypes.bool, (self._lower_node(node.a), self._lower_node(node.b)))
        if isinstance(node, AndNode):
            acc = None
            for n in node.nodes:
                u = self._lower_node(n)
                acc = u if acc is None else self._alu(BinaryOps.AND, dtypes.bool, (acc, u))
            return acc
        raise TypeError(f"can't lower symbolic {type(node).__name__} {node!r}")

    cdef object _alu(self, object op, object dtype, tuple vin):
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
        return self._uop(UOps.ALU, dtype, vin, op)

    # ---- the lowering ----
    def linearize(self):
        if self.uops:
            return self
        self._cse = {}
        self._scope = [[]]
        self._var_uops = {}
        # arguments: buffers in index order, then symbolic variables by name
        mems = {}
        variables = set()
        for root in self.ast:
            for op in root.toposort():
                if op.op in (BufferOps.LOAD, BufferOps.STORE, BufferOps.CONST, BufferOps.IOTA):
                    if op.op is BufferOps.LOAD or op.op is BufferOps.STORE:
                        mems.setdefault(op.arg.idx, op.arg)
                    variables |= op.arg.st.vars()
                    if op.op is BufferOps.CONST and isinstance(op.arg.val, Node):
                        variables |= op.arg.val.vars()
        for s in self.full_shape:
            if isinstance(s, Node):
                variables |= s.vars()
        self.buf_uops = {}
        for idx in sorted(mems):
            mb = mems[idx]
            is_out = any(r.arg.idx == idx for r in self.ast)
            self.buf_uops[idx] = self._uop(UOps.DEFINE_GLOBAL, PtrDType(mb.dtype), (), (idx, f"data{idx}", is_out),
                                           False)
        self.vars = sorted(variables, key=lambda v: v.expr)
        for v in self.vars:
            self._var_uops[v] = self._uop(UOps.DEFINE_VAR, dtypes.int32, (), v, False)

        full, out = self.full_shape, self.output_shape
        reduce_axes = [i for i in range(len(full)) if self.reduceop is not None and
                       not _same(out[i], full[i])]
        global_axes = [i for i in range(len(full)) if i not in reduce_axes]
        # the index variable of each dimension of the full shape (size-1 dims are constant 0)
        self._loop_vars = [NumNode(0) if _is_one(s) else Variable(f"ridx{i}", 0, _max_index(s))
                           for i, s in enumerate(full)]
        loops = []
        for i in global_axes:
            if not _is_one(full[i]):
                loops.append(self._loop(i))
        if self.reduceop is not None:
            acc_val = self._lower_reduce(reduce_axes)
        else:
            acc_val = None
        # everything after the reduce reads through the output shape: reduced dims are index 0 there
        self._out_idxs = [self._loop_vars[i] if i in global_axes else NumNode(0) for i in range(len(full))]
        for root in self.ast:
            val = self._lower_ast(root.src[0], self._out_idxs, acc_val)
            mb = root.arg
            idx, valid = mb.st.expr_idxs(list(self._out_idxs))
            vin = (self.buf_uops[mb.idx], self._lower_node(idx), val)
            if not _is_true(valid):
                vin = vin + (self._lower_node(valid),)
            self._uop(UOps.STORE, None, vin, None, False)
        for lp in reversed(loops):
            self._close_scope()
            self._uop(UOps.ENDLOOP, None, (lp,), None, False)
        if DEBUG >= 6:
            from tinygrad.codegen.uops import print_uops
            print(print_uops(self.uops))
        return self

    cdef object _loop(self, int axis):
        size = self.full_shape[axis]
        lp = self._uop(UOps.LOOP, dtypes.int32, (self._const(0, dtypes.int32), self._lower_node(size)), None, False)
        self._var_uops[self._loop_vars[axis]] = lp
        self._open_scope()
        return lp

    cdef object _lower_reduce(self, list reduce_axes):
        rop = self.reduceop
        dtype = self._dtypes_of(rop)[id(rop)]
        # the identity of the reduction: x+0, x*1, max(x, smallest)
        if rop.op is ReduceOps.MAX:
            start = dtypes.min(dtype)
        else:
            start = 0 if rop.op is ReduceOps.SUM else 1
        start = dtypes.as_const(start, dtype)
        acc = self._uop(UOps.DEFINE_ACC, dtype, (), start, False)
        loops = []
        for i in reduce_axes:
            if not _is_one(self.full_shape[i]):
                loops.append(self._loop(i))
        val = self._lower_ast(rop.src[0], self._loop_vars, None)
        alu_op = {ReduceOps.SUM: BinaryOps.ADD, ReduceOps.MAX: BinaryOps.MAX, ReduceOps.PROD: BinaryOps.MUL}[rop.op]
        new = self._uop(UOps.ALU, dtype, (val, acc), alu_op, False)
        phi = self._uop(UOps.PHI, dtype, (acc, new) + ((loops[len(loops) - 1],) if loops else ()), None, False)
        for lp in reversed(loops):
            self._close_scope()
            self._uop(UOps.ENDLOOP, None, (lp,), None, False)
        return phi

    cdef dict _dtypes_of(self, object root):
        cdef dict dts = {}
        for op in root.toposort():
            dts[id(op)] = _out_dtype(op, dts)
        return dts

    cdef object _lower_ast(self, object root, list idxs, object acc_val):
        """Lower an elementwise AST (stopping at the reduce, whose value is `acc_val`) at indices `idxs`."""
        dts = self._dtypes_of(root)
        cdef dict done = {}
        for op in root.toposort():
            if isinstance(op.op, ReduceOps):
                done[id(op)] = acc_val
                continue
            if id(op) in done:
                continue
            if op.op is BufferOps.LOAD or op.op is BufferOps.CONST or op.op is BufferOps.IOTA:
                done[id(op)] = self._lower_leaf(op, idxs)
                continue
            src = tuple([done[id(s)] for s in op.src])
            if op.op is UnaryOps.CAST:
                done[id(op)] = self._uop(UOps.CAST, op.arg[0], src, None)
            elif op.op is UnaryOps.BITCAST:
                done[id(op)] = self._uop(UOps.BITCAST, op.arg[0], src, None)
            elif op.op is TernaryOps.MULACC:
                mul = self._uop(UOps.ALU, dts[id(op)], src[:2], BinaryOps.MUL)
                done[id(op)] = self._uop(UOps.ALU, dts[id(op)], (mul, src[2]), BinaryOps.ADD)
            else:
                done[id(op)] = self._uop(UOps.ALU, dts[id(op)], src, op.op)
        return done[id(root)]

    cdef object _lower_leaf(self, object op, list idxs):
        st = op.arg.st
        dtype = op.arg.dtype
        my_idxs = [idxs[i] if not _is_one(s) else NumNode(0) for i, s in enumerate(st.shape)]
        idx, valid = st.expr_idxs(my_idxs)
        if op.op is BufferOps.IOTA:
            # the element's own index into the (virtual) buffer is its value
            c = self._lower_node(idx)
            if dtype != dtypes.int32:
                c = self._uop(UOps.CAST, dtype, (c,), None)
            if _is_true(valid):
                return c
            return self._uop(UOps.ALU, dtype, (self._lower_node(valid), c, self._const(dtypes.as_const(0, dtype),
                                                                                     dtype)), TernaryOps.WHERE)
        if op.op is BufferOps.CONST:
            if isinstance(op.arg.val, Node):
                c = self._lower_node(op.arg.val)
                if dtype != dtypes.int32:
                    c = self._uop(UOps.CAST, dtype, (c,), None)
            else:
                c = self._const(op.arg.val, dtype)
            if _is_true(valid):
                return c
            if _is_false(valid):
                return self._const(dtypes.as_const(0, dtype), dtype)
            return self._uop(UOps.ALU, dtype, (self._lower_node(valid), c, self._const(dtypes.as_const(0, dtype),
                                                                                     dtype)), TernaryOps.WHERE)
        buf = self.buf_uops[op.arg.idx]
        if _is_false(valid):
            return self._const(dtypes.as_const(0, dtype), dtype)
        if _is_true(valid):
            return self._uop(UOps.LOAD, dtype, (buf, self._lower_node(idx)), None)
        return self._uop(UOps.LOAD, dtype, (buf, self._lower_node(idx), self._lower_node(valid),
                                            self._const(dtypes.as_const(0, dtype), dtype)), None)


cdef bint _is_one(object s):
    return isinstance(s, int) and s == 1


cdef bint _same(object a, object b):
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return (not isinstance(a, int)) and (not isinstance(b, int)) and a == b


cdef object _max_index(object s):
    return s - 1 if isinstance(s, int) else s.max - 1


cdef bint _is_true(object valid):
    return isinstance(valid, int) and valid == 1 or isinstance(valid, NumNode) and valid.b == 1


cdef bint _is_false(object valid):
    return isinstance(valid, int) and valid == 0 or isinstance(valid, NumNode) and valid.b == 0

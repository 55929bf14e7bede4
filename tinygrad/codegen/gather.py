"""One-hot contractions as gathers.

Embedding's lookup and Tensor.gather are written as a comparison against an index, summed: out = sum_r [p == r] * w(r)
(or the sum of where(p == r, w(r), 0)), so they stay lazy and differentiable like every other op. Left as a
reduce, the kernel reads every one of w's n rows for every output and multiplies n - 1 of them by zero: BERT-base's
token embedding (30,522 rows, 4,096 tokens, 768 wide) took 31 ms of a 45 ms inference on an H200. The sum has one
nonzero term, so it is the gather w(p) where 0 <= p < n, and 0 elsewhere (as the sum gives for an index outside).

`rewrite(roots)` (the scheduler's last step calls it on each kernel) makes such a kernel's AST an elementwise one:
the reduce goes, and each load of w that varies along the reduced axis becomes a LOAD whose argument is a GatherBuffer
and whose source is p. Its view keeps one element of that axis; `lower` (called by the linearizer) adds p times the
axis's stride to the index and makes the load valid only where p is in range.

The sum and the gather agree exactly: the one term is w(p) times 1 (or w(p) itself), added to zeros. They differ only
where w holds an inf or a NaN in a row other than p's: the sum's 0 * inf is a NaN in every output, the gather (like
PyTorch's embedding) reads only the row it is asked for.

Matched: one SUM over one axis of the kernel, under any casts; its term a MUL of a cast comparison and the rest, or a
WHERE of the comparison, the rest and a zero constant; the comparison CMPEQ of an integer value p that does not vary
along the axis and that axis's own index (an IOTA, maybe cast to another integer type); every leaf of the rest that
varies along the axis a load through one view without a mask on it. Anything else keeps its reduce.
"""
from __future__ import annotations

from tinygrad.codegen.ast_facts import LEAVES, out_dtype
from tinygrad.dtype import dtypes
from tinygrad.ops import BinaryOps, BufferOps, ConstBuffer, LazyOp, MemBuffer, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.symbolic import NumNode, Variable


class GatherBuffer(MemBuffer):
    """A gathered LOAD's argument: buffer `idx` read through `st` (the gathered axis cut to its first element), at
    the load's source value v times `stride` further on, valid where 0 <= v < `size`."""
    __slots__ = ("stride", "size")

    def __init__(self, idx, dtype, st, stride: int, size: int):
        super().__init__(idx, dtype, st)
        self.stride, self.size = stride, size
        self._hash = hash((idx, dtype, st, stride, size, "gather"))

    def __reduce__(self):
        return GatherBuffer, (self.idx, self.dtype, self.st, self.stride, self.size)

    def __eq__(self, o) -> bool:
        return isinstance(o, GatherBuffer) and (self.idx, self.dtype, self.st, self.stride, self.size) == \
            (o.idx, o.dtype, o.st, o.stride, o.size)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"GatherBuffer(idx={self.idx}, dtype={self.dtype}, st={self.st}, stride={self.stride}, size={self.size})"


def _strip_casts(op):
    casts = []
    while op.op is UnaryOps.CAST:
        casts.append(op.arg)
        op = op.src[0]
    return op, casts


class _Axis:
    """The reduced axis r of a kernel whose loops run over `shape`, and how a leaf's view depends on it."""

    def __init__(self, shape, r: int):
        self.shape, self.r = shape, r
        self.idxs = [Variable(f"_g{d}", 0, s - 1) if s > 1 else NumNode(0) for d, s in enumerate(shape)]
        self.var = self.idxs[r]

    def varies(self, leaf) -> bool:
        idx, valid = leaf.arg.st.expr_idxs(self.idxs)
        return self.var in idx.vars() or self.var in valid.vars()

    def is_index(self, op) -> bool:
        """Is `op` the axis's own index: an IOTA reading r (maybe cast to another integer type)?"""
        op, casts = _strip_casts(op)
        if op.op is not BufferOps.IOTA or any(not dtypes.is_int(c[0]) for c in casts):
            return False
        idx, valid = op.arg.st.expr_idxs(self.idxs)
        return isinstance(idx, Variable) and idx.expr == self.var.expr and not valid.vars() and \
            isinstance(valid, NumNode) and valid.b == 1

    def cut(self, st):
        return st.shrink(tuple((0, 1) if d == self.r else (0, s) for d, s in enumerate(st.shape)))


def _int_value(op) -> bool:
    dts: dict[int, object] = {}
    for o in op.toposort():
        dts[id(o)] = out_dtype(o, dts)
    return dtypes.is_int(dts[id(op)])


def _match(red, axis: _Axis):
    """(p, w) where `red`'s term is the one-hot contraction [p == r] * w (casts under the reduce applied to w by the
    caller), else None."""
    term, casts = _strip_casts(red.src[0])
    cmp = rest = None
    if term.op is BinaryOps.MUL:
        for a, b in (term.src, term.src[::-1]):
            a0, acasts = _strip_casts(a)
            if a0.op is BinaryOps.CMPEQ and acasts:
                cmp, rest = a0, b
                break
    elif term.op is TernaryOps.WHERE and term.src[0].op is BinaryOps.CMPEQ:
        z = term.src[2]
        if z.op is BufferOps.CONST and not isinstance(z.arg.val, Variable) and z.arg.val == 0 and \
                not axis.varies(z):
            cmp, rest = term.src[0], term.src[1]
    if cmp is None:
        return None
    for p, io in (cmp.src, cmp.src[::-1]):
        if axis.is_index(io) and _int_value(p) and not any(axis.varies(leaf) for leaf in p.toposort()
                                                           if leaf.op in LEAVES):
            return p, rest, casts
    return None


def rewrite(roots):
    """`roots` (a kernel's STOREs) with its one-hot contraction made a gather, or None where it has none."""
    reduces = {op for root in roots for op in root.toposort() if isinstance(op.op, ReduceOps)}
    if len(reduces) != 1:
        return None
    red = next(iter(reduces))
    if red.op is not ReduceOps.SUM or len(red.arg) != 1:
        return None
    leaf = next((op for op in red.toposort() if op.op in LEAVES), None)
    if leaf is None or not all(isinstance(s, int) for s in leaf.arg.st.shape):
        return None
    axis = _Axis(tuple(leaf.arg.st.shape), red.arg[0])
    found = _match(red, axis)
    if found is None:
        return None
    p, rest, casts = found
    memo: dict[int, LazyOp] = {}

    def cut(op, gather_src=None):
        """op with every leaf's view cut to one element of the axis; `gather_src` set: loads varying along it
        become gathers reading the row `gather_src` names."""
        out = memo.get(id(op))
        if out is not None:
            return out
        if op.op in LEAVES:
            a = op.arg
            if gather_src is not None and axis.varies(op):
                views = a.st.views
                if op.op is not BufferOps.LOAD or len(views) != 1 or \
                        (views[0].mask is not None and tuple(views[0].mask[axis.r]) != (0, axis.shape[axis.r])):
                    raise _NoMatch
                out = LazyOp(BufferOps.LOAD, (gather_src,),
                             GatherBuffer(a.idx, a.dtype, axis.cut(a.st), views[0].strides[axis.r],
                                          axis.shape[axis.r]))
            elif axis.varies(op):
                raise _NoMatch
            elif isinstance(a, ConstBuffer):
                out = LazyOp(op.op, (), ConstBuffer(a.val, a.dtype, axis.cut(a.st)))
            else:
                out = LazyOp(op.op, (), MemBuffer(a.idx, a.dtype, axis.cut(a.st)))
        else:
            out = LazyOp(op.op, tuple(cut(s, gather_src) for s in op.src), op.arg)
        memo[id(op)] = out
        return out

    try:
        new_p = cut(p)
        gathered = cut(rest, new_p)
        for c in reversed(casts):
            gathered = LazyOp(UnaryOps.CAST, (gathered,), c)
        done = {id(red): gathered}

        def rebuild(op):
            hit = done.get(id(op))
            if hit is None:
                hit = done[id(op)] = LazyOp(op.op, tuple(rebuild(s) for s in op.src), op.arg)
            return hit
        return tuple(rebuild(root) for root in roots)
    except _NoMatch:
        return None


class _NoMatch(Exception):
    pass


def lower(lin, op, combo, post, p_val):
    """The linearizer's value of a gathered LOAD `op` at tile position `combo`, given its source's value `p_val`
    (a uop, or one per vector lane)."""
    from tinygrad.codegen.emitter import is_true, lane_base
    from tinygrad.codegen.uops import UOps
    a = op.arg
    idxs = lin._idx_nodes(combo, post)
    idx, valid = a.st.expr_idxs([idxs[i] if s != 1 else NumNode(0) for i, s in enumerate(a.st.shape)])
    if lin._dim_limits:
        valid = lin._limits_valid(valid, idxs)
    em, i32, lane = lin.em, dtypes.int32, lin._lane
    lanes = isinstance(p_val, tuple) or (lane is not None and (lane in idx.vars() or lane in valid.vars()))
    pdt = lin.op_dtypes[id(op.src[0])]

    def offset_and_gate(v_node, p):
        # in range, in p's own type (an int64 index past 2^31 must not wrap into range), then an int32 offset
        ok = em.alu(BinaryOps.CMPLT, dtypes.bool, (p, em.const(a.size, pdt)))
        if not dtypes.is_unsigned(pdt):
            ok = em.alu(BinaryOps.AND, dtypes.bool, (em.alu(BinaryOps.CMPLT, dtypes.bool, (em.const(-1, pdt), p)), ok))
        if not is_true(v_node):
            ok = em.alu(BinaryOps.AND, dtypes.bool, (em.lower_node(v_node), ok))
        row = p if pdt == i32 else em.uop(UOps.CAST, i32, (p,), None)
        # a row out of range reads row 0 (masked): the address stays inside the buffer even where the load is
        # made unconditionally
        row = em.uop(UOps.ALU, i32, (ok, row, em.const(0, i32)), TernaryOps.WHERE)
        return em.alu(BinaryOps.MUL, i32, (row, em.const(a.stride, i32))), ok

    def one(i_node, v_node, p):
        offset, ok = offset_and_gate(v_node, p)
        addr = em.alu(BinaryOps.ADD, i32, (em.lower_node(i_node), offset))
        zero = em.const(dtypes.as_const(0, a.dtype), a.dtype)
        return em.uop(UOps.LOAD, a.dtype, (lin.buf_uops[a.idx], addr, ok, zero), None)

    if not lanes:
        return one(idx, valid, p_val)
    base = lane_base(idx, lane) if lane is not None and not isinstance(p_val, tuple) and \
        lane not in valid.vars() and lin._vec_load_ok(a.dtype) else None
    if base is not None:
        # the lanes read consecutive elements of one row (an embedding's width): one vector load
        offset, ok = offset_and_gate(valid, p_val)
        vdt = a.dtype.vec(lin.vector_width)
        zero = lin._as_vec(em.const(dtypes.as_const(0, a.dtype), a.dtype), a.dtype)
        addr = em.alu(BinaryOps.ADD, i32, (em.lower_node(base), offset))
        return em.uop(UOps.LOAD, vdt, (lin.buf_uops[a.idx], addr, ok, zero), None)
    out = []
    for i in range(lin.vector_width):
        sub = {lane: NumNode(i)} if lane is not None else {}
        out.append(one(idx.substitute(sub) if sub else idx, valid.substitute(sub) if sub else valid,
                       p_val[i] if isinstance(p_val, tuple) else p_val))
    return tuple(out)

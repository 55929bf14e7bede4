"""What the linearizer reads off a kernel's AST (a tree of LazyOps) before lowering it: each op's dtype, the dims of
the full shape its value varies along, and whether a sum's terms vanish where its leaves read zero (PADTO)."""
from tinygrad.dtype import dtypes
from tinygrad.ops import BinaryOps, BufferOps, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.symbolic import NumNode

LEAVES = (BufferOps.LOAD, BufferOps.CONST, BufferOps.IOTA)


def out_dtype(op, dts):
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


def op_dims(roots, reduce_axes):
    """id(op) -> the dims of the full shape along which the op's value can change: a leaf varies along the dims
    with a nonzero (or unknown) stride or a mask, an op along its sources' dims, a reduce not along reduced dims."""
    dims = {}
    red = frozenset(reduce_axes)
    for root in roots:
        for op in root.toposort():
            if id(op) in dims:
                continue
            if op.op in LEAVES:
                st = op.arg.st
                rs = st.real_strides()
                dims[id(op)] = frozenset([i for i, s in enumerate(st.shape) if not is_one(s) and not is_zero(rs[i])])
                for s in op.src:
                    # a gathered load (codegen/gather.py) also varies with the index it reads
                    dims[id(op)] = dims[id(op)] | dims[id(s)]
            elif isinstance(op.op, ReduceOps):
                dims[id(op)] = dims[id(op.src[0])] - red
            else:
                acc = frozenset()
                for s in op.src:
                    acc = acc | dims[id(s)]
                dims[id(op)] = acc
    return dims


def pads_to_zero(red) -> bool:
    """Is every term of the reduction `red` (a kernel's reduce op, or None) zero where every leaf (load, constant,
    index) reads 0, past the end of a padded dim? Then padding a reduced dim leaves the sum as it is."""
    if red is None or red.op is not ReduceOps.SUM:
        return False
    zero = {}
    for op in red.src[0].toposort():
        if op.op in (BufferOps.LOAD, BufferOps.CONST, BufferOps.IOTA):
            z = True
        elif op.op in (UnaryOps.CAST, UnaryOps.NEG, UnaryOps.SQRT):
            z = zero[id(op.src[0])]
        elif op.op is BinaryOps.MUL:
            z = zero[id(op.src[0])] or zero[id(op.src[1])]
        elif op.op in (BinaryOps.ADD, BinaryOps.SUB, BinaryOps.MAX, TernaryOps.WHERE):
            # the last two sources: WHERE's choices (its first is the condition)
            z = all(zero[id(x)] for x in op.src[len(op.src) - 2:])
        else:
            z = False
        zero[id(op)] = z
    return zero[id(red.src[0])]


def is_one(s):
    return isinstance(s, int) and s == 1


def is_zero(s):
    return (isinstance(s, int) and s == 0) or (isinstance(s, NumNode) and s.b == 0)

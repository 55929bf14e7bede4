"""Row kernels: how the linearizer lowers a chain of reduces over the same rows (engine/fuse_rows.py makes them).

softmax's kernel holds max(x), sum(exp(x - max)) and the output row exp(x - max) / sum. Each reduce of the chain is
its own loop over the row (the reduced dims) into its accumulators, in order, each reading the input again and the
accumulators of the reduces before it; what is computed from those accumulators alone (log(sum), rsqrt(var + eps))
is lowered once before the next loop, not once an element. An output over the whole row (`row_tail`: the kernel's
output has the reduce's input shape) is one more loop that computes and stores each element. The input is read once
a loop, inside one kernel: the case of rows too long to keep on chip.

On the CPU a row kernel takes the heuristic's vectors and unrolling along the row, so every loop of it is vectorised;
on a GPU the threads of a block split the row (GROUP, interleaved so neighbouring threads read neighbouring elements),
combine each reduce through shared memory, and each stores its share of an output row. A group of a warp or more (32
to 256 threads a row) takes the block's x threads, so a warp reads one run of the row, and folds its partials in a
tree (`tree_combine`); a row the group does not divide is padded, its padded terms the reduction's identity
(`guard_padding`), so a row of 1001 or 50257 still has a block of threads.
"""
from tinygrad.codegen.ast_facts import LEAVES, is_one
from tinygrad.codegen.emitter import is_true
from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.codegen.uops import VECTOR_DTYPES, UOps
from tinygrad.dtype import dtypes
from tinygrad.helpers import toposort
from tinygrad.ops import BufferOps, ReduceOps, TernaryOps
from tinygrad.shape.symbolic import Node, NumNode


def classify(lin):
    """Set lin.row_tail and lin.row_kernel (several reduces, or an output over the whole row), and for a row tail the
    reduced axes, which the output's shape does not show; check the chain reduces one shape along the same axes."""
    full = lin.full_shape
    lin.row_tail = lin.reduceop is not None and not lin.reduce_axes and \
        any(not is_one(full[a]) for a in lin.reduceop.arg)
    if lin.row_tail:
        lin.reduce_axes = tuple(sorted(lin.reduceop.arg))
    lin.row_kernel = lin.row_tail or len(lin.reduceops) > 1
    if not lin.row_kernel:
        return
    for rop in lin.reduceops:
        shape = None
        for op in rop.toposort():
            if op.op in LEAVES:
                shape = tuple(op.arg.st.shape)
                break
        if shape != tuple(full) or tuple(sorted(rop.arg)) != lin.reduce_axes:
            raise ValueError("a kernel's reduces must reduce the same shape along the same axes")


def row_opts(lin):
    """The Opts of a row kernel: on the CPU, the heuristic's VECTORIZE and UNROLL along the row; on a GPU, GROUP of
    the innermost reduced dim by 256, 128, 64 or 32 threads, the most that leave each thread 4 steps of the row (of
    16-byte vectors where every buffer read is float32 and they divide the row), the row padded to a multiple of the
    group where that does not divide it (1000, 1001, 4097, a vocabulary of 50257), the threads past its end guarded
    (`guard_padding`); a short row of 128 float32 takes a warp (a vector a thread); shorter rows a group of the
    largest power of two up to 64 that divides them (else a thread a row)."""
    if not lin.gpu:
        if lin.opts.has_local:
            return []
        from tinygrad.codegen.opt import choose_opts
        return [o for o in choose_opts(lin) if o.axis in lin.reduce_axes and o.op in (OptOps.VECTORIZE, OptOps.UNROLL)]
    if not getattr(lin.opts, "has_shared", False):
        return []
    axis = max(lin.reduce_axes)
    size = lin.full_shape[axis]
    if not isinstance(size, int):
        return []
    vec = _vector_lanes(lin)
    for g in (256, 128, 64, 32):
        # 16-byte loads: a warp's threads of a row read one run of 128 bytes or more, a load instruction each
        if vec > 1 and size % (vec * g) == 0 and size >= 4 * vec * g:
            return [Opt(OptOps.VECTORIZE, axis, vec), Opt(OptOps.GROUP, axis, g)]
    for g in (256, 128, 64, 32):
        # NOTE: a row no `g` divides is padded to a multiple of it; the threads past its end add the identity
        if size >= 4 * g:
            return [Opt(OptOps.GROUP, axis, g)] if size % g == 0 else [Opt(OptOps.PADTO, axis, g),
                                                                        Opt(OptOps.GROUP, axis, g)]
    if vec > 1 and size % (vec * 32) == 0:
        return [Opt(OptOps.VECTORIZE, axis, vec), Opt(OptOps.GROUP, axis, 32)]  # a warp a short row
    amt = 64
    while amt >= 2 and (size % amt or size < 2 * amt):
        amt //= 2
    return [Opt(OptOps.GROUP, axis, amt)] if amt >= 2 else []


def _vector_lanes(lin):
    """The lanes of a 16-byte vector of what a row kernel's reduces load, where every buffer they read is of a type
    the GPU renderers load as whole vectors (VECTOR_DTYPES: not half, which is read element by element); else 1."""
    size = 0
    for rop in lin.reduceops:
        for op in rop.toposort():
            if op.op is BufferOps.LOAD:
                if op.arg.dtype not in VECTOR_DTYPES:
                    return 1
                size = max(size, op.arg.dtype.itemsize)
    return 16 // size if size else 1


def divides_by_the_row(lin, op, dtype):
    """Is `op` (a DIV of `dtype`) a GPU row kernel's float division of an element of the row by a value the same
    along the whole row (computed from the row's reduces, or a constant)?"""
    if not (lin.gpu and lin.row_kernel and dtypes.is_float(dtype)):
        return False
    rdims = set(lin.reduce_axes)
    return bool(lin.op_dims[id(op.src[0])] & rdims) and not lin.op_dims[id(op.src[1])] & rdims


def guard_padding(lin, val, combo, start, dtype):
    """A reduce's term `val` at tile position `combo`, or the reduction's identity `start` past the end of a padded
    reduced dim (PADTO): there the loads read 0, and exp(0 - max) or a max over zeros is not what the row holds."""
    nodes = lin._idx_nodes(combo, False)
    valid = Node.ands([nodes[d] < lim for d, lim in lin._dim_limits.items() if d in lin.reduce_axes])
    if is_true(valid):
        return val
    ident = lin.em.const(start, dtype)
    scalar = not isinstance(val, tuple) and val.dtype.count == 1
    lane = lin._lane
    if scalar and (lane is None or lane not in valid.vars()):
        return lin.em.uop(UOps.ALU, dtype, (lin.em.lower_node(valid), val, ident), TernaryOps.WHERE)
    # a vector's lanes, each under its own condition
    out = []
    for i in range(lin.vector_width):
        cond = valid if lane is None else valid.substitute({lane: NumNode(i)})
        out.append(lin.em.uop(UOps.ALU, dtype, (lin.em.lower_node(cond), lin._lane_of(val, i), ident),
                              TernaryOps.WHERE))
    return tuple(out)


def lower_row_tail(lin, gcombos, red):
    """The output over the whole row: one more loop over the reduced dims, computing each element from the input and
    the reduces' accumulators (`red`), and storing it."""
    memo = {}
    for root in lin.ast:
        hoist(lin, root.src[0], gcombos, red, memo)
    loops = [lin._loop(i) for i in lin.reduce_axes if lin._loop_vars[i] is not None]
    rcombos = lin._combos(list(lin.reduce_axes))
    for g in gcombos:
        for r in rcombos:
            combo = tuple([r[d] if d in lin.reduce_axes else g[d] for d in range(len(g))])
            for root in lin.ast:
                lin._store(root.arg, combo, lin._lower_ast(root.src[0], combo, False, red, memo), post=False)
    for lp in reversed(loops):
        lin.em.close_scope()
        lin.em.uop(UOps.ENDLOOP, None, (lp,), None, False)


def hoist(lin, root, gcombos, red, memo):
    """Lower, before the next loop over the row opens, the parts of `root` computed from the earlier reduces alone:
    into `memo`, where the loop's lowering finds them. They vary along no reduced dim, so its indices are 0 for them."""
    if not red:
        return
    rdims = frozenset(lin.reduce_axes)
    order = lin._topos.get(id(root))
    if order is None:
        # (as the linearizer's own walk: not into a reduce, whose value is its accumulator)
        order = lin._topos[id(root)] = toposort(root, lambda op: () if isinstance(op.op, ReduceOps) else op.src)
    hoisted = set()
    for op in order:
        if op.op in LEAVES or isinstance(op.op, ReduceOps) or lin.op_dims[id(op)] & rdims:
            continue
        if any(isinstance(s.op, ReduceOps) or id(s) in hoisted for s in op.src):
            hoisted.add(id(op))
    if not hoisted:
        return
    for d in rdims:
        if lin._loop_vars[d] is not None:
            lin.em.bind(lin._loop_vars[d], lin.em.const(0))
    for op in order:
        # the outermost hoisted ops: lowering them lowers (and remembers) what they are made of
        if id(op) in hoisted:
            for g in gcombos:
                lin._lower_ast(op, g, False, red, memo)


def tree_combine(lin, slots, op, dtype):
    """GROUP of a row kernel (32 to 256 threads a row, a power of two): the group's partials, in shared memory (a
    slot per thread, `slots` as linearizer._group_combine makes them, after a barrier), fold in a tree: at each level
    the first half of the group adds the second half's slots into its own, then a barrier; every thread reads the
    row's result from its first thread's slot. log2(group) levels, where reading every partial costs `group` loads
    a thread."""
    stride = lin._group_stride
    zero = lin.em.const(dtypes.as_const(0, dtype), dtype)
    half = lin.group // 2
    while half >= 1:
        active = lin.em.lt(lin._group_idx, lin.em.const(half))
        there = lin.em.add(lin._thread_id, lin.em.const(half * stride))
        for _, _, temps in slots:
            for t in temps:
                # NOTE: not cachable: the same slot holds another value after each barrier
                mine = lin.em.uop(UOps.LOAD, dtype, (t, lin._thread_id, active, zero), None, False)
                other = lin.em.uop(UOps.LOAD, dtype, (t, there, active, zero), None, False)
                lin.em.uop(UOps.STORE, None, (t, lin._thread_id, lin.em.uop(UOps.ALU, dtype, (mine, other), op),
                                              active), None, False)
        lin.em.uop(UOps.BARRIER, None, (), None, False)
        half //= 2
    out = {}
    for key, scalar, temps in slots:
        vals = [lin.em.uop(UOps.LOAD, dtype, (t, lin._base_id), None, False) for t in temps]
        out[key] = vals[0] if scalar else tuple(vals)
    return out

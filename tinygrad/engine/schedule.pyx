# cython: language_level=3
"""The scheduler: turns a graph of LazyBuffers into an ordered list of kernels (ScheduleItems).

Fusion rules:
- every elementwise op is fused into the kernel(s) that consume it, whatever views lie between;
- a reduce is the heart of its own kernel, and the elementwise ops that only it consumes are fused before it;
- an elementwise chain that only consumes one reduce (through reshapes) is fused after it, so `x.sum() / n` is one
  kernel; every kernel holds at most one reduce, except that
- a chain of reduces over the same rows (softmax, layernorm: reduce -> elementwise -> reduce, each read back along
  the row) is one kernel that loops over each row once per reduce (engine/fuse_rows.py);
- attention (scores, their softmax, the product with v) is one kernel with an online softmax
  (engine/fuse_attention.py);
- a sum of a one-hot comparison against the summed axis (an embedding's lookup, Tensor.gather) is a gather, one read
  a value (codegen/gather.py);
- a reduce read only through a cast to a narrower float (a half matmul's float32 sum) stores the cast value;
- LoadOps (COPY, CONTIGUOUS, EMPTY, ...) and the requested outputs always get a buffer of their own;
- an elementwise op seen through a padded view is only fused when every op in it maps zeros to zero.
All graph walks are iterative, so graphs of any depth schedule.
"""
from tinygrad.codegen.gather import rewrite as _gather_rewrite
from tinygrad.engine.fuse_attention import fuse_attention
from tinygrad.engine.fuse_rows import fuse_row_chains
from tinygrad.dtype import dtypes
from tinygrad.helpers import DEBUG
from tinygrad.ops import (BinaryOps, BufferOps, ConstBuffer, LazyOp, LoadOps, MemBuffer, ReduceOps, TernaryOps,
                          UNSAFE_PAD_OPS, UnaryOps)
from tinygrad.shape.shapetracker import ShapeTracker
from tinygrad.shape.symbolic import Node, Variable

_ELEMENTWISE = (UnaryOps, BinaryOps, TernaryOps)
_REDUCE_OPS = frozenset(ReduceOps)


cdef class ScheduleItem:
    """One kernel (or copy) to run: its AST and its buffers, outputs first."""

    def __init__(self, tuple ast, tuple bufs, int n_outputs=1, tuple lbs=()):
        self.ast = ast
        self.bufs = bufs
        self.n_outputs = n_outputs
        self.lbs = lbs

    @property
    def outputs(self):
        return self.bufs[:self.n_outputs]

    @property
    def inputs(self):
        return self.bufs[self.n_outputs:]

    def __repr__(self):
        return f"ScheduleItem(ast={self.ast[0].op}, bufs={len(self.bufs)})"


cdef inline bint _is_elementwise(object op):
    return isinstance(op, _ELEMENTWISE)


cdef inline bint _needs_compute(object lb):
    """A base that is neither realized nor inlined into kernels (a constant or an iota)."""
    return lb.realized is None and lb.op is not LoadOps.CONST and lb.op is not LoadOps.IOTA


cdef bint _masked(object st):
    for v in st.views:
        if v.mask is not None:
            return True
    return False


cdef bint _region_has(object base, set realizes, object ops, dict memo):
    """Whether the region of bases fused with `base` (itself, and the unrealized sources computed in the same
    kernel) holds an op from `ops`. `memo` maps id(base) to answers already known."""
    cdef list stack = [base]
    cdef set seen = set()
    while stack:
        b = stack.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        if id(b) in memo:
            if memo[id(b)]:
                return True
            continue
        if b.op in ops:
            return True
        for s in b.srcs:
            sb = s.base
            if _needs_compute(sb) and id(sb) not in realizes:
                stack.append(sb)
    return False


def create_schedule_with_vars(outs, seen=None):
    """Schedule the LazyBuffers `outs`: returns (list of ScheduleItems in run order, {Variable: value})."""
    if seen is None:
        seen = set()
    # ---- 1. walk the unrealized graph: post-order (sources first) and each base's consumers ----
    cdef list order = []
    cdef dict children = {}          # id(base) -> list of (consumer base, the view it reads through)
    cdef list stack = []
    cdef set visited = set()
    out_bases = []
    for o in outs:
        b = o.base
        if _needs_compute(b) and id(b) not in seen and b not in out_bases:
            out_bases.append(b)
            stack.append((b, False))
    while stack:
        b, done = stack.pop()
        if done:
            order.append(b)
            continue
        if id(b) in visited:
            continue
        visited.add(id(b))
        stack.append((b, True))
        for s in b.srcs:
            sb = s.base
            children.setdefault(id(sb), []).append((b, s))
            if _needs_compute(sb) and id(sb) not in visited and id(sb) not in seen:
                stack.append((sb, False))
        if b.op is LoadOps.CUSTOM:
            # an op with one output per device (a collective, its arg's `outs`): one item computes them all
            for sib in b.arg.outs:
                if _needs_compute(sib) and id(sib) not in visited and id(sib) not in seen:
                    stack.append((sib, False))

    # ---- 2. which bases get a buffer of their own ----
    cdef set realizes = set()
    for b in out_bases:
        realizes.add(id(b))
    for b in order:
        if (isinstance(b.op, LoadOps) and b.op is not LoadOps.IOTA) or isinstance(b.op, ReduceOps) or b.forced_realize:
            realizes.add(id(b))
        if b.op is LoadOps.COPY and _needs_compute(b.srcs[0].base):
            # a copy moves a whole buffer, so its source needs one
            realizes.add(id(b.srcs[0].base))
        if b.op is LoadOps.CUSTOM:
            # so does a collective, with every source
            for s in b.srcs:
                if _needs_compute(s.base):
                    realizes.add(id(s.base))
    cdef dict memo = {}
    for b in order:
        for s in b.srcs:
            sb = s.base
            if s is not sb and _needs_compute(sb) and id(sb) not in realizes and _masked(s.st):
                # fusing through a padded view must not turn the padding into f(0) != 0
                if _region_has(sb, realizes, UNSAFE_PAD_OPS, memo):
                    realizes.add(id(sb))
                memo[id(sb)] = id(sb) in realizes

    # ---- 3. fuse a reduce into the one elementwise chain that consumes it through reshapes ----
    cdef dict fused_reduce = {}      # id(kernel base) -> reduce base fused into it
    # what fusing would recompute too often gets its buffer first, so that a reduce feeding it fuses into its kernel
    # (RMSNorm's factor, 1/sqrt(mean(x^2) + eps), read by every element of the next kernels: the sum and the square
    # root in one kernel, where the root was a kernel of its own after the sum's)
    _realize_expanded_inputs(order, realizes)
    for r in order:
        if not isinstance(r.op, ReduceOps) or r in out_bases or r.forced_realize:
            continue
        cur, target = r, None
        while True:
            ch = children.get(id(cur), [])
            if len(ch) != 1:
                break
            c, view = ch[0]
            if not _is_elementwise(c.op) or not view.st.contiguous or view.size != cur.size:
                break
            if sum(1 for s in c.srcs if s.base is cur) != 1:
                break
            if id(c) in realizes:
                target = c
                break
            cur = c
        # one reduce per kernel: the target's region must not already hold one
        if target is not None and id(target) not in fused_reduce and \
                not _region_has(target, realizes, _REDUCE_OPS, {}):
            realizes.discard(id(r))
            fused_reduce[id(target)] = r
    _store_narrowed_reduces(order, children, realizes, fused_reduce, out_bases)

    # ---- 3b. what fusing would make impossible ----
    _split_wide_kernels(order, realizes, fused_reduce)

    # ---- 3c. a chain of reduces over the same rows (softmax, norms) into one kernel: engine/fuse_rows.py ----
    row_chains = fuse_row_chains(order, children, realizes, fused_reduce, out_bases, MAX_KERNEL_INPUTS)

    # ---- 4. one ScheduleItem per realized base, in dependency order ----
    schedule, var_vals, reads_of = [], {}, []
    for b in order:
        if id(b) not in realizes or id(b) in seen:
            continue  # (seen: an output of a collective lowered with one of its siblings)
        reads = []
        si = _lower(b, realizes, fused_reduce.get(id(b)), row_chains.get(id(b), ()), var_vals, reads)
        schedule.append(si)
        reads_of.append(reads)
        for lb in si.lbs:
            seen.add(id(lb))
    if any(si.lbs[0].op is LoadOps.ASSIGN for si in schedule):
        schedule = _order_assigns(schedule, reads_of)
    # ---- 5. attention's three kernels (scores, softmax, product) into one: engine/fuse_attention.py ----
    schedule = fuse_attention(schedule, {id(b) for b in out_bases})
    # ---- 6. a sum of a one-hot comparison against the summed axis (embeddings, gather) is a gather ----
    schedule = _gather_items(schedule)
    if DEBUG >= 1 and schedule:
        print(f"scheduled {len(schedule)} kernels")
    return schedule, var_vals


# the most buffers one kernel may read: host kernels take at most 64 arguments (outputs and variables included)
MAX_KERNEL_INPUTS = 48


cdef inline bint _computes(object b, set realizes):
    """A base fused into the kernel that reads it: computed, not stored, not inlined."""
    return _needs_compute(b) and id(b) not in realizes


cdef void _unfuse(object b, set realizes, dict fused_reduce):
    realizes.add(id(b))
    for k, r in list(fused_reduce.items()):
        if r is b:
            del fused_reduce[k]


# ops costly enough that computing them once per reader of an expanded view is worse than storing them
_EXPENSIVE = frozenset((UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN, UnaryOps.SQRT))


cdef list _gather_items(list schedule):
    """`schedule` with each kernel item's one-hot contraction made a gather (codegen/gather.py)."""
    cdef list out = None
    for n, si in enumerate(schedule):
        if not si.ast or si.ast[0].op is not BufferOps.STORE:
            continue
        new = _gather_rewrite(si.ast)
        if new is not None:
            if out is None:
                out = list(schedule)
            out[n] = ScheduleItem(new, si.bufs, si.n_outputs, si.lbs)
    return schedule if out is None else out


cdef void _store_narrowed_reduces(list order, dict children, set realizes, dict fused_reduce,
                                  list out_bases) except *:
    """A reduce kept in a buffer of its own and read only through a cast to a narrower float (a half matmul's
    float32 sum, cast back to half) stores the cast value: every reader casts it anyway, so the values read are the
    same, in half the bytes, and a matmul reading it gets half operands (tensor cores) instead of float32 ones
    converted as they are loaded."""
    for r in order:
        if not isinstance(r.op, ReduceOps) or id(r) not in realizes or r in out_bases or r.forced_realize or \
                not dtypes.is_float(r.dtype):
            continue
        ch = children.get(id(r), [])
        if len(ch) != 1:
            continue
        c, view = ch[0]
        if c.op is not UnaryOps.CAST or not view.st.contiguous or view.size != r.size or len(c.srcs) != 1 or \
                not dtypes.is_float(c.dtype) or c.dtype.itemsize >= r.dtype.itemsize or id(c) in realizes:
            continue
        realizes.discard(id(r))
        realizes.add(id(c))
        fused_reduce[id(c)] = r


cdef void _realize_expanded_inputs(list order, set realizes) except *:
    """An elementwise result that a reduce reads through an expanding view (a matmul's operand, a convolution's
    window) would be computed again for every element that reads it: a GELU fused into the next matmul runs once
    per output column. Such results get a buffer of their own when they hold a costly op (cheap ones, like the
    one-hot comparison of an index, are cheaper to recompute than to store)."""
    for r in order:
        if not isinstance(r.op, ReduceOps):
            continue
        stack, seen = [r], set()
        while stack:
            b = stack.pop()
            if id(b) in seen:
                continue
            seen.add(id(b))
            for s in b.srcs:
                sb = s.base
                if not _computes(sb, realizes) or isinstance(sb.op, ReduceOps):
                    continue
                if s is not sb and _is_elementwise(sb.op) and isinstance(s.size, int) and \
                        isinstance(sb.size, int) and s.size > sb.size and _region_has(sb, realizes, _EXPENSIVE, {}):
                    realizes.add(id(sb))  # (before reduces fuse: nothing fused into it to undo)
                else:
                    stack.append(sb)


cdef int _count_inputs(object b, set realizes, list largest=None) except -1:
    """How many buffers the kernel storing base `b` reads; with `largest`, the most elements of one of them is
    appended to it."""
    cdef set inputs = set()
    cdef set seen = set()
    most = 0
    stack = [b]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        for s in (x.srcs[:1] if x.op is LoadOps.ASSIGN else x.srcs):
            sb = s.base
            if _computes(sb, realizes):
                stack.append(sb)
            elif sb.op is not LoadOps.CONST and sb.op is not LoadOps.IOTA or sb.realized is not None:
                inputs.add(id(sb))
                if isinstance(sb.size, int) and sb.size > most:
                    most = sb.size
    if largest is not None:
        largest.append(most)
    return len(inputs)


cdef void _split_wide_kernels(list order, set realizes, dict fused_reduce) except *:
    """A kernel fusing more than MAX_KERNEL_INPUTS buffers (a long chain of residual additions, a concatenation of
    many tensors) stores the fused parts it computes from first, until every kernel fits."""
    changed = True
    while changed:
        changed = False
        for b in order:
            if id(b) not in realizes or isinstance(b.op, LoadOps) and b.op is not LoadOps.ASSIGN:
                continue
            largest = []
            if _count_inputs(b, realizes, largest) <= MAX_KERNEL_INPUTS:
                continue
            for sb in _parts_to_store(b, realizes, max(largest[0], b.size) if isinstance(b.size, int) else None):
                _unfuse(sb, realizes, fused_reduce)
                changed = True


cdef list _parts_to_store(object b, set realizes, object limit):
    """The fused bases that a kernel too wide stores first: its sources, except that one larger than `limit`
    elements (larger than the kernel's output and every buffer it reads) is passed through for its own sources.
    NOTE: that is a matmul's product before its sum, as large as tokens x in x out (38.6 GB in a GPT-2-small
    layer at 4096 tokens, where the residual stream it is computed from made the kernel too wide): storing the
    residual stream is cheap and the product is never materialized. Where only such bases are found, they are
    stored after all, so the kernel still gets narrower."""
    direct = [s.base for s in (b.srcs[:1] if b.op is LoadOps.ASSIGN else b.srcs) if _computes(s.base, realizes)]
    if limit is None:
        return direct
    cdef list found = []
    cdef set seen = set()
    stack = list(direct)
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x.size, int) and x.size > limit and _is_elementwise(x.op):
            stack.extend(s.base for s in x.srcs if _computes(s.base, realizes))
        else:
            found.append(x)
    return found if found else direct


cdef list _order_assigns(list items, list reads_of):
    """Reorder so every kernel that reads a buffer's old value runs before the ASSIGN that overwrites it."""
    import heapq
    producer = {}
    for i, it in enumerate(items):
        for lb in it.lbs:
            producer[id(lb)] = i
    deps = [set() for _ in items]
    for i, reads in enumerate(reads_of):
        for b in reads:
            j = producer.get(id(b))
            if j is not None and j != i:
                deps[i].add(j)
    for i, it in enumerate(items):
        lb = it.lbs[0]
        if lb.op is LoadOps.ASSIGN:
            target = lb.srcs[1]
            # an assign onto a pending assign (two writes through views of one buffer) runs after it
            j = producer.get(id(target))
            if j is not None and j != i:
                deps[i].add(j)
            for k, reads in enumerate(reads_of):
                if k != i and any(b is target for b in reads):
                    deps[i].add(k)
    users = [[] for _ in items]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    waiting = [len(d) for d in deps]
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(items[i])
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(out) != len(items):
        raise RuntimeError("assign cycle: this graph reads a buffer both before and after assigning to it: realize "
                           "the reads of the old value before the assign")
    return out


def create_schedule(outs, seen=None):
    """Schedule the LazyBuffers `outs`; the kernels must not use symbolic variables (else use the _with_vars form)."""
    schedule, var_vals = create_schedule_with_vars(outs, seen)
    if var_vals:
        raise RuntimeError(f"schedule has bound variables {var_vals}: use create_schedule_with_vars")
    return schedule


cdef object _lower(object out, set realizes, object fused_reduce, object chain, dict var_vals, list reads):
    """The ScheduleItem that computes base `out`; the bases it reads are appended to `reads`. `chain`: the reduces
    over the same rows fused into it besides `fused_reduce` (engine/fuse_rows.py)."""
    op = out.op
    if op is LoadOps.COPY:
        src = out.srcs[0].base
        reads.append(src)
        return ScheduleItem((LazyOp(LoadOps.COPY, (), out.arg),), (out.buffer, src.buffer), 1, (out,))
    if op is LoadOps.EMPTY or (isinstance(out.size, int) and out.size == 0):
        # nothing to compute: the buffer only needs to exist
        return ScheduleItem((LazyOp(LoadOps.EMPTY, (), None),), (out.buffer,), 1, (out,))
    if op is LoadOps.CUSTOM:
        # one item over every device's output and input buffers (whole, contiguous bases), run by the runner the
        # arg makes (engine/realize.py); e.g. an NCCL collective (runtime/nccl.py)
        outs = tuple(out.arg.outs)
        srcs = [s.base for s in out.srcs]
        reads.extend(srcs)
        return ScheduleItem((LazyOp(LoadOps.CUSTOM, (), out.arg),), tuple(o.buffer for o in outs) +
                            tuple(s.buffer for s in srcs), len(outs), outs)

    # an ASSIGN through a view (its arg) computes the view's elements and stores them through it
    written = out.arg if op is LoadOps.ASSIGN and out.arg is not None else None
    oshape = written.shape if written is not None else out.shape
    # the kernel's index space: the reduce's shape when a reduce is fused in, else the output's
    kshape = fused_reduce.shape if fused_reduce is not None else oshape
    outer = None if kshape == oshape else ShapeTracker.from_shape(kshape)
    inputs = {}           # id(base) -> buffer index
    bufs = [out.buffer]
    # the reduces computed in this kernel: their sources are read in the frame of the reduce's input
    fused = {id(r) for r in chain}
    if fused_reduce is not None:
        fused.add(id(fused_reduce))
    root = _build(out, outer, out, realizes, fused_reduce, fused, inputs, bufs, var_vals, reads)
    if written is not None:
        st_out, vv = _unbind(written)
        var_vals.update(vv)
    else:
        st_out = ShapeTracker.from_shape(out.shape)
    if outer is not None:
        st_out = st_out.reshape(kshape)
    store = LazyOp(BufferOps.STORE, (root,), MemBuffer(0, out.dtype, st_out))
    return ScheduleItem((store,), tuple(bufs), 1, (out,))


cdef object _leaf(object base, object st, object out, set realizes, object fused_reduce, dict inputs, list bufs,
                  dict var_vals, list reads):
    """The LOAD/CONST for reading `base` through `st`, or None when `base` is fused into this kernel."""
    if base.op is LoadOps.CONST and base.realized is None:
        st, vv = _unbind(st)
        var_vals.update(vv)
        val = base.arg
        if isinstance(val, Variable):
            # a symbolic value: the kernel takes its variables as arguments
            val, x = val.unbind()
            var_vals[val] = x
        elif isinstance(val, Node):
            val, vv = val.unbind()
            var_vals.update(vv)
        return LazyOp(BufferOps.CONST, (), ConstBuffer(val, base.dtype, st))
    if base.op is LoadOps.IOTA and base.realized is None:
        st, vv = _unbind(st)
        var_vals.update(vv)
        return LazyOp(BufferOps.IOTA, (), ConstBuffer(0, base.dtype, st))
    if base is out or base is fused_reduce or (base.realized is None and id(base) not in realizes):
        return None
    idx = inputs.get(id(base))
    if idx is None:
        reads.append(base)
        if base.buffer is bufs[0]:
            # an in-place update reads the memory it writes: one argument, or the C kernel would alias restrict
            # pointers
            idx = inputs[id(base)] = 0
        else:
            idx = inputs[id(base)] = len(bufs)
            bufs.append(base.buffer)
    st, vv = _unbind(st)
    var_vals.update(vv)
    return LazyOp(BufferOps.LOAD, (), MemBuffer(idx, base.dtype, st))


cdef tuple _unbind(object st):
    if not st.var_vals:
        return st, {}
    return st.unbind()


cdef object _build(object out, object outer, object kout, set realizes, object fused_reduce, set fused,
                   dict inputs, list bufs, dict var_vals, list reads):
    """The AST computing base `out` at every index of the kernel (`outer` maps kernel indices onto `out`)."""
    # frames are (base, st): st maps kernel indices to the base's elements (None: the identity)
    cdef dict built = {}
    cdef list stack = [(out, outer, False)]
    while stack:
        base, st, expanded = stack.pop()
        key = (id(base), st)
        if key in built:
            continue
        child_keys = []
        # an ASSIGN computes its first source; the second (the target) only orders it after the target's readers
        for s in (base.srcs[:1] if base.op is LoadOps.ASSIGN else base.srcs):
            if id(base) in fused:
                cst = s.st if not s.st.contiguous or s.shape != s.base.shape else None
            elif st is None:
                cst = s.st if not (s.st.contiguous and s.shape == s.base.shape) else None
            else:
                cst = s.st + st
            child_keys.append((s.base, cst))
        if not expanded:
            stack.append((base, st, True))
            for sb, cst in child_keys:
                if (id(sb), cst) in built:
                    continue
                leaf = _leaf(sb, cst if cst is not None else ShapeTracker.from_shape(sb.shape), kout, realizes,
                             fused_reduce, inputs, bufs, var_vals, reads)
                if leaf is not None:
                    built[(id(sb), cst)] = leaf
                else:
                    stack.append((sb, cst, False))
            continue
        src_ops = tuple(built[(id(sb), cst)] for sb, cst in child_keys)
        # CONTIGUOUS and ASSIGN are just their source, stored
        built[key] = src_ops[0] if base.op is LoadOps.CONTIGUOUS or base.op is LoadOps.ASSIGN else \
            LazyOp(base.op, src_ops, base.arg)
    return built[(id(out), outer)]


"""Row-chain fusion: a chain of reduces over the same rows becomes one kernel (the scheduler's step 3c).

softmax is max(x) -> sum(exp(x - max)) -> exp(x - max) / sum; layernorm is mean(x) -> mean((x - mean)^2) -> the
normalised row; logsumexp and cross-entropy are such chains too. Each reduce is realized by the scheduler's rules,
so each would be a kernel and a pass over memory. A reduce R is fused into the kernel K that reads it when:

- R is not an output, not forced to a buffer, and every reader of R is computed in K's kernel;
- R reduces a row shape F (its input's shape) along the same axes as the kernel's other reduces, and K iterates
  over F (its output has shape F) or over F's rows (K has a reduce of F fused in, or is one);
- every path from K down to R goes through views that keep the row: the identity (a contiguous view of the same
  size) or R's output broadcast back along the reduced axes to F;
- R is read back along the row (broadcast to F) at least once: two independent reductions of the same rows stay
  two kernels.

The linearizer then lowers each reduce of the chain as a loop over the row into an accumulator, in order, each
loop reading the input again and the earlier reduces' accumulators (codegen/linearizer.py). Applied repeatedly,
so a chain of any length (cross-entropy's max -> sum -> sum of the picked log-probabilities) becomes one kernel.
"""
from tinygrad.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.shapetracker import ShapeTracker

_ELEMENTWISE = (UnaryOps, BinaryOps, TernaryOps)


def _computed(b, realizes) -> bool:
    """A base fused into the kernel that reads it (neither stored, nor a constant or an iota inlined)."""
    return b.realized is None and b.op is not LoadOps.CONST and b.op is not LoadOps.IOTA and id(b) not in realizes


def _reduced_shape(shape, axes):
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def _keeps_row(view, src, frame, axes) -> bool:
    """Whether reading base `src` through `view` keeps the row: the identity, or src's row broadcast to `frame`."""
    if view.st.contiguous and view.size == src.size:
        return True
    if tuple(view.shape) != tuple(frame) or tuple(src.shape) != _reduced_shape(frame, axes):
        return False
    want = ShapeTracker.from_shape(tuple(src.shape)).expand(tuple(frame))
    return view.st == want


def _region(k, lead, chain, realizes):
    """The bases computed in K's kernel: K, its fused reduce, the chain's reduces, and the bases they compute from."""
    out, stack = {}, [k] + ([lead] if lead is not None else []) + list(chain)
    while stack:
        b = stack.pop()
        if id(b) in out:
            continue
        out[id(b)] = b
        for s in b.srcs[:1] if b.op is LoadOps.ASSIGN else b.srcs:
            if _computed(s.base, realizes):
                stack.append(s.base)
    return out


def _frame(k, lead):
    """(the row shape F, the reduced axes) of K's kernel, or None when K iterates over no rows yet (elementwise)."""
    r = lead if lead is not None else (k if isinstance(k.op, ReduceOps) else None)
    if r is None:
        return None
    return tuple(r.srcs[0].shape), tuple(r.arg)


def _inputs(region, realizes):
    """How many buffers the kernel of `region` reads."""
    out = set()
    for b in region.values():
        for s in b.srcs[:1] if b.op is LoadOps.ASSIGN else b.srcs:
            sb = s.base
            if id(sb) in region or (sb.realized is None and (sb.op is LoadOps.CONST or sb.op is LoadOps.IOTA)):
                continue
            if sb.realized is not None or id(sb) in realizes:
                out.add(id(sb))
    return len(out)


def _try_fuse(c, r, k, lead, chain, frame, realizes, children, max_inputs):
    """Whether kernel `c` (reduce `r` itself, or an elementwise base with `r` fused in) may join K's kernel; see the
    module docstring."""
    if c.forced_realize or r.forced_realize or not r.srcs:
        return False
    shape, axes = frame
    if tuple(r.srcs[0].shape) != shape or tuple(r.arg) != axes:
        return False
    if c is not r and tuple(c.shape) != _reduced_shape(shape, axes):
        return False
    region = _region(k, lead, chain + [r, c], realizes - {id(c)})
    if _inputs(region, realizes - {id(c)}) > max_inputs:
        return False
    # the bases whose value depends on a chain reduce: every read of them must keep the row
    tainted = _depends_on(region, {id(x) for x in chain} | {id(r)})
    for tid in tainted:
        b = region.get(tid)
        if b is None or b is k:
            continue
        for reader, view in children.get(tid, []):
            if id(reader) not in region or not _keeps_row(view, b, shape, axes):
                return False
    # a chain, not siblings: c's value is read back along the row (by a later reduce's input or the row's output),
    # else the kernels are independent reductions that the GPU's own plans serve better apart
    for tid in _depends_on(region, {id(r), id(c)}):
        b = region.get(tid)
        if b is not None and b is not k and any(id(reader) in region and tuple(view.shape) == shape and
                                                view.size != b.size for reader, view in children.get(tid, [])):
            return True
    return False


def _depends_on(region, roots):
    """The ids of the bases of `region` whose value depends on a base in `roots` (those included): one iterative
    post-order walk, so deep graphs cost their size."""
    out = set(roots)
    done = set()
    for start in region.values():
        stack = [(start, False)]
        while stack:
            b, expanded = stack.pop()
            if id(b) in done:
                continue
            if expanded:
                done.add(id(b))
                if any(id(s.base) in out for s in b.srcs if id(s.base) in region):
                    out.add(id(b))
                continue
            stack.append((b, True))
            for s in b.srcs:
                if id(s.base) in region and id(s.base) not in done:
                    stack.append((s.base, False))
    return out


def _candidates(region, realizes, fused_reduce, outs, k):
    """The kernels K's region reads that could join it: (the kernel's base, its reduce), for a realized reduce, or an
    elementwise base with a reduce fused in (realized for its costly ops, as log(sum) in log_softmax)."""
    out, ids = [], set()
    for b in region.values():
        for s in b.srcs:
            sb = s.base
            if id(sb) in ids or id(sb) not in realizes or sb.realized is not None or id(sb) in outs or sb is k:
                continue
            if isinstance(sb.op, ReduceOps):
                out.append((sb, sb))
                ids.add(id(sb))
            elif isinstance(sb.op, _ELEMENTWISE) and id(sb) in fused_reduce:
                out.append((sb, fused_reduce[id(sb)]))
                ids.add(id(sb))
    return out


def fuse_row_chains(order, children, realizes, fused_reduce, out_bases, max_inputs):
    """Fuse reduce chains into the kernels that read them: removes each fused kernel from `realizes` (and
    `fused_reduce`) and returns {id(kernel base): [the reduces fused in]} (the linearizer orders them). `children`
    maps id(base) to its (reader, view) pairs; `fused_reduce` maps id(kernel base) to the reduce the scheduler already
    fused into it (step 3). A kernel reads at most `max_inputs` buffers."""
    outs = {id(b) for b in out_bases}
    chains = {}
    for k in reversed(order):
        if id(k) not in realizes or not _kernel_kind(k.op) or id(k) in chains:
            continue
        lead = fused_reduce.get(id(k))
        frame = _frame(k, lead)
        chain = []
        grown = True
        while grown:
            grown = False
            region = _region(k, lead, chain, realizes)
            for c, r in _candidates(region, realizes, fused_reduce, outs, k):
                f = frame
                if f is None:
                    # an elementwise K over rows: its shape is the row shape, the reduce gives the axes
                    f = (tuple(k.shape), tuple(r.arg))
                    if not r.srcs or tuple(r.srcs[0].shape) != f[0]:
                        continue
                if _try_fuse(c, r, k, lead, chain, f, realizes, children, max_inputs):
                    frame = f
                    chain.append(r)
                    realizes.discard(id(c))
                    fused_reduce.pop(id(c), None)
                    grown = True
                    break
        if chain:
            chains[id(k)] = chain
    return chains


def _kernel_kind(op) -> bool:
    """Whether a kernel storing an op of this kind may take a chain (not a copy, an assign or another LoadOp)."""
    return isinstance(op, _ELEMENTWISE) or isinstance(op, ReduceOps)

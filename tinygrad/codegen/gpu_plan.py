"""How the GPU render loop spreads a loop-only kernel over the GPU: which loops become the grid (one thread per output
element, a block per output row, or the whole grid on one big reduction), and which loads and stores can move 16
bytes at a time. Pure analysis of the uops, the same for every GPU language; `renderer/gpu.py` writes the code it
plans.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from tinygrad.codegen.uops import UOp, UOps
from tinygrad.dtype import dtypes
from tinygrad.ops import BinaryOps

_PURE = (UOps.CONST, UOps.ALU, UOps.CAST, UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR)
# reductions with at most this many outputs (at the variables' maxima) and at least REDUCE_MIN inputs per output
# get a block per output instead of a thread per output
BLOCK_REDUCE_MAX_OUTPUTS = 16384
BLOCK_REDUCE_MIN_INPUTS = 256
# a single output of at least this many inputs is reduced by the whole grid (the last block to finish folds the
# blocks' partial results), in blocks of THREADS, each thread taking at least GRID_REDUCE_PER_THREAD inputs; the
# runtime launches fewer blocks than written where fewer fit on the GPU at once (ProgramSpec.persistent)
GRID_REDUCE_MIN_INPUTS = 1 << 16
GRID_REDUCE_PER_THREAD = 16
GRID_REDUCE_MAX_BLOCKS = 2048
THREADS = 256
MAX_GRID = 1 << 17
# loads and stores that run along a flat loop move VEC_BYTES per access (one 128-bit instruction), and each thread of
# a reduction has VEC_UNROLL of them in flight: a streaming kernel needs both to come near the memory's bandwidth
# (an elementwise kernel gets a thread per vector instead, which measured as fast, with a third of the code)
VEC_BYTES = 16
VEC_UNROLL = 4
# a reduction's vectors are as wide as its narrowest operand's 16 bytes (a matrix-vector product over int8 weights
# and a float32 vector moves 16 weights a step: 16 bytes of them and 64 of the vector, in four 16-byte loads), up to
# this many elements; wider vectors are aligned to 16 bytes, the widest access there is
MAX_LANES = 16
# a reduction with at most WARP_MAX_STEPS vectors an output gets a warp per output ("warps"), combining with shuffles
# alone: a block per output would leave most of its threads idle and wait at two barriers for short rows (a 640-wide
# row of a 270M model's matrices is 40 vectors of int8). Measured on the H100: the 262,144 x 640 Q8_0 output
# projection of Gemma 3 270M went from 738 us (a thread per 4 rows, byte loads) to 189 us.
WARP_MAX_STEPS = 256
# a warp lane's elements in flight per step of a row (its unrolled vectors): all of a row's vectors where they fit
WARP_ELEMS = 64

@dataclass
class _Vec:
    """A flat nest whose body is rendered for one element and run `width` elements at a time: `loads` and `stores`
    index their buffers at the flat index plus a loop-invariant `offsets[id(uop)]` (affine terms), so they move out
    of the body as whole vectors where every such pointer is aligned (the rest go one element at a time). `unroll`:
    vectors a thread loads together."""
    width: int
    loads: list[UOp]
    stores: list[UOp]
    offsets: dict[int, dict]
    unroll: int = 1


@dataclass
class _Parallel:
    """How a loop-only kernel is spread over the GPU: `mode` is "threads" (each output element to one thread of a
    grid-stride loop), "blocks" (each output to one block, its reduction across the block's threads), "warps" (each
    output to one warp, its reduction across the warp's lanes), "grid" (one output, its reduction across all threads
    of the grid) or "single". `vec`: the vectorised nests, by the id of
    their innermost loop."""
    mode: str = "single"
    global_loops: list = field(default_factory=list)
    reduce_loops: list = field(default_factory=list)
    acc: UOp | None = None
    reduce_op: object = None
    grid: int = 1
    block: int = 1
    vec: dict = field(default_factory=dict)


def _depends_on_loop(u: UOp, memo: dict[int, bool]) -> bool:
    stack, order = [u], []
    while stack:
        x = stack.pop()
        if id(x) in memo:
            continue
        order.append(x)
        stack.extend(v for v in x.vin if id(v) not in memo)
    for x in reversed(order):
        if id(x) not in memo:
            memo[id(x)] = x.uop is UOps.LOOP or any(memo.get(id(v), False) for v in x.vin)
    return memo[id(u)]


def _eval_max(u: UOp) -> int | None:
    """The value of an int uop with every variable at its maximum (loop bounds grow with them), or None."""
    if u.uop is UOps.CONST:
        return int(u.arg)
    if u.uop is UOps.DEFINE_VAR:
        return int(u.arg.max)
    if u.uop is UOps.ALU and len(u.vin) == 2:
        a, b = _eval_max(u.vin[0]), _eval_max(u.vin[1])
        if a is None or b is None:
            return None
        ops = {BinaryOps.ADD: lambda: a + b, BinaryOps.SUB: lambda: a - b, BinaryOps.MUL: lambda: a * b,
               BinaryOps.DIV: lambda: int(a / b) if b else None, BinaryOps.MAX: lambda: max(a, b),
               BinaryOps.MOD: lambda: math.fmod(a, b) if b else None}
        fn = ops.get(u.arg)
        return None if fn is None or fn() is None else int(fn())
    return None


def _affine(u: UOp, memo: dict[int, dict | None]) -> dict | None:
    """An int uop as {id(term): coefficient}, its terms LOOP and DEFINE_VAR uops and None for the constant; None
    where it is not a sum of integer multiples of those."""
    if id(u) in memo:
        return memo[id(u)]
    out = None
    if u.uop is UOps.CONST and dtypes.is_int(u.dtype):
        out = {None: int(u.arg)}
    elif u.uop in (UOps.LOOP, UOps.DEFINE_VAR):
        out = {id(u): 1}
    elif u.uop is UOps.ALU and len(u.vin) == 2 and u.arg in (BinaryOps.ADD, BinaryOps.SUB, BinaryOps.MUL):
        a, b = _affine(u.vin[0], memo), _affine(u.vin[1], memo)
        if a is not None and b is not None and u.arg is BinaryOps.MUL:
            if set(a) <= {None}:
                a, b = b, a
            out = {t: c * b.get(None, 0) for t, c in a.items()} if set(b) <= {None} else None
        elif a is not None and b is not None:
            out = dict(a)
            for t, c in b.items():
                out[t] = out.get(t, 0) + (c if u.arg is BinaryOps.ADD else -c)
    memo[id(u)] = out
    return out


def vector_width(itemsize: int) -> int:
    """Elements a vector holds when it is 16 bytes of elements of `itemsize` bytes (at most MAX_LANES)."""
    return min(MAX_LANES, VEC_BYTES // itemsize)


def _plan_vector(uops: list[UOp], nest: list[UOp], memo: dict, narrowest: bool = False) -> _Vec | None:
    """Which loads and stores of the flat nest's body run along it (see _Vec), or None if none do or the body is
    not safe to split into elements that way. Vectors are 16 bytes of the widest operand, or with `narrowest` of the
    narrowest (at most MAX_LANES elements)."""
    lo = next(i for i, u in enumerate(uops) if u is nest[-1])
    hi = next(i for i in range(lo + 1, len(uops)) if uops[i].uop is UOps.ENDLOOP and uops[i].vin[0] is nest[-1])
    extents = [_affine(lp.vin[1], memo) for lp in nest]
    if any(e is None or (k and set(e) - {None}) for k, e in enumerate(extents)):
        return None  # the flat index is row-major in the extents: all but the outermost must be constants
    strides = [math.prod(e[None] for e in extents[k + 1:]) for k in range(len(nest))]
    loads, stores, loaded, stored, offsets = [], [], set(), [], {}
    # an offset must be known before the nest opens: made of variables, loops around the nest and constants
    outer = {id(u) for u in uops[:lo] if u.uop in (UOps.LOOP, UOps.DEFINE_VAR)}

    def offset(idx: UOp) -> dict | None:
        aff = _affine(idx, memo)
        if aff is None:
            return None
        aff = dict(aff)
        if any(aff.pop(id(lp), 0) != s for lp, s in zip(nest, strides)):
            return None
        return aff if all(t is None or t in outer for t in aff) else None

    for u in uops[lo + 1:hi]:
        if u.uop in (UOps.LOOP, UOps.BARRIER, UOps.DEFINE_LOCAL, UOps.SPECIAL):
            # an inner loop (a matmul's, say) reads strided memory that only a thread per element keeps coalesced
            return None
        if u.uop is UOps.LOAD:
            loaded.add(id(u.vin[0]))
            if len(u.vin) == 2 and (off := offset(u.vin[1])) is not None:
                loads.append(u)
                offsets[id(u)] = off
                continue
            # a load left in the body reads, for a thread's consecutive elements, what neighbouring threads would:
            # fine where those are next to each other or the same (a broadcast), not where they are strided
            aff = _affine(u.vin[1], memo)
            if aff is None or abs(aff.get(id(nest[-1]), 0)) > 1:
                return None
        elif u.uop is UOps.STORE:
            stored.append(id(u.vin[0]))
            if len(u.vin) == 3 and (off := offset(u.vin[1])) is not None:
                stores.append(u)
                offsets[id(u)] = off
    stores = [s for s in stores if stored.count(id(s.vin[0])) == 1]
    if loaded & set(stored) or not (loads or stores):
        return None  # a buffer written and read in one body keeps its order only one element at a time
    sizes = [u.vin[0].dtype.base.itemsize for u in loads + stores]
    width = vector_width(min(sizes) if narrowest else max(sizes))
    return _Vec(width, loads, stores, offsets) if width > 1 else None


def _nest(uops: list[UOp], start: int, memo: dict[int, bool]) -> tuple[list[UOp], int]:
    """The perfect nest of loops from position `start`: consecutive LOOPs starting at 0 with only loop-independent
    arithmetic between them. Returns the loops and the position after the last one."""
    loops, i, last = [], start, start
    while i < len(uops):
        u = uops[i]
        if u.uop is UOps.LOOP:
            if not (u.vin[0].uop is UOps.CONST and u.vin[0].arg == 0) or _depends_on_loop(u.vin[1], memo):
                break
            loops.append(u)
            last = i + 1
        elif u.uop not in _PURE or _depends_on_loop(u, memo):
            break
        i += 1
    return loops, last


def _closes_last(uops: list[UOp], loops: list[UOp], end: int) -> bool:
    """Do the ENDLOOPs of `loops` (innermost first) sit together, ending right before position `end`?"""
    tail = uops[end - len(loops):end]
    return len(tail) == len(loops) and all(t.uop is UOps.ENDLOOP and t.vin[0] is lp
                                           for t, lp in zip(tail, reversed(loops)))


def _plan_reduce(uops: list[UOp], plan: _Parallel, after: int, outputs: int, memo: dict, grid_reduce: bool) -> bool:
    """A block per output, or the whole grid for one output (where `grid_reduce`): DEFINE_ACC, a perfect nest of
    reduce loops whose PHI folds with ADD/MAX/MUL, then the rest. Fills `plan` and returns True where the kernel has
    that form."""
    accs = [i for i, u in enumerate(uops) if u.uop is UOps.DEFINE_ACC]
    if len(accs) != 1 or accs[0] < after or not all(u.uop in _PURE for u in uops[after:accs[0]]):
        return False
    red, red_after = _nest(uops, accs[0] + 1, memo)
    phi = uops[red_after] if red and red_after < len(uops) else None
    while phi is not None and phi.uop is not UOps.PHI and red_after < len(uops) - 1:
        red_after += 1
        phi = uops[red_after]
    if not (red and phi is not None and phi.uop is UOps.PHI and phi.vin[0] is uops[accs[0]] and len(phi.vin) == 3
            and phi.vin[2] is red[-1] and phi.vin[1].uop is UOps.ALU and len(phi.vin[1].vin) == 2
            and phi.vin[1].vin[1] is phi.vin[0] and phi.vin[1].arg in (BinaryOps.ADD, BinaryOps.MAX, BinaryOps.MUL)
            and _closes_last(uops, red, red_after + 1 + len(red))):
        return False
    inputs = math.prod(_eval_max(lp.vin[1]) or 0 for lp in red)
    if grid_reduce and not plan.global_loops and inputs >= GRID_REDUCE_MIN_INPUTS:
        plan.mode, plan.block = "grid", THREADS
        plan.grid = max(2, min(GRID_REDUCE_MAX_BLOCKS, inputs // (THREADS * GRID_REDUCE_PER_THREAD)))
    elif 0 < outputs and inputs >= BLOCK_REDUCE_MIN_INPUTS and \
            (outputs <= BLOCK_REDUCE_MAX_OUTPUTS or inputs <= WARP_MAX_STEPS * MAX_LANES):
        # "warps" or "blocks": _plan_parallel chooses once it knows the vectors' width
        plan.mode, plan.block = "blocks", 1024 if outputs < 128 else THREADS
        plan.grid = min(outputs, MAX_GRID)
    else:
        return False
    plan.reduce_loops, plan.acc, plan.reduce_op = red, uops[accs[0]], phi.vin[1].arg
    return True


def _plan_parallel(uops: list[UOp], warp: int = 32, grid_reduce: bool = True, vectors: bool = True) -> _Parallel:
    """The plan for a loop-only kernel on a GPU whose warps have `warp` threads. A language without device variables
    at module scope (Metal) asks for no `grid_reduce` (one big reduction then takes a block); one whose pointer casts
    the render loop cannot spell asks for no `vectors`."""
    memo: dict[int, bool] = {}
    start = next((i for i, u in enumerate(uops) if u.uop not in (UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR)), len(uops))
    glob, after = _nest(uops, start, memo)
    if glob and not _closes_last(uops, glob, len(uops)):
        glob, after = [], start
    outputs = math.prod(_eval_max(lp.vin[1]) or 0 for lp in glob) if glob else 1
    plan = _Parallel(global_loops=glob)
    affine: dict = {}
    if _plan_reduce(uops, plan, after, outputs, memo, grid_reduce):
        vec = _plan_vector(uops, plan.reduce_loops, affine, narrowest=True) if vectors else None
        if vec is not None:
            vec.unroll = VEC_UNROLL
            plan.vec[id(plan.reduce_loops[-1])] = vec
        inputs = math.prod(_eval_max(lp.vin[1]) or 0 for lp in plan.reduce_loops)
        if plan.mode == "blocks" and -(-inputs // (vec.width if vec is not None else 1)) <= WARP_MAX_STEPS:
            warps = max(1, THREADS // warp)
            plan.mode, plan.block = "warps", THREADS if outputs >= warps else warp * outputs
            if vec is not None:
                # every vector of a lane's row in flight at once where they fit in WARP_ELEMS, and no more steps
                # than it has (each step's registers count against the warps a multiprocessor holds). Measured on
                # an H100 (Gemma 3 270M decode, ncu): the 262,144 x 640 int8 output projection took 196 us with 4
                # steps of 16, 125 with 2, 108 with 5 of 4 (_warp_width); the step's kernels 1324 -> 1264 us
                vec.width = _warp_width(inputs, vec.width, warp)
                steps = -(-inputs // vec.width)
                vec.unroll = max(1, min(-(-steps // warp), WARP_ELEMS // vec.width))
            plan.grid = max(1, min(-(-outputs // warps), MAX_GRID))
        elif plan.mode == "blocks" and outputs > BLOCK_REDUCE_MAX_OUTPUTS:
            plan.mode, plan.global_loops, plan.reduce_loops, plan.acc, plan.vec = "single", glob, [], None, {}
            return _threads(uops, plan, glob, outputs, affine, vectors) if glob else plan
    elif glob:
        return _threads(uops, plan, glob, outputs, affine, vectors)
    return plan


def _warp_width(inputs: int, width: int, warp: int) -> int:
    """A warp's vector width for rows of `inputs` elements: `width` or a quarter or half of it, whichever leaves the
    fewest lanes idle in a row's last round (a 640-wide int8 row is 40 vectors of 16 on 32 lanes, the second round
    a quarter full, or 160 of 4, five rounds all full); the widest of equals."""
    best, best_use = width, 0.0
    for w in (width, width // 2, width // 4):
        if w < 2:
            break
        steps = -(-inputs // w)
        use = steps / (warp * -(-steps // warp))
        if use > best_use + 1e-9:
            best, best_use = w, use
    return best


def _threads(uops: list[UOp], plan: _Parallel, glob: list[UOp], outputs: int, affine: dict,
             vectors: bool = True) -> _Parallel:
    """A thread per output element (or vector of them) in a grid-stride loop."""
    plan.mode = "threads"
    vec = _plan_vector(uops, glob, affine) if vectors else None
    if vec is not None:
        plan.vec[id(glob[-1])] = vec
    # a thread takes a vector of elements at a time
    steps = -(-outputs // vec.width) if vec is not None else outputs
    plan.block = THREADS if steps >= THREADS or outputs == 0 else max(32, -(-steps // 32) * 32)
    # sizes unknown: enough blocks to fill a big GPU, the grid-stride loop does the rest
    plan.grid = max(1, min(-(-steps // plan.block), MAX_GRID)) if outputs > 0 else 1024
    return plan

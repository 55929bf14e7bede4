"""Which parts of a kernel's dims to vectorize, upcast and unroll: a hand-written cost model, no timing search.

The model counts instructions per step of the innermost loop. A node of the AST costs one instruction for every
copy of the tile it takes a distinct value in: a node that does not vary along an upcast dim is computed once
and reused by every copy along it (a matmul operand row, a bias, the softmax of one row), which is what makes a
register tile pay. Along the vector dim a node costs one instruction for the whole vector where it can be a
vector (a contiguous load, an op in VECTOR_ALU_OPS on a VECTOR_DTYPES dtype), else one per lane. Each
accumulator costs one instruction per step, each loop step a fixed overhead, and memory read from beyond the
cache (with the best order of the output loops) a share of an instruction per byte. The choice minimises that
per element of the iteration space over every tile within the limits: the accumulators held to the vector
registers less a few for operands, the body to MAX_COPIES copies.

>>> from tinygrad import Tensor
>>> from tinygrad.codegen.linearizer import Linearizer
>>> from tinygrad.engine.schedule import create_schedule
>>> from tinygrad.runtime.ops_clang import ClangCompiler
>>> a, b = Tensor.rand(64, 128).realize(), Tensor.rand(128, 32).realize()
>>> lin = Linearizer(create_schedule([(a @ b).lazydata])[-1].ast, ClangCompiler.linearizer_opts)
>>> len(choose_opts(lin)) > 0
True
"""
from __future__ import annotations

import itertools
import math

from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.codegen.uops import (
    INT_VECTOR_ALU_OPS,
    NARROW_VECTOR_DTYPES,
    VECTOR_ALU_OPS,
    VECTOR_DTYPES,
    VECTOR_MATH_OPS,
)
from tinygrad.dtype import dtypes
from tinygrad.ops import BinaryOps, BufferOps, ReduceOps, UnaryOps
from tinygrad.shape.symbolic import NumNode, Variable

# kernels that iterate over fewer elements than this stay plain loops: there is nothing to win
MIN_WORK = 1024
# the most copies of the loop body one step may hold (source size and compile time grow with it)
MAX_COPIES = 32
# the most instructions one step of the innermost loop may hold
MAX_BODY = 512
# elementwise kernels only amortise the loop overhead by unrolling; a few copies do that
MAX_COPIES_ELEMENTWISE = 4
# the cost of one loop step (increment, compare, branch), in instructions
LOOP_COST = 2
# the most copies along one output dim, and the most unrolled steps of a reduced dim
MAX_UPCAST = 32
MAX_UNROLL = 8
# an unroll must cut the cost per element by this fraction to be taken
MIN_GAIN = 0.03
# kernels whose cost (instructions, memory traffic counted as the model counts it) is at least this split their
# outermost loop across threads: starting and joining them costs some 10 us, about 100k instructions
PARALLEL_MIN_COST = 1 << 18
# kernels with more output loops than this keep them in dim order (the orders to compare grow factorially)
MAX_ORDERED = 4
# bytes read from beyond the first-level cache that cost as much as one instruction
BYTES_PER_INSTRUCTION = 16
# a load of at least this many bytes that no two outputs share (a matrix-vector product's matrix) is streamed from
# memory: its rows are best read one at a time, each run along the reduced dim unrolled, not several rows side by
# side (an int8 matvec of 262,144 x 640 took 15.5 ms with 8 rows a step, 6.5 ms with one, on a 2-core AMD EPYC);
# a quarter of a core's second-level cache: in a model's step every matrix is read from memory anyway
STREAM_MIN_BYTES = 1 << 18
# ops that cost more than one instruction (libm calls, dividers)
_OP_COST = {UnaryOps.EXP2: 8, UnaryOps.LOG2: 8, UnaryOps.SIN: 12, UnaryOps.SQRT: 4, UnaryOps.RECIP: 4,
            BinaryOps.DIV: 4, BinaryOps.MOD: 8}
_LEAVES = (BufferOps.LOAD, BufferOps.CONST, BufferOps.IOTA)


class _Node:
    """What the cost model needs of one AST node (and a load's ShapeTracker)."""
    __slots__ = ("dims", "cost", "vec_ok", "is_load", "contiguous", "st")

    def __init__(self, dims, cost, vec_ok, is_load, contiguous, st=None):
        self.dims, self.cost, self.vec_ok, self.is_load, self.contiguous = dims, cost, vec_ok, is_load, contiguous
        self.st = st


def _unit_dims(st) -> frozenset[int]:
    """The dims along which `st` reads consecutive elements (stride 1, no mask)."""
    return frozenset(d for d, s in enumerate(st.real_strides()) if isinstance(s, int) and s == 1)


class _Model:
    """The cost model of one kernel (see the module docstring)."""

    def __init__(self, lin):
        self.full = lin.full_shape
        self.reduce = frozenset(lin.reduce_axes)
        self.opts = lin.opts
        red = lin.reduceop
        if red is not None:
            self.acc_dtype = lin.op_dtypes[id(red)]
            self.src_dims = lin.op_dims[id(red.src[0])]
            inner = red.src[0].toposort()
            skip = {id(op) for op in inner} | {id(red)}
        else:
            self.acc_dtype, self.src_dims, inner, skip = None, frozenset(), [], set()
        post = [op for root in lin.ast for op in root.src[0].toposort() if id(op) not in skip]
        # values that do not change along any reduced dim are hoisted out of the reduce loop by the compiler: they
        # cost nothing per step, but their code is there all the same
        every = self._nodes(lin, inner)
        self.nodes = [nd for nd in every if nd.dims & self.reduce]
        self.hoisted = [nd for nd in every if not nd.dims & self.reduce]
        self.post = self._nodes(lin, post)
        # the kernel takes narrow ints apart in its reduce loop (a quantized matrix's blocks)
        self.fields = any(op.op in INT_VECTOR_ALU_OPS and lin.op_dtypes[id(op)] in NARROW_VECTOR_DTYPES
                          for op in inner)
        everything = frozenset(d for d in range(len(self.full)) if d not in self.reduce)
        self.stores = [(everything, root.arg.dtype, _unit_dims(root.arg.st)) for root in lin.ast]
        self.reduce_size = math.prod(self.full[d] if isinstance(self.full[d], int) else self.full[d].max
                                     for d in self.reduce)
        self.loads = _loads(lin)
        self.outputs = [d for d in range(len(self.full)) if d not in self.reduce]
        self.streams = self._streams(lin, inner)
        self._traffic: dict[tuple[int, ...], int] = {}
        self._lane_free: dict[tuple[int, int, int], bool] = {}

    def _streams(self, lin, ops) -> list[frozenset[int]]:
        """The dims of every load streamed from memory (see STREAM_MIN_BYTES): read along a reduced dim, varying
        along every output dim, so no output reuses what another read, and too big for the caches."""
        outs = {d for d in self.outputs if not (isinstance(self.full[d], int) and self.full[d] == 1)}
        found = []
        for op in ops:
            if op.op is not BufferOps.LOAD:
                continue
            dims = lin.op_dims[id(op)]
            size = math.prod(self.full[d] if isinstance(self.full[d], int) else self.full[d].max for d in dims)
            big = size * op.arg.dtype.itemsize >= STREAM_MIN_BYTES
            if big and outs <= dims and _unit_dims(op.arg.st) & self.reduce:
                found.append(dims)
        return found

    @staticmethod
    def _nodes(lin, ops) -> list[_Node]:
        seen: set[int] = set()
        narrow = lin.opts.narrow_vectors
        ints = narrow and lin.opts.int_vectors
        out = []
        for op in ops:
            if id(op) in seen:
                continue
            seen.add(id(op))
            dims, dt = lin.op_dims[id(op)], lin.op_dtypes[id(op)]
            if op.op in _LEAVES:
                is_load = op.op is BufferOps.LOAD
                contiguous = _unit_dims(op.arg.st) if is_load else frozenset()
                vec = dt in VECTOR_DTYPES or (is_load and narrow and dt in NARROW_VECTOR_DTYPES)
                out.append(_Node(dims, 1 if is_load else 0, vec, is_load, contiguous, op.arg.st if is_load else None))
            elif op.op is UnaryOps.CAST and narrow and dt in VECTOR_DTYPES:
                # a narrow or float vector converted whole
                src = lin.op_dtypes[id(op.src[0])]
                vec = src in VECTOR_DTYPES or src in NARROW_VECTOR_DTYPES
                out.append(_Node(dims, _cast_cost(src), vec, False, frozenset()))
            elif op.op in (UnaryOps.CAST, UnaryOps.BITCAST) and ints and dt in NARROW_VECTOR_DTYPES:
                # a narrow vector to another (a bitcast costs nothing: the same register)
                vec = lin.op_dtypes[id(op.src[0])] in NARROW_VECTOR_DTYPES
                out.append(_Node(dims, 1 if op.op is UnaryOps.CAST else 0, vec, False, frozenset()))
            elif not isinstance(op.op, ReduceOps):
                vec = (op.op in VECTOR_ALU_OPS and dt in VECTOR_DTYPES) or \
                    (op.op in VECTOR_MATH_OPS and dt == dtypes.float32 and lin.opts.vector_math) or \
                    (ints and op.op in INT_VECTOR_ALU_OPS and dt in NARROW_VECTOR_DTYPES)
                out.append(_Node(dims, _OP_COST.get(op.op, 1), vec, False, frozenset()))
        return out

    def copies(self, up: list[int], dims, v: int, w: int) -> int:
        return math.prod(up[d] // (w if d == v else 1) for d in dims)

    def _cost_of(self, nodes: list[_Node], up: list[int], v: int, w: int) -> int:
        total = 0
        for nd in nodes:
            if v not in nd.dims or (nd.is_load and self.lane_free(nd, v, w)):
                per = nd.cost
            elif nd.is_load:
                # a vector load, or a scalar load per lane and the lanes put together
                per = 1 if (v in nd.contiguous and nd.vec_ok) else 2 * w
            else:
                # a vector op, or per lane: take the lane out, the scalar op
                per = nd.cost if nd.vec_ok else (nd.cost + 1) * w
            total += per * self.copies(up, nd.dims, v, w)
        return total

    def lane_free(self, nd: _Node, v: int, w: int) -> bool:
        """Whether load `nd` reads one element for all `w` lanes of a vector along dim `v` (vectors start at multiples
        of `w`): a scale per group of 32 values, indexed by division, is one scalar load a vector of 16."""
        key = (id(nd), v, w)
        hit = self._lane_free.get(key)
        if hit is None:
            lane = Variable("_lane", 0, w - 1)
            idxs = []
            for d, s in enumerate(nd.st.shape):
                size = s if isinstance(s, int) else s.max
                if d == v:
                    idxs.append(Variable(f"_v{d}", 0, size // w - 1) * w + lane if size > w else lane)
                else:
                    idxs.append(Variable(f"_i{d}", 0, size - 1) if size > 1 else NumNode(0))
            idx, valid = nd.st.expr_idxs(idxs)
            # as the linearizer finds it: each lane's index simplified on its own, equal lanes loaded once
            lanes = {(str(idx.substitute({lane: NumNode(i)})), str(valid.substitute({lane: NumNode(i)})))
                     for i in range(w)}
            hit = self._lane_free[key] = len(lanes) == 1
        return hit

    def cost(self, up: list[int], v: int, w: int) -> float:
        """Instructions per element of the iteration space for upcasts `up` and vector dim `v` of width `w`: the
        reduce loop's body each step, the rest (after the reduce, the stores) once per output tile."""
        inner = LOOP_COST + self._cost_of(self.nodes, up, v, w)
        post = LOOP_COST + self._cost_of(self.post, up, v, w)
        if self.acc_dtype is not None:
            vec_acc = v in self.reduce or v in self.src_dims
            per = w if (vec_acc and self.acc_dtype not in VECTOR_DTYPES) else 1
            inner += per * self.copies(up, [d for d in range(len(up)) if d in self.reduce or d in self.src_dims], v, w)
            if v in self.reduce:
                # the lanes of each accumulator are folded into one result
                post += 2 * w * self.copies(up, [d for d in self.src_dims if d not in self.reduce], v, w)
        for dims, dt, unit in self.stores:
            per = 1 if v not in dims or (v in unit and dt in VECTOR_DTYPES) else w
            post += per * self.copies(up, dims, v, w)
        steps = self.reduce_size // math.prod(up[d] for d in self.reduce) if self.reduce else 1
        instructions = (inner * steps + post) / (math.prod(up) * steps)
        total = math.prod(s if isinstance(s, int) else s.max for s in self.full)
        key = tuple(up[d] for d in self.outputs)
        if key not in self._traffic:
            self._traffic[key] = _best_order(self.full, self.outputs, up, self.loads)[1]
        return instructions + self._traffic[key] / total / BYTES_PER_INSTRUCTION

    def feasible(self, up: list[int], v: int, w: int) -> bool:
        copies = self.copies(up, range(len(up)), v, w)
        # the source (and the compile time) grows with the instructions of one step, lanes computed apart included
        if sum(self._cost_of(nodes, up, v, w) for nodes in (self.nodes, self.hoisted, self.post)) > MAX_BODY:
            return False
        if self.acc_dtype is None:
            return copies <= MAX_COPIES_ELEMENTWISE
        accs = self.copies(up, [d for d in range(len(up)) if d not in self.reduce and d in self.src_dims], v, w)
        # the accumulators stay in registers, with a few left for the operands of each step
        if copies > MAX_COPIES or accs > max(4, self.opts.vector_registers - 4):
            return False
        if any(up[d] > 1 for dims in self.streams for d in self.outputs if d in dims):
            return False
        # so do the values a step reuses across copies of its body (a row's scale used by every unrolled step, an
        # input vector used by every row): past the register file, the compiler spills accumulators to the stack
        # each step (a 16-row int8 matvec with its 16 scales kept for two unrolled steps ran 1.8x slower)
        body = self.copies(up, [d for d in range(len(up)) if d in self.reduce or d in self.src_dims], v, w)
        reused = sum(n for n in (self.copies(up, nd.dims, v, w) for nd in self.nodes) if n < body)
        return accs <= 4 or accs + reused <= self.opts.vector_registers - 2


def _cast_cost(src) -> int:
    """Instructions of a vector conversion from `src` lanes: narrow ints are extended to int32 first."""
    return 2 if dtypes.is_int(src) and src.itemsize < 4 else 1


def _vector_width(n: int, dtype, opts) -> int:
    """The widest vector of `dtype` the device holds that divides a dim of size `n`, or 0."""
    if dtype not in VECTOR_DTYPES or opts.max_vector_bytes < 2 * dtype.itemsize:
        return 0
    w = opts.max_vector_bytes // dtype.itemsize
    while w >= 2 and n % w:
        w //= 2
    return w if w >= 2 else 0


def _divisors(n: int, limit: int) -> list[int]:
    return [a for a in range(1, min(n, limit) + 1) if n % a == 0]


def _tiles(options: list[list[int]], limit: int):
    """Every choice of one amount per dim (each list ascending) whose product is at most `limit`."""
    def rec(i: int, prod: int):
        if i == len(options):
            yield ()
            return
        for a in options[i]:
            if prod * a > limit:
                break
            for rest in rec(i + 1, prod * a):
                yield (a,) + rest
    return rec(0, 1)


def choose_opts(lin) -> list[Opt]:
    """The optimisations for Linearizer `lin` (before linearize): a VECTORIZE, then UPCASTs and UNROLLs.

    Every tile of output dims (and copies of the vector dim) within the limits is costed, for each candidate
    vector dim; then the innermost other reduced dim is unrolled where that still pays for its loop overhead."""
    full, opts = lin.full_shape, lin.opts
    int_dims = [d for d, s in enumerate(full) if isinstance(s, int) and s > 1]
    work = math.prod(s if isinstance(s, int) else s.max for s in full)
    if not int_dims or work < MIN_WORK or opts is None:
        return []
    if lin.reduceop is not None and lin.reduceop.op not in (ReduceOps.SUM, ReduceOps.MAX, ReduceOps.PROD):
        return []
    model = _Model(lin)
    out_dtype = model.acc_dtype if model.acc_dtype is not None else lin.ast[0].arg.dtype
    starts = [(-1, 1)]
    for d in int_dims:
        w = _vector_width(full[d], out_dtype, opts)
        if w:
            starts.append((d, w))
    limit = MAX_COPIES if model.acc_dtype is not None else MAX_COPIES_ELEMENTWISE
    best = None
    for v, w in starts:
        tile_dims = [d for d in int_dims if d not in model.reduce or d == v]
        options = [_divisors(full[d] // (w if d == v else 1), MAX_UPCAST) for d in tile_dims]
        for amts in _tiles(options, limit):
            up = [1] * len(full)
            for d, a in zip(tile_dims, amts):
                up[d] = a * (w if d == v else 1)
            if not model.feasible(up, v, w):
                continue
            c = model.cost(up, v, w)
            if best is None or c < best[0]:
                best = (c, v, w, up)
    if best is None:
        # not even the plain kernel fits the limits (a body of hundreds of ops, as a Winograd transform's): no copies
        return []
    cur, v, w, up = best
    unroll = [d for d in int_dims if d in model.reduce and d != v]
    # the innermost reduced dim; in a kernel that takes blocks of narrow ints apart, where it is unrolled whole, the
    # next one out, and so on: a block's short dims (its fields, halves and groups) are loops of two steps otherwise
    for d in reversed(unroll):
        for a in _divisors(full[d], MAX_UNROLL)[1:]:
            cand = list(up)
            cand[d] = a
            if model.feasible(cand, v, w) and model.cost(cand, v, w) < cur * (1 - MIN_GAIN):
                cur, up = model.cost(cand, v, w), cand
        if up[d] != full[d] or not model.fields:
            break
    ret = [Opt(OptOps.VECTORIZE, v, w)] if v != -1 else []
    for d, u in enumerate(up):
        amt = u // (w if d == v else 1)
        if amt > 1:
            ret.append(Opt(OptOps.UNROLL if d in model.reduce else OptOps.UPCAST, d, amt))
    return ret


def _loads(lin) -> list[tuple[frozenset[int], int]]:
    """(the dims it varies along, its bytes) of every buffer a kernel loads."""
    full = lin.full_shape
    out = []
    for root in lin.ast:
        for op in root.toposort():
            if op.op is BufferOps.LOAD:
                dims = lin.op_dims[id(op)]
                size = math.prod(full[d] if isinstance(full[d], int) else full[d].max for d in dims)
                out.append((dims, size * op.arg.dtype.itemsize))
    return out


def _best_order(full, outputs: list[int], up: list[int], loads) -> tuple[list[int], int]:
    """The order of the output loops (outermost first) that reads the least memory, and the bytes it reads.

    An input is read once per step of the loops outside the innermost loop it varies along that it does not vary
    along; inside that loop its block is reused from cache."""
    trips = {d: (full[d] // up[d] if isinstance(full[d], int) else full[d].max) for d in outputs}
    looped = [d for d in outputs if trips[d] > 1]

    def traffic(perm) -> int:
        total = 0
        for dims, size in loads:
            inner = max((i for i, d in enumerate(perm) if d in dims), default=-1)
            total += size * math.prod(trips[perm[i]] for i in range(inner) if perm[i] not in dims)
        return total

    if len(looped) < 2 or len(looped) > MAX_ORDERED or any(not isinstance(full[d], int) for d in looped):
        return list(outputs), traffic(looped)
    # permutations() yields the dims' own order first, and min() keeps the first of equals
    best = min(itertools.permutations(looped), key=traffic)
    rest = iter(best)
    return [next(rest) if d in looped else d for d in outputs], traffic(best)


def global_loop_order(lin) -> list[int]:
    """The order of the output loops of an optimised kernel, outermost first: the one that reads the least memory."""
    outputs = [d for d in range(len(lin.full_shape)) if d not in lin.reduce_axes]
    return _best_order(lin.full_shape, outputs, list(lin.upcasts), _loads(lin))[0]


def parallel_threads(lin) -> int:
    """How many threads the outermost output loop of an optimised kernel is split across (1: it is not)."""
    full, threads = lin.full_shape, lin.opts.threads if lin.opts is not None else 1
    if threads < 2:
        return 1
    work = math.prod(s if isinstance(s, int) else s.max for s in full)
    # the model's instructions per element: a transcendental elementwise kernel is worth threads at far fewer
    # elements than a sum
    if work * _Model(lin).cost(list(lin.upcasts), lin.vector_axis, lin.vector_width) < PARALLEL_MIN_COST:
        return 1
    for d in lin.loop_order:
        if not isinstance(full[d], int):
            return 1
        trips = full[d] // lin.upcasts[d]
        if trips > 1:
            return min(threads, trips)
    return 1

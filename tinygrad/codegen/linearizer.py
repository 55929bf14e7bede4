"""The linearizer: lowers one kernel's AST (a tree of LazyOps) to a flat list of UOps.

The kernel iterates over its full shape (the reduce's input shape when it has a reduce, else the output's):
the output dimensions are outer loops, the reduced dimensions inner loops around an accumulator. On a GPU
(LinearizerOptions.has_local) the output dimensions are the grid instead: each thread computes one step of them
(one output, or one tile of outputs under UPCAST), its position recovered from SPECIAL uops by division and modulo
as `codegen/gpu_dims.py` plans it, and threads past the end of a dimension return at once (the guard). The launch
sizes that plan gives are the kernel's `global_size` and `local_size`. Kernels that `codegen/heuristic_gpu.py` leaves
to the CUDA renderer's own plan (memory-bound reductions) keep plain loops. Index arithmetic comes from each
buffer's ShapeTracker as symbolic expressions, lowered to ALU uops. Identical uops are made once (CSE), scoped so
that nothing defined inside a loop is used after it.

Optimisations (`kernel.Opt`, chosen by `tinygrad.codegen.opt` where the device allows) expand part of a dimension:
a dim of size s with upcast u loops s/u times, and one loop step covers the u indices `loop*u + copy`. Each node
of the AST is lowered once per combination of the copies of the dims it varies along, so a value shared by a
tile of outputs (a row of a matmul operand) is loaded once and reused from registers, with one accumulator per
output of the tile. The vector dim's copies are split further into lanes (`loop*u + copy*W + lane`): values
that vary along it are vectors (contiguous loads, whole-vector ALU) or, where that is not possible, tuples of W
scalar lanes. A vector along a reduced dim gives each lane its own partial result, summed across lanes at the
end: that reassociates the reduction (as PyTorch's vectorised sums do); elementwise results stay bit-exact.
On a GPU, `LOCAL` sets the block's threads along an output dim, and `GROUP` splits a reduced dim across threads
of the block: their partial results meet in shared memory (DEFINE_LOCAL) after a BARRIER, which is why a grouped
kernel clamps its out-of-range threads and gates their stores rather than returning early.

A matmul-shaped kernel with the TC or SMEM Opt is lowered by `_lower_tc` instead (codegen/tensor_cores.py describes
the kernel): a block of warps per output tile, operand slices staged in shared memory (COPY_ASYNC where they allow
it, else loads and stores), tensor-core WMMA uops on fragments read from the slices (by `ldmatrix`, by plain loads
of each lane's row or column, or by `simdgroup_load`: TensorCore.frag) or a tile of FMAs per thread, and the
accumulators through the kernel's elementwise tail to the stores, by the same `_lower_ast` and `_store` as the
other kernels (each tiled dim's copies are offsets from the thread's base row or column).
"""
from itertools import product

from tinygrad.codegen.accumulate import SUM_BLOCK, TILE_SUM_BLOCK, needs_blocks, plan_blocks
from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.codegen.uops import NARROW_VECTOR_DTYPES, VECTOR_ALU_OPS, VECTOR_DTYPES, VECTOR_MATH_OPS, UOp, UOps
from tinygrad.dtype import PtrDType, dtypes
from tinygrad.helpers import DEBUG, NOOPT, to_function_name, toposort
from tinygrad.ops import BinaryOps, BufferOps, ReduceOps, TernaryOps, UnaryOps, _const_identity
from tinygrad.shape.symbolic import AndNode, DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode, Variable

# the binary op that folds one more element into a reduction
_REDUCE_ALU = {ReduceOps.SUM: BinaryOps.ADD, ReduceOps.MAX: BinaryOps.MAX, ReduceOps.PROD: BinaryOps.MUL}
_LEAVES = (BufferOps.LOAD, BufferOps.CONST, BufferOps.IOTA)


def _out_dtype(op, dts):
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


def _op_dims(roots, reduce_axes):
    """id(op) -> the dims of the full shape along which the op's value can change: a leaf varies along the dims
    with a nonzero (or unknown) stride or a mask, an op along its sources' dims, a reduce not along reduced dims."""
    dims = {}
    red = frozenset(reduce_axes)
    for root in roots:
        for op in root.toposort():
            if id(op) in dims:
                continue
            if op.op in _LEAVES:
                st = op.arg.st
                rs = st.real_strides()
                dims[id(op)] = frozenset([i for i, s in enumerate(st.shape) if not _is_one(s) and not _is_zero(rs[i])])
            elif isinstance(op.op, ReduceOps):
                dims[id(op)] = dims[id(op.src[0])] - red
            else:
                acc = frozenset()
                for s in op.src:
                    acc = acc | dims[id(s)]
                dims[id(op)] = acc
    return dims


def _topo_to_reduce(root):
    """The nodes of `root` once each, sources first, not descending into a reduce (its value is the accumulator)."""
    return toposort(root, lambda op: () if isinstance(op.op, ReduceOps) else op.src)


class Linearizer:
    """`Linearizer(ast, opts).linearize()` fills `uops`; `name`, `global_size`, `local_size` and `vars` describe
    how the rendered kernel is called. `apply_opt` (before `linearize`) sets optimisations by hand; otherwise
    `linearize` applies `hand_coded_optimizations` when the device's options allow it."""

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
        self.op_dtypes = {}
        for root in self.ast:
            for op in root.toposort():
                if isinstance(op.op, ReduceOps):
                    if self.reduceop is not None and self.reduceop is not op:
                        raise ValueError("a kernel can hold at most one reduce")
                    self.reduceop = op
                if id(op) not in self.op_dtypes:
                    self.op_dtypes[id(op)] = _out_dtype(op, self.op_dtypes)
        self.output_shape = tuple(self.ast[0].arg.st.shape)
        self.full_shape = self._reduce_input_shape() if self.reduceop is not None else self.output_shape
        full, out = self.full_shape, self.output_shape
        self.reduce_axes = tuple([i for i in range(len(full))
                                  if self.reduceop is not None and not _same(out[i], full[i])])
        self.upcasts = [1] * len(full)
        self.loop_order = None
        self.threads = 1
        self.vector_axis = -1
        self.vector_width = 1
        self.local_dims = {}
        self.group_axis = -1
        self.group = 1
        self.group_top = False
        self.no_locals = False
        self.thread_axis = -1
        self.tc = None
        self._dim_limits = None
        self._tc_bases = None
        self._tc_offsets = None
        self._gate = None
        # a grouped kernel's (or a TC kernel's) thread position, set by _grid_indices (or _lower_tc)
        self._group_idx = self._base_id = self._thread_id = None
        self._block_threads = 0
        # linearize's state: the CSE table and its scopes, each Variable's uop, the loop indices, the lane Variable
        self.buf_uops = {}
        self._cse, self._scope, self._var_uops, self._topos = {}, [[]], {}, {}
        self._loop_vars, self._lane = [], None
        self._decided = False
        self.op_dims = _op_dims(self.ast, self.reduce_axes)
        self.name = self._make_name()
        self.gpu = False
        if opts is not None and getattr(opts, "has_local", False):
            from tinygrad.codegen.heuristic_gpu import uses_grid
            self.gpu = uses_grid(self)

    def _reduce_input_shape(self):
        for op in self.reduceop.toposort():
            if op.op in _LEAVES:
                return tuple(op.arg.st.shape)
        raise ValueError("a reduce with no input")

    def _make_name(self):
        dims = "_".join(str(s) if isinstance(s, int) else s.render() for s in self.full_shape)
        return to_function_name(("r_" if self.reduceop is not None else "E_") + (dims or "0"))

    # ---- optimisations ----
    def apply_opt(self, opt):
        """Apply one `Opt` (before `linearize`). Raises ValueError when it does not fit this kernel."""
        if self.uops:
            raise RuntimeError("optimisations must be applied before linearize()")
        if not isinstance(opt, Opt):
            raise TypeError(f"apply_opt takes an Opt, got {type(opt).__name__}")
        self._apply_opt(opt)
        self.applied_opts.append(opt)
        self._decided = True
        return self

    def _apply_opt(self, opt):
        """apply_opt's checks and changes for one Opt; apply_opt records it."""
        if self.tc is not None:
            raise ValueError(f"{opt}: the kernel has a block tile in shared memory (TC or SMEM), which takes no other "
                             "Opt")
        if opt.op is OptOps.TC or opt.op is OptOps.SMEM:
            if self.applied_opts:
                raise ValueError(f"{opt}: {opt.op.name} must be a kernel's only Opt (it has {self.applied_opts})")
            from tinygrad.codegen.tensor_cores import simt_plan, tc_plan
            plan, why = (tc_plan if opt.op is OptOps.TC else simt_plan)(self, opt.amt)
            if plan is None:
                raise ValueError(f"{opt}: {why}")
            self.tc = plan
            return
        full = self.full_shape
        if not 0 <= opt.axis < len(full):
            raise ValueError(f"{opt}: no axis {opt.axis} in the full shape {full}")
        s = full[opt.axis]
        if not isinstance(s, int):
            raise ValueError(f"{opt}: axis {opt.axis} has the symbolic size {s.render()}")
        left = s // self.upcasts[opt.axis]
        is_reduce = opt.axis in self.reduce_axes
        if opt.op is OptOps.PADTO:
            if self.upcasts[opt.axis] != 1 or opt.axis == self.group_axis or opt.axis in self.local_dims or \
                    (self._dim_limits and opt.axis in self._dim_limits):
                raise ValueError(f"{opt}: pad axis {opt.axis} before any other optimisation of it")
            if not 2 <= opt.amt <= 256:
                raise ValueError(f"{opt}: pad to a multiple of 2 to 256")
            padded = -(-s // opt.amt) * opt.amt
            if padded == s:
                raise ValueError(f"{opt}: axis {opt.axis} (size {s}) is a multiple of {opt.amt} already")
            if is_reduce and not self._pads_to_zero(opt.axis):
                raise ValueError(f"{opt}: axis {opt.axis} is reduced, and the reduce is not a sum whose padded terms "
                                 "are zero")
            self.full_shape = self.full_shape[:opt.axis] + (padded,) + self.full_shape[opt.axis + 1:]
            if self._dim_limits is None:
                self._dim_limits = {}
            self._dim_limits[opt.axis] = s
            return
        if opt.op is OptOps.NOLOCALS:
            if not self.gpu:
                raise ValueError(f"{opt}: only kernels mapped to a GPU grid have threads of a block")
            if self.local_dims or self.group_axis != -1 or self.no_locals:
                raise ValueError(f"{opt}: the kernel has threads of a block already (LOCAL, GROUP or NOLOCALS)")
            self.no_locals = True
            return
        if opt.op is OptOps.LOCAL:
            if not self.gpu:
                raise ValueError(f"{opt}: only kernels mapped to a GPU grid have threads of a block")
            if self.no_locals:
                raise ValueError(f"{opt}: the kernel has NOLOCALS")
            if is_reduce:
                raise ValueError(f"{opt}: axis {opt.axis} is reduced; only output dims map to threads")
            if opt.axis in self.local_dims:
                raise ValueError(f"{opt}: axis {opt.axis} already has its threads")
            # NOTE: the threads need not divide the dim: the plan guards the threads past its end
            threads = left if opt.amt == 0 else opt.amt
            if not 1 <= threads <= 1024:
                raise ValueError(f"{opt}: a block has between 1 and 1024 threads")
            self.local_dims[opt.axis] = threads
            return
        amt = left if opt.amt == 0 else opt.amt
        if opt.op is OptOps.THREAD:
            cap = getattr(self.opts, "threads", 1) if self.opts is not None else 1
            if self.gpu or is_reduce or self.thread_axis != -1:
                raise ValueError(f"{opt}: one output dim of a kernel on a CPU can be split across threads")
            if not 2 <= amt <= cap or left < amt:
                raise ValueError(f"{opt}: 2 to {cap} threads (the device's), at most the {left} steps of axis "
                                 f"{opt.axis}")
            self.thread_axis, self.threads = opt.axis, amt
            return
        if opt.op is OptOps.GROUP or opt.op is OptOps.GROUPTOP:
            if not self.gpu or not is_reduce or self.group_axis != -1:
                raise ValueError(f"{opt}: one reduced dim of a kernel on the GPU grid can be grouped")
            if self.no_locals:
                raise ValueError(f"{opt}: the kernel has NOLOCALS")
            if not 2 <= amt <= 64 or left % amt != 0:
                raise ValueError(f"{opt}: 2 to 64 threads that divide the {left} steps left of axis {opt.axis}")
            self.group_axis, self.group = opt.axis, amt
            self.group_top = opt.op is OptOps.GROUPTOP
            return
        if opt.axis == self.group_axis:
            raise ValueError(f"{opt}: axis {opt.axis} is grouped: optimise it before GROUP")
        if amt < 1 or left % amt != 0:
            raise ValueError(f"{opt}: {amt} does not divide the {left} indices left of axis {opt.axis} (size {s})")
        if opt.op is OptOps.UPCAST and is_reduce:
            raise ValueError(f"{opt}: axis {opt.axis} is reduced; UNROLL it instead")
        if opt.op is OptOps.UNROLL and not is_reduce:
            raise ValueError(f"{opt}: axis {opt.axis} is not reduced; UPCAST it instead")
        if opt.op is OptOps.VECTORIZE:
            if self.vector_axis != -1:
                raise ValueError(f"{opt}: axis {self.vector_axis} is already the kernel's vector axis")
            if amt < 2 or amt & (amt - 1):
                raise ValueError(f"{opt}: a vector width must be a power of two >= 2, got {amt}")
            self.vector_axis = opt.axis
            self.vector_width = amt
        self.upcasts[opt.axis] *= amt

    def hand_coded_optimizations(self):
        """Apply the heuristic's choice (`tinygrad.codegen.opt.choose_opts`) unless the device does not support
        optimised kernels, NOOPT is set, or optimisations were already applied."""
        if not self._decided and self.opts is not None and getattr(self.opts, "supports_upcast", False) and \
                not NOOPT:
            if self.gpu:
                from tinygrad.codegen.heuristic_gpu import gpu_opts
                chosen = gpu_opts(self)
            elif getattr(self.opts, "has_local", False):
                chosen = []  # a kernel the GPU renderer parallelises itself: plain loops are what it reads
            else:
                from tinygrad.codegen.opt import choose_opts
                chosen = choose_opts(self)
            for o in chosen:
                self.apply_opt(o)
            if chosen and not self.gpu:
                self._choose_threads()
        self._decided = True
        return self

    def _choose_threads(self):
        """The heuristic's OpenMP split as a THREAD Opt (so it shows with the others, and BEAM can vary it): the
        outermost loop of the least-traffic order, across as many threads as parallel_threads gives it."""
        from tinygrad.codegen.opt import global_loop_order, parallel_threads
        self.loop_order = global_loop_order(self)
        n = parallel_threads(self)
        self.loop_order = None
        if n < 2:
            return
        order = global_loop_order(self)
        for d in order:
            if self.full_shape[d] // self.upcasts[d] > 1:
                self.apply_opt(Opt(OptOps.THREAD, d, n))
                return

    # ---- uop construction with CSE ----
    def _uop(self, uop, dtype, vin, arg, cachable=True):
        key = (uop, dtype, tuple([id(v) for v in vin]), arg if uop is not UOps.CONST else _const_identity(arg))
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

    def _const(self, val, dtype):
        return self._uop(UOps.CONST, dtype, (), val)

    def _open_scope(self):
        self._scope.append([])

    def _close_scope(self):
        # values made inside a loop body are out of scope after it
        for key in self._scope.pop():
            self._cse.pop(key, None)

    # ---- symbolic index expressions -> uops ----
    def _lower_node(self, node):
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

    def _alu(self, op, dtype, vin):
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
        if not self._decided:
            self.hand_coded_optimizations()
        if DEBUG >= 5 and self.applied_opts:
            print(f"{self.name}: {self.applied_opts}")
        self._cse = {}
        self._scope = [[]]
        self._var_uops = {}
        self._topos = {}
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

        if self.tc is not None:
            self._lane = None
            self._lower_tc()
        else:
            self._lower_loops()
        if DEBUG >= 6:
            from tinygrad.codegen.uops import print_uops
            print(print_uops(self.uops))
        return self

    def _lower_loops(self):
        """The kernel as loops (or the GPU grid) over its dims, tiles of copies and vector lanes: see the module
        docstring."""
        full = self.full_shape
        self._lane = Variable("_lane", 0, self.vector_width - 1) if self.vector_axis != -1 else None
        # the loop index of each dim (None where the loop would have one step: a size-1 or fully expanded dim)
        self._loop_vars = []
        for i, s in enumerate(full):
            steps = s // self.upcasts[i] if isinstance(s, int) else s
            self._loop_vars.append(None if _is_one(steps) else Variable(f"ridx{i}", 0, _max_index(steps)))
        global_axes = [i for i in range(len(full)) if i not in self.reduce_axes]
        if self.gpu:
            self.loop_order = list(global_axes)
            self._grid_indices(global_axes)
        if self.loop_order is None:
            self.loop_order = list(global_axes)
            if self.applied_opts:
                from tinygrad.codegen.opt import global_loop_order, parallel_threads
                self.loop_order = global_loop_order(self)
                if self.thread_axis != -1:
                    # THREAD: the split dim's loop is the outermost, the one OpenMP divides
                    self.loop_order.remove(self.thread_axis)
                    self.loop_order.insert(0, self.thread_axis)
                else:
                    self.threads = parallel_threads(self)
        if sorted(self.loop_order) != global_axes:
            raise ValueError(f"loop_order {self.loop_order} is not an order of the output dims {global_axes}")
        # the outermost loop may be split across threads: each step writes outputs of its own
        looped = [i for i in self.loop_order if self._loop_vars[i] is not None and not self.gpu]
        loops = [self._loop(i, self.threads if j == 0 else 1) for j, i in enumerate(looped)]
        gcombos = self._combos(global_axes)
        red = self._lower_reduce(global_axes, gcombos) if self.reduceop is not None else None
        # everything after the reduce reads through the output shape: reduced dims are index 0 there
        memo = {}
        for g in gcombos:
            for root in self.ast:
                self._store(root.arg, g, self._lower_ast(root.src[0], g, True, red, memo))
        for lp in reversed(loops):
            self._close_scope()
            self._uop(UOps.ENDLOOP, None, (lp,), None, False)

    def _grid_indices(self, global_axes):
        """Map the output dims to the grid: a SPECIAL (the thread's flat index in one grid dimension, guarded by
        that dimension's extent) per grid dimension, and each dim's step as (flat // div) % size of it. Sets the
        launch sizes; symbolic extents make symbolic global sizes, evaluated per call."""
        from tinygrad.codegen.gpu_dims import CUDA_GLOBAL_MAX, CUDA_LOCAL_MAX, TARGET_THREADS, plan_grid
        i32 = dtypes.int32
        full = self.full_shape
        steps = [1] * len(full)
        for d in global_axes:
            steps[d] = full[d] // self.upcasts[d] if isinstance(full[d], int) else full[d]
        grouped = self.group_axis != -1
        gmax = list(self.opts.global_max or CUDA_GLOBAL_MAX)
        if grouped:
            gmax[2] = 1  # the block's z dimension holds the group's threads: outputs use x and y
        # NOLOCALS: blocks of one thread
        plan = plan_grid(steps, gmax, (1, 1, 1) if self.no_locals else self.opts.local_max or CUDA_LOCAL_MAX,
                         max_threads=1 if self.no_locals else 1024 // self.group,
                         target_threads=1 if self.no_locals else max(1, TARGET_THREADS // self.group),
                         local=self.local_dims)
        gsize = [1, 1, 1]
        mapped = set()
        gates = []
        base = self._const(0, i32)
        for dim in range(3):
            group = sorted([a.axis for a in plan.axes if a.dim == dim])
            if not group:
                continue
            extent = _sint_prod([steps[d] for d in group])
            lsize = plan.local_size[dim]
            gsize[dim] = plan.global_size[dim] if isinstance(extent, int) else (extent + (lsize - 1)) // lsize
            if grouped:
                # NOTE: threads past the end must still reach the barrier: they compute the last element's value
                # again (an index clamped in bounds) and store nothing
                gid = self._uop(UOps.SPECIAL, i32, (), (dim, f"gidx{dim}", plan.global_size[dim]), False)
                lid = self._uop(UOps.SPECIAL, i32, (), (dim, f"lidx{dim}", lsize), False)
                flat = self._alu(BinaryOps.ADD, i32, (self._alu(BinaryOps.MUL, i32, (gid, self._const(lsize, i32))),
                                                      lid))
                base = self._alu(BinaryOps.ADD, i32, (base, self._alu(BinaryOps.MUL, i32, (
                    lid, self._const(1 if dim == 0 else plan.local_size[0], i32)))))
                if not isinstance(extent, int) or plan.global_size[dim] * lsize != extent:
                    inside = self._alu(BinaryOps.CMPLT, dtypes.bool, (flat, self._lower_node(extent)))
                    gates.append(inside)
                    flat = self._uop(UOps.ALU, i32, (inside, flat, self._const(0, i32)), TernaryOps.WHERE)
            else:
                size_arg = extent if isinstance(extent, int) else self._lower_node(extent)
                flat = self._uop(UOps.SPECIAL, i32, (), (dim, f"idx{dim}", size_arg, lsize), False)
            for j, d in enumerate(group):
                v = flat
                div = _sint_prod([steps[e] for e in group[j + 1:]])
                if not (isinstance(div, int) and div == 1):
                    v = self._alu(BinaryOps.DIV, i32, (v, self._lower_node(div)))
                if j != 0:
                    v = self._alu(BinaryOps.MOD, i32, (v, self._lower_node(steps[d])))
                if self._loop_vars[d] is not None:
                    self._var_uops[self._loop_vars[d]] = v
                mapped.add(d)
        for d in global_axes:
            # a symbolic dim whose bound is 1 has no place in the grid: its only index is 0
            if self._loop_vars[d] is not None and d not in mapped:
                self._var_uops[self._loop_vars[d]] = self._const(0, i32)
        self.global_size = tuple(gsize)
        self.local_size = tuple(plan.local_size)
        if grouped:
            lx, ly = plan.local_size[0], plan.local_size[1]
            self._group_idx = self._uop(UOps.SPECIAL, i32, (), (2, "lidx2", self.group), False)
            self._base_id = base
            self._thread_id = self._alu(BinaryOps.ADD, i32, (base, self._alu(BinaryOps.MUL, i32, (
                self._group_idx, self._const(lx * ly, i32)))))
            self._block_threads = lx * ly * self.group
            # only the group's first thread stores the combined result
            gates.append(self._alu(BinaryOps.CMPLT, dtypes.bool, (self._group_idx, self._const(1, i32))))
            self.local_size = (lx, ly, self.group)
        for g in gates:
            self._gate = g if self._gate is None else self._alu(BinaryOps.AND, dtypes.bool, (self._gate, g))

    def _loop(self, axis, threads=1):
        steps = self._steps(axis)
        lp = self._uop(UOps.LOOP, dtypes.int32, (self._const(0, dtypes.int32), self._lower_node(steps)),
                       threads if threads > 1 else None, False)
        self._open_scope()
        self._bind_loop_var(axis, lp, steps)
        return lp

    def _bind_loop_var(self, axis, lp, steps):
        """The index of dim `axis` from its loop's counter `lp`, which runs over `steps` (this thread's steps)."""
        if axis == self.group_axis and self.group_top:
            # GROUPTOP: thread t of the group takes the run of steps t*steps, t*steps+1, ...
            i32 = dtypes.int32
            self._var_uops[self._loop_vars[axis]] = self._alu(BinaryOps.ADD, i32, (self._alu(
                BinaryOps.MUL, i32, (self._group_idx, self._lower_node(steps))), lp))
        elif axis == self.group_axis:
            # the group's threads take interleaved steps: thread t of the group the steps t, t+group, ...
            i32 = dtypes.int32
            self._var_uops[self._loop_vars[axis]] = self._alu(BinaryOps.ADD, i32, (self._alu(
                BinaryOps.MUL, i32, (lp, self._const(self.group, i32))), self._group_idx))
        else:
            self._var_uops[self._loop_vars[axis]] = lp

    def _steps(self, axis):
        """The steps of dim `axis`'s loop in one thread (an int, or a symbolic Node)."""
        size = self.full_shape[axis]
        steps = size // self.upcasts[axis] if isinstance(size, int) else size
        return steps // self.group if axis == self.group_axis else steps

    def _blocked_loop(self, axis, sizes, levels, dtype, start):
        """Dim `axis`'s reduce loop cut into blocks of `sizes` iterations (outermost first, see codegen/accumulate):
        a loop over the biggest blocks, in each a loop over the blocks (or iterations) inside it, ... A level of
        accumulators starts in each block's body: `levels` ends with the current level's accumulators, and gets
        those of each new level. Returns [(loop, the accumulators it folds its level into at its end, or None)],
        outermost first."""
        i32 = dtypes.int32
        steps = self._steps(axis)
        units = list(sizes) + ([1] if sizes[len(sizes) - 1] != 1 else [])
        out, outer = [], None
        for i, unit in enumerate(units):
            # this piece counts in units of `unit` iterations: ceil(steps / unit) of them in all
            count = steps if unit == 1 else (steps + (unit - 1)) // unit
            if outer is None:
                lo, hi = self._const(0, i32), self._lower_node(count)
            else:
                ratio = self._const(units[i - 1] // unit, i32)
                lo = self._alu(BinaryOps.MUL, i32, (outer, ratio))
                if isinstance(count, int) and count % (units[i - 1] // unit) == 0:
                    hi = self._alu(BinaryOps.ADD, i32, (lo, ratio))
                else:
                    # the last block is short: it ends at the loop's end (lo + min(ratio, count - lo), which never
                    # passes the count, where lo + ratio could pass 2**31 - 1)
                    left = self._alu(BinaryOps.SUB, i32, (self._lower_node(count), lo))
                    take = self._alu(TernaryOps.WHERE, i32, (self._alu(BinaryOps.CMPLT, dtypes.bool, (ratio, left)),
                                                            ratio, left))
                    hi = self._alu(BinaryOps.ADD, i32, (lo, take))
            lp = self._uop(UOps.LOOP, i32, (lo, hi), None, False)
            self._open_scope()
            if i < len(sizes):
                parent = levels[len(levels) - 1]
                out.append((lp, parent))
                levels.append(self._new_accs(parent, dtype, start))
            else:
                out.append((lp, None))
            outer = lp
        self._bind_loop_var(axis, outer, steps)
        return out

    def _new_accs(self, like, dtype, start):
        """Accumulators of the same form as `like`'s (scalar, vector or lanes), each starting at `start`."""
        out = {}
        for key, a in like.items():
            if isinstance(a, tuple):
                out[key] = tuple([self._uop(UOps.DEFINE_ACC, dtype, (), start, False) for _ in range(len(a))])
            else:
                out[key] = self._uop(UOps.DEFINE_ACC, a.dtype, (), start, False)
        return out

    def _combos(self, axes):
        """Every tile position over `axes`: per dim of the full shape, which copy (0 for dims not in `axes`).

        The dim with the most copies varies slowest: a value that varies only along the fastest dims is reused
        by every step of the slow ones and stays live throughout, so those should be the dims with few copies."""
        n = len(self.full_shape)
        order = sorted([d for d in axes if self._copies(d) > 1], key=lambda d: -self._copies(d))
        out = []
        for pos in product(*[range(self._copies(d)) for d in order]):
            combo = [0] * n
            for d, c in zip(order, pos):
                combo[d] = c
            out.append(tuple(combo))
        return out

    def _copies(self, d):
        return self.upcasts[d] // (self.vector_width if d == self.vector_axis else 1)

    def _idx_nodes(self, combo, post):
        """The index of each dim of the full shape at tile position `combo`; the vector dim adds the lane Variable.
        After the reduce (`post`) the reduced dims are 0."""
        out = []
        if self.tc is not None:
            # a tensor-core kernel's accumulators: each tiled dim's thread base plus the copy's offset
            for d in range(len(self.full_shape)):
                base = self._tc_bases.get(d)
                out.append(NumNode(0) if base is None else base + self._tc_offsets[d][combo[d]])
            return out
        for d, s in enumerate(self.full_shape):
            if _is_one(s) or (post and d in self.reduce_axes):
                out.append(NumNode(0))
                continue
            lv = self._loop_vars[d]
            u = self.upcasts[d]
            node = NumNode(0) if lv is None else (lv if u == 1 else lv * u)
            if d == self.vector_axis:
                node = node + combo[d] * self.vector_width + self._lane
            elif u != 1:
                node = node + combo[d]
            out.append(node)
        return out

    # ---- values of a tile: a scalar uop (the same in every lane), a vector uop, or a tuple of lane uops ----
    def _vec_ok(self, dtype):
        """Whether values of `dtype` can be whole vectors here (else they are computed lane by lane)."""
        if self.vector_axis == -1 or self.opts is None or not getattr(self.opts, "supports_upcast", False):
            return False
        return dtype in VECTOR_DTYPES and dtype.itemsize * self.vector_width <= self.opts.max_vector_bytes

    def _vec_load_ok(self, dtype):
        """Whether a buffer of `dtype` can be read as whole vectors: VECTOR_DTYPES, and the narrow types where the
        device widens them in registers (LinearizerOptions.narrow_vectors; a vector of them is never wider than the
        float32 vector it becomes)."""
        if self._vec_ok(dtype):
            return True
        return dtype in NARROW_VECTOR_DTYPES and getattr(self.opts, "narrow_vectors", False) and \
            self._vec_ok(dtypes.float32)

    def _cast_any(self, kind, dtype, src):
        """A CAST or BITCAST of a tile value: one vector CAST where the device converts whole vectors (a narrow or
        float vector to a VECTOR_DTYPES one, under LinearizerOptions.narrow_vectors), else lane by lane."""
        if not isinstance(src, tuple) and src.dtype.count == 1:
            return self._uop(kind, dtype, (src,), None)
        if kind is UOps.CAST and not isinstance(src, tuple) and getattr(self.opts, "narrow_vectors", False) and \
                self._vec_ok(dtype) and self._vec_load_ok(src.dtype.scalar()):
            sdt = src.dtype.scalar()
            if dtypes.is_int(sdt) and sdt.itemsize < 4:
                # narrow ints are extended to int32 first, then converted: gcc 12 converts an int8 vector straight
                # to float lane by lane, but does each of the two steps as one instruction
                src = self._uop(UOps.CAST, dtypes.int32.vec(self.vector_width), (src,), None)
            return self._uop(UOps.CAST, dtype.vec(self.vector_width), (src,), None)
        return tuple([self._uop(kind, dtype, (self._lane_of(src, i),), None) for i in range(self.vector_width)])

    def _as_vec(self, v, dtype):
        if isinstance(v, tuple):
            return self._uop(UOps.VECTORIZE, dtype.vec(self.vector_width), v, None)
        if v.dtype.count > 1:
            return v
        return self._uop(UOps.VECTORIZE, dtype.vec(self.vector_width), (v,) * self.vector_width, None)

    def _lane_of(self, v, lane):
        if isinstance(v, tuple):
            return v[lane]
        if v.dtype.count == 1:
            return v
        if v.uop is UOps.VECTORIZE:
            return v.vin[lane]
        return self._uop(UOps.GEP, v.dtype.scalar(), (v,), lane)

    def _alu_any(self, op, dtype, srcs):
        """An AST ALU op on tile values: scalar if every source is, a vector op where the op and dtype allow one,
        else lane by lane."""
        scalar = True
        for s in srcs:
            if isinstance(s, tuple) or s.dtype.count > 1:
                scalar = False
        if scalar:
            return self._uop(UOps.ALU, dtype, srcs, op)
        vec_op = op in VECTOR_ALU_OPS or (op in VECTOR_MATH_OPS and dtype == dtypes.float32 and
                                          getattr(self.opts, "vector_math", False))
        if vec_op and self._vec_ok(dtype) and all(_scalar_dtype(s) == dtype for s in srcs):
            return self._uop(UOps.ALU, dtype.vec(self.vector_width), tuple([self._as_vec(s, dtype) for s in srcs]),
                             op)
        return tuple([self._uop(UOps.ALU, dtype, tuple([self._lane_of(s, i) for s in srcs]), op)
                      for i in range(self.vector_width)])

    def _lower_reduce(self, global_axes, gcombos):
        """The reduce loops around one accumulator per output of the tile; returns (the output dims that pick
        an accumulator, {their copies: the reduced value})."""
        rop = self.reduceop
        dtype = self.op_dtypes[id(rop)]
        src = rop.src[0]
        src_dims = self.op_dims[id(src)]
        # the identity of the reduction: x+0, x*1, max(x, smallest)
        if rop.op is ReduceOps.MAX:
            start = dtypes.min(dtype)
        else:
            start = 0 if rop.op is ReduceOps.SUM else 1
        start = dtypes.as_const(start, dtype)
        vax = self.vector_axis
        # outputs of the tile that hold the same value share an accumulator
        acc_axes = [d for d in global_axes if d in src_dims and self._copies(d) > 1]
        lanes = vax != -1 and (vax in self.reduce_axes or vax in src_dims)
        accs, reps = {}, []
        for g in gcombos:
            key = tuple([g[d] for d in acc_axes])
            if key in accs:
                continue
            reps.append((key, g))
            if not lanes:
                accs[key] = self._uop(UOps.DEFINE_ACC, dtype, (), start, False)
            elif self._vec_ok(dtype):
                accs[key] = self._uop(UOps.DEFINE_ACC, dtype.vec(self.vector_width), (), start, False)
            else:
                accs[key] = tuple([self._uop(UOps.DEFINE_ACC, dtype, (), start, False)
                                   for _ in range(self.vector_width)])
        axes = [i for i in self.reduce_axes if self._loop_vars[i] is not None]
        rcombos = self._combos(list(self.reduce_axes))
        alu_op = _REDUCE_ALU[rop.op]
        blocks = None
        if rop.op is ReduceOps.SUM and dtypes.is_float(dtype) and axes and not self._flat_gpu():
            # a long float sum accumulates in levels of blocks (codegen/accumulate.py); a GPU's loop-only kernels
            # are spread over its threads by the render loop, which blocks each thread's share itself
            trips = []
            for i in axes:
                steps = self._steps(i)
                trips.append(steps if isinstance(steps, int) else steps.max)
            # a register tile (several accumulators a thread) takes longer blocks: its dot products are as long as a
            # matmul's inner dim, and a second level of a whole tile's accumulators costs registers (conv2d fp32 on
            # an H100: 17.1 -> 16.3 TFLOP/s with blocks of SUM_BLOCK)
            block = SUM_BLOCK if len(reps) == 1 else TILE_SUM_BLOCK
            if needs_blocks(trips, len(rcombos), block):
                blocks = plan_blocks(trips, len(rcombos), block)
        # the loops, outermost first, each with the accumulators it folds into at its end (None: no level there)
        loops = []
        for j, i in enumerate(axes):
            if blocks is None or not blocks[j]:
                loops.append((self._loop(i), None))
                continue
            levels = [accs]
            loops.extend(self._blocked_loop(i, blocks[j], levels, dtype, start))
            accs = levels[len(levels) - 1]
        loop = loops[len(loops) - 1][0] if loops else None
        memo = {}
        for r in rcombos:
            for key, g in reps:
                combo = tuple([r[d] if d in self.reduce_axes else g[d] for d in range(len(g))])
                val = self._lower_ast(src, combo, False, None, memo)
                accs[key] = self._accumulate(accs[key], val, alu_op, dtype, loop)
        for lp, parent in reversed(loops):
            if parent is not None:
                # the block's partial sums are one addition into the level above
                accs = {key: self._accumulate(parent[key], a, alu_op, dtype, lp) for key, a in accs.items()}
            self._close_scope()
            self._uop(UOps.ENDLOOP, None, (lp,), None, False)
        if vax != -1 and vax in self.reduce_axes:
            # each lane summed its share of the reduced dim: combine the lanes
            accs = {key: self._horizontal(a, alu_op, dtype) for key, a in accs.items()}
        if self.group_axis != -1:
            accs = self._group_combine(accs, alu_op, dtype)
        return (acc_axes, accs)

    def _flat_gpu(self):
        """A kernel of plain loops for a GPU: the render loop spreads them over the GPU's threads (renderer/gpu.py)."""
        return not self.gpu and self.opts is not None and self.opts.has_local

    def _accumulate(self, cur, val, op, dtype, loop):
        """cur <- cur `op` val, as a PHI per accumulator (in place: the renderer assigns the accumulator)."""
        tail = (loop,) if loop is not None else ()
        if isinstance(cur, tuple):
            return tuple([self._uop(UOps.PHI, dtype, (cur[i], self._uop(UOps.ALU, dtype, (self._lane_of(val, i),
                                                                                       cur[i]), op, False)) + tail,
                                    None, False) for i in range(len(cur))])
        if cur.dtype.count > 1:
            new = self._uop(UOps.ALU, cur.dtype, (self._as_vec(val, dtype), cur), op, False)
            return self._uop(UOps.PHI, cur.dtype, (cur, new) + tail, None, False)
        if isinstance(val, tuple) or val.dtype.count > 1:
            raise RuntimeError("internal error: a scalar accumulator got a value that differs between lanes")
        new = self._uop(UOps.ALU, dtype, (val, cur), op, False)
        return self._uop(UOps.PHI, dtype, (cur, new) + tail, None, False)

    def _group_combine(self, accs, op, dtype):
        """GROUP: each thread of a group holds a partial result per accumulator lane; they meet in shared memory
        (a slot per thread of the block), and after a barrier every thread folds its group's partials in order."""
        i32 = dtypes.int32
        slots = []
        for key, a in accs.items():
            scalar = not isinstance(a, tuple) and a.dtype.count == 1
            lanes = [a] if scalar else [self._lane_of(a, i) for i in range(self.vector_width)]
            temps = []
            for lane in lanes:
                t = self._uop(UOps.DEFINE_LOCAL, PtrDType(dtype), (), (f"temp{len(self.uops)}", self._block_threads),
                              False)
                self._uop(UOps.STORE, None, (t, self._thread_id, lane), None, False)
                temps.append(t)
            slots.append((key, scalar, temps))
        self._uop(UOps.BARRIER, None, (), None, False)
        stride = self._block_threads // self.group
        out = {}
        for key, scalar, temps in slots:
            vals = []
            for t in temps:
                acc = None
                for j in range(self.group):
                    v = self._uop(UOps.LOAD, dtype, (t, self._alu(BinaryOps.ADD, i32, (self._base_id, self._const(
                        j * stride, i32)))), None)
                    acc = v if acc is None else self._uop(UOps.ALU, dtype, (acc, v), op)
                vals.append(acc)
            out[key] = vals[0] if scalar else tuple(vals)
        return out

    def _gated(self, valid):
        """A store's condition: `valid` (a symbolic Node) and the grid's gate; None when always true."""
        if self._gate is None:
            return None if _is_true(valid) else self._lower_node(valid)
        if _is_true(valid):
            return self._gate
        return self._alu(BinaryOps.AND, dtypes.bool, (self._lower_node(valid), self._gate))

    def _horizontal(self, acc, op, dtype):
        """Fold the lanes of an accumulator into one scalar, pairwise."""
        vals = [self._lane_of(acc, i) for i in range(self.vector_width)]
        while len(vals) > 1:
            vals = [self._uop(UOps.ALU, dtype, (vals[i], vals[i + 1]), op) for i in range(0, len(vals), 2)]
        return vals[0]

    def _lower_ast(self, root, combo, post, red, memo):
        """Lower an elementwise AST (stopping at the reduce, whose value comes from `red`) at tile position `combo`.
        `memo` keeps each node's value per combination of the copies of the dims it varies along."""
        order = self._topos.get(id(root))
        if order is None:
            order = self._topos[id(root)] = _topo_to_reduce(root)
        done = {}
        for op in order:
            key = (id(op), tuple([combo[d] for d in self.op_dims[id(op)] if self.upcasts[d] > 1]))
            hit = memo.get(key)
            if hit is not None:
                done[id(op)] = hit
                continue
            if isinstance(op.op, ReduceOps):
                val = red[1][tuple([combo[d] for d in red[0]])]
            elif op.op in _LEAVES:
                val = self._lower_leaf(op, combo, post)
            else:
                dt = self.op_dtypes[id(op)]
                src = tuple([done[id(s)] for s in op.src])
                if op.op is UnaryOps.CAST or op.op is UnaryOps.BITCAST:
                    val = self._cast_any(UOps.CAST if op.op is UnaryOps.CAST else UOps.BITCAST, op.arg[0], src[0])
                elif op.op is TernaryOps.MULACC:
                    val = self._alu_any(BinaryOps.ADD, dt, (self._alu_any(BinaryOps.MUL, dt, src[:2]), src[2]))
                else:
                    val = self._alu_any(op.op, dt, src)
            memo[key] = val
            done[id(op)] = val
        return done[id(root)]

    def _lower_leaf(self, op, combo, post):
        st = op.arg.st
        idxs = self._idx_nodes(combo, post)
        my_idxs = [idxs[i] if not _is_one(s) else NumNode(0) for i, s in enumerate(st.shape)]
        idx, valid = st.expr_idxs(my_idxs)
        if self._dim_limits:
            valid = self._limits_valid(valid, idxs)
        lane = self._lane
        if lane is None or (lane not in idx.vars() and lane not in valid.vars()):
            return self._leaf_scalar(op, idx, valid)
        dtype = op.arg.dtype
        if op.op is BufferOps.LOAD and self._vec_load_ok(dtype) and lane not in valid.vars():
            base = _lane_base(idx, lane)
            if base is not None:
                # consecutive lanes read consecutive elements: one vector load
                vdt = dtype.vec(self.vector_width)
                vin = (self.buf_uops[op.arg.idx], self._lower_node(base))
                if not _is_true(valid):
                    vin = vin + (self._lower_node(valid), self._as_vec(self._const(dtypes.as_const(0, dtype), dtype),
                                                                       dtype))
                return self._uop(UOps.LOAD, vdt, vin, None)
        # lanes that read scattered or partly masked elements: one scalar read each
        out = []
        for i in range(self.vector_width):
            sub = {lane: NumNode(i)}
            out.append(self._leaf_scalar(op, idx.substitute(sub), valid.substitute(sub)))
        return tuple(out)

    def _leaf_scalar(self, op, idx, valid):
        """A leaf at one index: a load, a constant or the index itself (IOTA); 0 where `valid` is false."""
        dtype = op.arg.dtype
        # NOTE: the 0 is made only where it is used: an unused CONST would still be a uop of the kernel
        if _is_false(valid):
            return self._const(dtypes.as_const(0, dtype), dtype)
        if op.op is BufferOps.LOAD:
            vin = (self.buf_uops[op.arg.idx], self._lower_node(idx))
            if _is_true(valid):
                return self._uop(UOps.LOAD, dtype, vin, None)
            zero = self._const(dtypes.as_const(0, dtype), dtype)
            return self._uop(UOps.LOAD, dtype, vin + (self._lower_node(valid), zero), None)
        if op.op is BufferOps.IOTA or isinstance(op.arg.val, Node):
            # an index (the element's own, for IOTA) or a symbolic value, computed in int32
            c = self._lower_node(idx if op.op is BufferOps.IOTA else op.arg.val)
            if dtype != dtypes.int32:
                c = self._uop(UOps.CAST, dtype, (c,), None)
        else:
            c = self._const(op.arg.val, dtype)
        if _is_true(valid):
            return c
        zero = self._const(dtypes.as_const(0, dtype), dtype)
        return self._uop(UOps.ALU, dtype, (self._lower_node(valid), c, zero), TernaryOps.WHERE)

    def _store(self, mb, combo, val):
        nodes = self._idx_nodes(combo, True)
        idx, valid = mb.st.expr_idxs(nodes)
        if self._dim_limits:
            valid = self._limits_valid(valid, nodes)
        buf = self.buf_uops[mb.idx]
        lane = self._lane
        if lane is None or (lane not in idx.vars() and lane not in valid.vars()):
            if isinstance(val, tuple) or val.dtype.count > 1:
                raise RuntimeError("internal error: lanes with different values stored to one address")
            vin = (buf, self._lower_node(idx), val)
            gate = self._gated(valid)
            if gate is not None:
                vin = vin + (gate,)
            self._uop(UOps.STORE, None, vin, None, False)
            return
        if self._vec_ok(mb.dtype) and lane not in valid.vars():
            base = _lane_base(idx, lane)
            if base is not None:
                vin = (buf, self._lower_node(base), self._as_vec(val, mb.dtype))
                gate = self._gated(valid)
                if gate is not None:
                    vin = vin + (gate,)
                self._uop(UOps.STORE, None, vin, None, False)
                return
        for i in range(self.vector_width):
            sub = {lane: NumNode(i)}
            li, lvalid = idx.substitute(sub), valid.substitute(sub)
            if _is_false(lvalid):
                continue
            vin = (buf, self._lower_node(li), self._lane_of(val, i))
            gate = self._gated(lvalid)
            if gate is not None:
                vin = vin + (gate,)
            self._uop(UOps.STORE, None, vin, None, False)

    # ---- tensor cores (TC) and float32 block tiles (SMEM): see codegen/tensor_cores.py for the kernel's shape ----
    def _lower_tc(self):
        from tinygrad.codegen import tensor_cores as tcm
        from tinygrad.codegen.tensor_cores import slice_elems
        plan = self.tc
        cfg, tc, simt = plan.config, plan.tc, plan.simt
        i32, u16, f32 = dtypes.int32, dtypes.uint16, dtypes.float32
        full = self.full_shape
        m_ax, n_ax, k_ax = plan.m_axis, plan.n_axis, plan.k_axis
        size_m, size_n, size_k = full[m_ax], full[n_ax], full[k_ax]
        nthreads = cfg.threads
        ktiles = -(-size_k // cfg.bk)
        tiles_y, tiles_x = -(-size_m // cfg.bm), -(-size_n // cfg.bn)
        # outputs past the end of M or N (the last tiles of sizes no tile divides) are neither read nor stored
        self._dim_limits = {}
        if size_m % cfg.bm:
            self._dim_limits[m_ax] = size_m
        if size_n % cfg.bn:
            self._dim_limits[n_ax] = size_n
        nbatch = 1
        for d in plan.batch:
            nbatch *= full[d]
        def c(v):
            return self._const(v, i32)
        def add(a, b):
            return self._alu(BinaryOps.ADD, i32, (a, b))
        def mul(a, b):
            return self._alu(BinaryOps.MUL, i32, (a, b))
        def div(a, b):
            return self._alu(BinaryOps.DIV, i32, (a, b))
        def mod(a, b):
            return self._alu(BinaryOps.MOD, i32, (a, b))
        # the grid: x over N's tiles, y over M's, z over the batch; one flat block of threads
        gx = self._uop(UOps.SPECIAL, i32, (), (0, "gidx0", tiles_x), False)
        gy = self._uop(UOps.SPECIAL, i32, (), (1, "gidx1", tiles_y), False)
        block = getattr(cfg, "block_threads", nthreads)  # (a TMA producer warp after the others)
        tid = self._thread_id = self._uop(UOps.SPECIAL, i32, (), (0, "lidx0", block), False)
        self.global_size = (tiles_x, tiles_y, nbatch)
        self.local_size = (block, 1, 1)
        self._tc_bases, self._tc_offsets = {}, {}
        if plan.batch:
            gz = self._uop(UOps.SPECIAL, i32, (), (2, "gidx2", nbatch), False)
            inner = 1
            for d in reversed(plan.batch):
                v = Variable(f"tc_batch{d}", 0, full[d] - 1)
                u = div(gz, c(inner)) if inner > 1 else gz
                self._var_uops[v] = mod(u, c(full[d])) if inner * full[d] < nbatch else u
                self._tc_bases[d], self._tc_offsets[d] = v, [0]
                inner *= full[d]
        row0_a, row0_b = mul(gy, c(cfg.bm)), mul(gx, c(cfg.bn))
        size_a = slice_elems(cfg.bm, cfg.bk, plan.a_along_k)
        size_b = slice_elems(cfg.bn, cfg.bk, plan.b_along_k)
        stages = plan.stages
        smem_a = self._uop(UOps.DEFINE_LOCAL, PtrDType(plan.elem), (), ("tc_a", stages * size_a), False)
        smem_b = self._uop(UOps.DEFINE_LOCAL, PtrDType(plan.elem), (), ("tc_b", stages * size_b), False)
        frag = tc.frag if tc is not None else None
        if frag == "simdgroup":
            # an 8x8 float tile a SIMD group, which its accumulators are read back through (simdgroup_store)
            smem_c = self._uop(UOps.DEFINE_LOCAL, PtrDType(f32), (), ("tc_c", nthreads // 32 * 64), False)
        ops = ((plan.a, m_ax, cfg.bm, row0_a, smem_a, size_a, plan.a_along_k),
               (plan.b, n_ax, cfg.bn, row0_b, smem_b, size_b, plan.b_along_k))
        asy = plan.asynchronous
        wg = getattr(cfg, "wgmma", False)
        if wg:
            # a warpgroup per 64 rows of the tile; one accumulator of BN/2 floats a thread (BN/8 m16n8 tiles)
            warp, lane = div(tid, c(32)), mod(tid, c(32))
            grp, quad = div(lane, c(4)), mod(lane, c(4))
            wg_a = mul(div(tid, c(128)), c(64 * cfg.bk))  # the group's first row of A in a slice
            acc_wg = self._uop(UOps.DEFINE_ACC, tc.acc.vec(cfg.bn // 2), (), 0.0, False)
            # B staged N-major: 64-column atoms of BK rows, this far apart
            b_atoms = cfg.bk * 64 * plan.elem.itemsize
        elif simt:
            # thread (ty, tx): rows ty*4.. of each group of 4 rows (4*BM/TM apart), columns likewise
            tx, ty = mod(tid, c(cfg.bn // cfg.tn)), div(tid, c(cfg.bn // cfg.tn))
            row_t, col_t = mul(ty, c(4)), mul(tx, c(4))
            gap_m, gap_n = 4 * cfg.bm // cfg.tm, 4 * cfg.bn // cfg.tn
            accs = [[self._uop(UOps.DEFINE_ACC, f32.vec(4), (), 0.0, False) for _ in range(cfg.tn // 4)]
                    for _ in range(cfg.tm)]
        else:
            wtm, wtn = cfg.bm // cfg.wm, cfg.bn // cfg.wn
            tiles_m, tiles_n = wtm // tc.m, wtn // tc.n
            warp, lane = div(tid, c(32)), mod(tid, c(32))
            wm_i, wn_i = div(warp, c(cfg.wn)), mod(warp, c(cfg.wn))
            if frag != "lane":
                # mma.sync's C: lane (grp, quad) = (l // 4, l % 4); simdgroup_store's read back likewise
                grp, quad = div(lane, c(4)), mod(lane, c(4))
            accs = [[self._uop(UOps.DEFINE_ACC, tc.acc.vec(tc.acc_elems), (), 0.0, False) for _ in range(tiles_n)]
                    for _ in range(tiles_m)]
        if frag == "lane":
            # lane l reads row (column) l % 16 of each 16-row tile of A (of B); lanes 16-31 the same as 0-15
            r16, hi = mod(lane, c(16)), div(lane, c(16))
            a_r, b_r = add(mul(wm_i, c(wtm)), r16), add(mul(wn_i, c(wtn)), r16)
        elif frag == "simdgroup":
            # the SIMD group's first row (column) of the tile: simdgroup_load reads whole 8x8 tiles
            a_r, b_r = mul(wm_i, c(wtm)), mul(wn_i, c(wtn))
        elif frag == "ldmatrix":
            # ldmatrix: lane l gives the address of row l % 8 of 8x8 matrix l // 8 (of the four A's fragment is made
            # of: rows +0/+8, K +0/+8 in that order; of the four of two B fragments side by side: K +0/+8, then N +8)
            sub, mat = mod(lane, c(8)), div(lane, c(8))
            a_r = add(mul(wm_i, c(wtm)), add(sub, mul(mod(mat, c(2)), c(8))))  # row within the slice
            # (K's next 16-byte chunk of a row: 8 halves on, or 4 floats for TF32)
            a_k = mul(div(mat, c(2)), c(plan.lanes))
            b_r = add(mul(wn_i, c(wtn)), add(sub, mul(div(mat, c(2)), c(8))))
            b_k = mul(mod(mat, c(2)), c(plan.lanes))
            # transposed staging: the matrices are 8 K-rows of 8 elements, so the lane's row runs along K instead
            if not plan.a_along_k:
                a_r, a_k = add(mul(wm_i, c(wtm)), mul(mod(mat, c(2)), c(8))), add(sub, mul(div(mat, c(2)), c(8)))
            if not plan.b_along_k:
                b_r, b_k = add(mul(wn_i, c(wtn)), mul(div(mat, c(2)), c(8))), add(sub, mul(mod(mat, c(2)), c(8)))
        # TF32 from a slice of B staged N-major: ldmatrix transposes only 16-bit elements, so lane (g, t) reads its
        # two floats of each N tile itself (_tc_b_floats), column g of the warp's tile
        b_floats = frag == "ldmatrix" and tc.dtype == f32 and not plan.b_along_k
        if b_floats:
            b_n = add(mul(wn_i, c(wtn)), grp)
        # wgmma leaves a slice's instructions in flight into the next step: the buffer they read is refilled one
        # step later than an mma.sync kernel's, so the copies run `lag` slices less ahead
        tma = getattr(cfg, "tma", 0)
        lag = (tcm.WGMMA_IN_FLIGHT_TMA if tma else tcm.WGMMA_IN_FLIGHT) if wg else 0
        # the other reduced dims' steps around K's: each stages K's slices again
        steps = ktiles
        for d in plan.outer:
            steps *= full[d]
        if tma:
            # TMA (see UOps.TMA): thread 0 copies whole slices; every stage is filled before the loop, and at step
            # k the stage of step k-1-lag (whose wgmma every warp has waited for by its step k-1) takes step
            # k+S-1-lag
            from tinygrad.codegen.tensor_cores import tma_box
            maps = []
            for is_a, op, name in ((True, plan.a, "tmap_a"), (False, plan.b, "tmap_b")):
                dims, strides, box, offset = tma_box(plan, is_a, full)
                maps.append(self._uop(UOps.TMA, None, (self.buf_uops[op.arg.idx],),
                                      ("map", name, offset, op.arg.dtype.itemsize, dims, strides, box, 128), False))
            bars = self._uop(UOps.DEFINE_LOCAL, PtrDType(dtypes.uint64), (), ("tc_bar", 2 * stages), False)
            self._uop(UOps.TMA, None, (bars, tid), ("init", stages, nthreads // 32 * tma, tma), False)
            leader = self._alu(BinaryOps.CMPEQ, dtypes.bool, (tid, c(0)))
            produce = ("produce", stages, size_a, size_b, plan.b_along_k, cfg.bn // 64, tma)
            if cfg.producer:
                # the last warp copies every step's slices, each once its stage is freed, and leaves
                self._uop(UOps.TMA, None, (bars, tid, smem_a, smem_b, maps[0], maps[1], row0_a, row0_b),
                          ("producer", stages, size_a, size_b, plan.b_along_k, cfg.bn // 64, steps, nthreads, tma),
                          False)
            for st_i in range(0 if cfg.producer else min(stages, steps)):
                self._uop(UOps.TMA, None, (bars, leader, c(st_i), smem_a, smem_b, maps[0], maps[1], row0_a, row0_b),
                          produce, False)
        elif asy:
            # the first stages-1-lag slices in flight, a group each (empty past the end, so every step commits one)
            for st_i in range(stages - 1 - lag):
                if st_i < steps:
                    for op, ax, rows, row0, smem, size, lay in ops:
                        self._tc_stage(self._tc_copy(op, ax, rows, row0, self._tc_step(st_i, ktiles, f"pre{st_i}"),
                                                     None, True), smem, c(st_i * size), lay)
                self._uop(UOps.ASYNC_COMMIT, None, (), None, False)
        else:
            # the first slice of K into buffer 0
            for op, ax, rows, row0, smem, _, lay in ops:
                self._tc_stage(self._tc_copy(op, ax, rows, row0, self._tc_step(0, ktiles, "pre0"), None, False), smem,
                               c(0), lay)
            self._uop(UOps.BARRIER, None, (), None, False)
        loop = self._uop(UOps.LOOP, i32, (c(0), c(steps)), None, False)
        self._open_scope()
        if tma:
            if not cfg.producer:
                ahead = add(loop, c(stages - 1 - lag))
                go = self._alu(BinaryOps.AND, dtypes.bool, (leader, self._alu(BinaryOps.AND, dtypes.bool, (
                    self._alu(BinaryOps.CMPLT, dtypes.bool, (c(lag), loop)),
                    self._alu(BinaryOps.CMPLT, dtypes.bool, (ahead, c(steps)))))))
                self._uop(UOps.TMA, None, (bars, go, ahead, smem_a, smem_b, maps[0], maps[1], row0_a, row0_b),
                          produce, False)
            self._uop(UOps.TMA, None, (bars, loop), ("wait", stages), False)
            cur = mod(loop, c(stages))
        elif asy:
            # this slice has landed (this thread's copies; the barrier makes everyone's visible, and says that every
            # thread is done with the buffer the next copies overwrite), then the slice stages-1 ahead is started
            self._uop(UOps.ASYNC_WAIT, None, (), stages - 2 - lag, False)
            if wg:
                # the copies were writes of this thread; wgmma reads through the asynchronous proxy
                self._uop(UOps.FENCE, None, (), "async_proxy", False)
            self._uop(UOps.BARRIER, None, (), None, False)
            ahead = add(loop, c(stages - 1 - lag))
            more = self._alu(BinaryOps.CMPLT, dtypes.bool, (ahead, c(steps)))
            buf = mod(ahead, c(stages))
            at = self._tc_step(ahead, ktiles, "ahead")
            for op, ax, rows, row0, smem, size, lay in ops:
                self._tc_stage(self._tc_copy(op, ax, rows, row0, at, more, True), smem, mul(buf, c(size)), lay)
            self._uop(UOps.ASYNC_COMMIT, None, (), None, False)
            cur = mod(loop, c(stages))
        else:
            # the next slice is read into registers now, and written to the other buffer once this one is used
            nxt = add(loop, c(1))
            more = self._alu(BinaryOps.CMPLT, dtypes.bool, (nxt, c(steps)))
            at = self._tc_step(nxt, ktiles, "next")
            staged = [self._tc_copy(op, ax, rows, row0, at, more, False) for op, ax, rows, row0, _, _, _ in ops]
            cur = mod(loop, c(2))
        base_a, base_b = mul(cur, c(size_a)), mul(cur, c(size_b))
        if wg:
            # the whole slice (BK/16 instructions issued together) on the group's rows; the previous slice's are
            # waited for (every group has, once past the next barrier: its buffer is then refilled)
            out = self._uop(UOps.WMMA, acc_wg.dtype, (smem_a, add(base_a, wg_a), smem_b, base_b, acc_wg),
                            (tc.name, (cfg.bn, plan.b_along_k, b_atoms, lag)), False)
            acc_wg = self._uop(UOps.PHI, acc_wg.dtype, (acc_wg, out, loop), None, False)
            if tma:
                # the instructions of the slice `lag` steps back are done (the wgmma waited for them): its stage is
                # free
                go = self._alu(BinaryOps.CMPEQ, dtypes.bool, (mod(tid, c(32)), c(0)))
                if lag:
                    go = self._alu(BinaryOps.AND, dtypes.bool, (go, self._alu(BinaryOps.CMPLT, dtypes.bool, (
                        c(lag - 1), loop))))
                self._uop(UOps.TMA, None, (bars, add(loop, c(-lag)) if lag else loop, go), ("release", stages, tma),
                          False)
        elif simt:
            for kk in range(cfg.bk):
                # slices are rows-major: 4 consecutive rows (columns) of one k are one 16-byte read
                va = [self._uop(UOps.LOAD, f32.vec(4), (smem_a, add(base_a, add(c(kk * cfg.bm + g * gap_m), row_t))),
                                "aligned", False) for g in range(cfg.tm // 4)]
                vb = [self._uop(UOps.LOAD, f32.vec(4), (smem_b, add(base_b, add(c(kk * cfg.bn + g * gap_n), col_t))),
                                "aligned", False) for g in range(cfg.tn // 4)]
                for i in range(cfg.tm):
                    a_s = self._uop(UOps.GEP, f32, (va[i // 4],), i % 4)
                    a4 = self._uop(UOps.VECTORIZE, f32.vec(4), (a_s,) * 4, None)
                    for j in range(cfg.tn // 4):
                        acc = accs[i][j]
                        prod = self._uop(UOps.ALU, f32.vec(4), (a4, vb[j]), BinaryOps.MUL, False)
                        out = self._uop(UOps.ALU, f32.vec(4), (prod, acc), BinaryOps.ADD, False)
                        accs[i][j] = self._uop(UOps.PHI, acc.dtype, (acc, out, loop), None, False)
        else:
            for kk in range(0, cfg.bk, tc.k):
                if frag == "lane":
                    frag_a = [self._tc_lane_frag(smem_a, base_a, add(a_r, c(mt * tc.m)), kk, cfg.bm, plan.a_along_k)
                              for mt in range(tiles_m)]
                    frag_b = [self._tc_lane_frag(smem_b, base_b, add(b_r, c(nt * tc.n)), kk, cfg.bn, plan.b_along_k)
                              for nt in range(tiles_n)]
                elif frag == "simdgroup":
                    frag_a = [self._tc_sg_frag(smem_a, base_a, add(a_r, c(mt * tc.m)), kk, cfg.bm, plan.a_along_k,
                                               False) for mt in range(tiles_m)]
                    frag_b = [self._tc_sg_frag(smem_b, base_b, add(b_r, c(nt * tc.n)), kk, cfg.bn, plan.b_along_k,
                                               True) for nt in range(tiles_n)]
                else:
                    # NOTE: the swizzle makes each fragment's address a function of its row and K, not one base's
                    # offset
                    frag_a = [self._uop(UOps.LOAD, u16.vec(8), (smem_a, add(base_a, self._tc_at(
                        add(a_r, c(mt * tc.m)), add(a_k, c(kk)), cfg.bm, plan.a_along_k))),
                        "ldmatrix" if plan.a_along_k else "ldmatrix.trans", False) for mt in range(tiles_m)]
                    if b_floats:
                        frag_b = [self._tc_b_floats(smem_b, base_b, add(b_n, c(nt * tc.n)), add(quad, c(kk)))
                                  for nt in range(tiles_n)]
                    else:
                        # B's fragments two N tiles at a time (tiles_n is even: TCPlan's configs divide by 16 along N)
                        frag_b = [self._uop(UOps.LOAD, u16.vec(8), (smem_b, add(base_b, self._tc_at(
                            add(b_r, c(nt * tc.n)), add(b_k, c(kk)), cfg.bn, plan.b_along_k))),
                            "ldmatrix" if plan.b_along_k else "ldmatrix.trans", False) for nt in range(0, tiles_n, 2)]
                for mt in range(tiles_m):
                    for nt in range(tiles_n):
                        acc = accs[mt][nt]
                        # ldmatrix's B fragments hold two N tiles: which half this one is
                        fb, part = (frag_b[nt // 2], nt % 2) if frag == "ldmatrix" and not b_floats else \
                            (frag_b[nt], None)
                        out = self._uop(UOps.WMMA, acc.dtype, (frag_a[mt], fb, acc), (tc.name, part), False)
                        accs[mt][nt] = self._uop(UOps.PHI, acc.dtype, (acc, out, loop), None, False)
        if not asy:
            nbuf = mod(add(loop, c(1)), c(2))
            for chunks, (_, _, _, _, smem, size, lay) in zip(staged, ops):
                self._tc_stage(chunks, smem, mul(nbuf, c(size)), lay)
            self._uop(UOps.BARRIER, None, (), None, False)
        self._close_scope()
        self._uop(UOps.ENDLOOP, None, (loop,), None, False)
        if wg:
            acc_wg = self._uop(UOps.WMMA, acc_wg.dtype, (acc_wg,), (tc.name, ("wait", cfg.bn)), False)
        if tma:
            self._uop(UOps.TMA, None, (), ("exit", tma), False)
        # the accumulators through the kernel's elementwise tail: each tiled dim's copies are offsets from the
        # thread's base row (column)
        if wg:
            # warp w (of all the block's) holds rows 16w+g and 16w+g+8, columns 8j+2q and 8j+2q+1 of its group
            off_m = [0, 8]
            off_n = [(i // 2) * 8 + i % 2 for i in range(cfg.bn // 4)]
            base_m = add(row0_a, add(mul(warp, c(16)), grp))
            base_n = add(row0_b, mul(quad, c(2)))
        elif simt:
            off_m = [(i // 4) * gap_m + i % 4 for i in range(cfg.tm)]
            off_n = [(j // 4) * gap_n + j % 4 for j in range(cfg.tn)]
            base_m, base_n = add(row0_a, row_t), add(row0_b, col_t)
        elif frag == "lane":
            # RDNA3: copy (8*tile + v) of M is row tile*16 + 2v of the lane's half (l // 16), copy j of N the lane's
            # column of tile j
            off_m = [(i // 8) * tc.m + (i % 8) * 2 for i in range(8 * tiles_m)]
            off_n = [j * tc.n for j in range(tiles_n)]
            base_m = add(row0_a, add(mul(wm_i, c(wtm)), hi))
            base_n = add(row0_b, add(mul(wn_i, c(wtn)), r16))
        elif frag == "simdgroup":
            # each 8x8 accumulator stored through the SIMD group's tile of threadgroup memory: lane (grp, quad) reads
            # row grp, columns 2*quad and 2*quad+1 (one barrier before, so the tile is whole; one after, so the
            # next store waits for every lane's read)
            at_w = mul(warp, c(64))
            back = [[None] * tiles_n for _ in range(tiles_m)]
            for mt in range(tiles_m):
                for nt in range(tiles_n):
                    self._uop(UOps.STORE, None, (smem_c, at_w, accs[mt][nt]), ("simdgroup", tc.n), False)
                    self._uop(UOps.BARRIER, None, (), None, False)
                    back[mt][nt] = self._uop(UOps.LOAD, f32.vec(2), (smem_c, add(at_w, add(mul(grp, c(8)), mul(
                        quad, c(2))))), "aligned", False)
                    self._uop(UOps.BARRIER, None, (), None, False)
            off_m = [i * tc.m for i in range(tiles_m)]
            off_n = [(j // 2) * tc.n + j % 2 for j in range(2 * tiles_n)]
            base_m = add(row0_a, add(mul(wm_i, c(wtm)), grp))
            base_n = add(row0_b, add(mul(wn_i, c(wtn)), mul(quad, c(2))))
        else:
            # tensor cores: copy (2*tile + half) of M is row tile*16 + 8*half of the warp's part, copy (2*tile + j)
            # of N column tile*8 + j (the pairs of C's layout)
            off_m = [(i // 2) * tc.m + (i % 2) * 8 for i in range(2 * tiles_m)]
            off_n = [(i // 2) * tc.n + i % 2 for i in range(2 * tiles_n)]
            base_m = add(row0_a, add(mul(wm_i, c(wtm)), grp))
            base_n = add(row0_b, add(mul(wn_i, c(wtn)), mul(quad, c(2))))
        vm = Variable("tc_row", 0, tiles_y * cfg.bm - 1 - max(off_m))
        # (for wgmma tc_col is even: _tc_store_pair relies on it)
        vn = Variable("tc_col", 0, tiles_x * cfg.bn - 1 - max(off_n))
        self._var_uops[vm], self._var_uops[vn] = base_m, base_n
        self._tc_bases[m_ax], self._tc_bases[n_ax] = vm, vn
        self._tc_offsets[m_ax], self._tc_offsets[n_ax] = off_m, off_n
        self.upcasts[m_ax], self.upcasts[n_ax] = len(off_m), len(off_n)
        vals = {}
        for cm in range(len(off_m)):
            for cn in range(len(off_n)):
                if wg:
                    vals[(cm, cn)] = self._uop(UOps.GEP, tc.acc, (acc_wg,), (cn // 2) * 4 + cm * 2 + cn % 2)
                elif simt:
                    vals[(cm, cn)] = self._uop(UOps.GEP, f32, (accs[cm][cn // 4],), cn % 4)
                elif frag == "lane":
                    vals[(cm, cn)] = self._uop(UOps.GEP, tc.acc, (accs[cm // 8][cn],), cm % 8)
                elif frag == "simdgroup":
                    vals[(cm, cn)] = self._uop(UOps.GEP, tc.acc, (back[cm][cn // 2],), cn % 2)
                else:
                    vals[(cm, cn)] = self._uop(UOps.GEP, tc.acc, (accs[cm // 2][cn // 2],), (cm % 2) * 2 + cn % 2)
        red = ([m_ax, n_ax], vals)
        self.loop_order = [d for d in range(len(full)) if d not in self.reduce_axes]
        memo = {}
        paired = set()
        for g in self._combos(self.loop_order):
            if g in paired:
                continue
            if wg and len(self.ast) == 1 and g[n_ax] % 2 == 0 and self._tc_store_pair(g, n_ax, red, memo):
                paired.add(g[:n_ax] + (g[n_ax] + 1,) + g[n_ax + 1:])
                continue
            for root in self.ast:
                self._store(root.arg, g, self._lower_ast(root.src[0], g, True, red, memo))

    def _tc_store_pair(self, g, n_ax, red, memo):
        """Stores the half (bfloat16) outputs of copies g and g+1 along N as one 4-byte store where they are
        neighbours with the same condition, and says so: a warp's stores of its accumulators then write 16 bytes a
        row, not 4 scattered halves (the wgmma kernels' epilogue)."""
        mb = self.ast[0].arg
        if mb.dtype not in (dtypes.float16, dtypes.bfloat16):
            return False
        g1 = g[:n_ax] + (g[n_ax] + 1,) + g[n_ax + 1:]
        if g1[n_ax] >= len(self._tc_offsets[n_ax]) or self._tc_offsets[n_ax][g1[n_ax]] != \
                self._tc_offsets[n_ax][g[n_ax]] + 1:
            return False
        nodes0, nodes1 = self._idx_nodes(g, True), self._idx_nodes(g1, True)
        idx0, valid0 = mb.st.expr_idxs(nodes0)
        idx1, valid1 = mb.st.expr_idxs(nodes1)
        if self._dim_limits:
            valid0, valid1 = self._limits_valid(valid0, nodes0), self._limits_valid(valid1, nodes1)
        # neighbours whatever the thread (the difference folds to 1), under one condition, at an even element (a
        # 4-byte aligned address: the buffer starts aligned, and every term of the index is even)
        diff = idx1 - idx0
        if not (isinstance(diff, NumNode) and diff.b == 1) or valid0.render() != valid1.render():
            return False
        if not _even(idx0, self._tc_bases[n_ax]):
            return False
        u16 = dtypes.uint16
        bits = [self._uop(UOps.BITCAST, u16, (self._lower_ast(self.ast[0].src[0], c, True, red, memo),), None)
                for c in (g, g1)]
        vin = (self.buf_uops[mb.idx], self._lower_node(idx0), self._uop(UOps.VECTORIZE, u16.vec(2), tuple(bits), None))
        gate = self._gated(valid0)
        self._uop(UOps.STORE, None, vin + ((gate,) if gate is not None else ()), "aligned", False)
        return True

    def _pads_to_zero(self, axis):
        """Is every term of the kernel's reduction zero past the end of `axis`, where every leaf (load, constant,
        index) reads 0? Then padding the reduced `axis` leaves the sum as it is."""
        red = self.reduceop
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

    def _tc_at(self, r, k, rows, k_major):
        """The element offset of (row `r`, `k`) in a staged slice of `rows` rows (see tensor_cores.slice_elems and
        swizzle: tensor-core slices are swizzled by 16-byte chunks, so there the position along a slice's row must be
        a chunk's first element)."""
        from tinygrad.codegen.tensor_cores import swizzle
        i32 = dtypes.int32
        row_elems = self.tc.config.bk if k_major else rows
        row, col = (r, k) if k_major else (k, r)
        def c(v):
            return self._const(v, i32)
        if not self.tc.swizzled:
            return self._alu(BinaryOps.ADD, i32, (self._alu(BinaryOps.MUL, i32, (row, c(row_elems))), col))
        if getattr(self.tc.config, "wgmma", False) and not k_major:
            # wgmma's N-major layout: atoms of 64 columns (128 bytes) by BK rows of K, one after another; in an
            # atom, chunk c of row k at chunk c ^ (k % 8) (the 128-byte swizzle)
            bk = self.tc.config.bk
            atom = self._alu(BinaryOps.MUL, i32, (self._alu(BinaryOps.DIV, i32, (col, c(64))), c(bk * 64)))
            chunk = self._alu(BinaryOps.XOR, i32, (self._alu(BinaryOps.DIV, i32, (
                self._alu(BinaryOps.MOD, i32, (col, c(64))), c(8))), self._alu(BinaryOps.MOD, i32, (row, c(8)))))
            return self._alu(BinaryOps.ADD, i32, (atom, self._alu(BinaryOps.ADD, i32, (
                self._alu(BinaryOps.MUL, i32, (row, c(64))), self._alu(BinaryOps.MUL, i32, (chunk, c(8)))))))
        nl = self.tc.lanes
        per_line, chunks = swizzle(row_elems, nl)
        line = self._alu(BinaryOps.DIV, i32, (row, c(per_line))) if per_line > 1 else row
        sw = self._alu(BinaryOps.MOD, i32, (line, c(chunks)))
        chunk = self._alu(BinaryOps.XOR, i32, (self._alu(BinaryOps.DIV, i32, (col, c(nl))), sw))
        return self._alu(BinaryOps.ADD, i32, (self._alu(BinaryOps.MUL, i32, (row, c(row_elems))),
                                              self._alu(BinaryOps.MUL, i32, (chunk, c(nl)))))

    def _tc_b_floats(self, smem, base, n, k):
        """mma.sync m16n8k8 TF32's B fragment of lane (g, t) from an N-major slice: the floats at (K k, column n) and
        (K k + 4, column n), with k = t and n = g of the tile, as the four 16-bit halves of its two registers."""
        i32, u16, nl = dtypes.int32, dtypes.uint16, self.tc.lanes
        def c(v):
            return self._const(v, i32)
        within = self._alu(BinaryOps.MOD, i32, (n, c(nl)))
        start = self._alu(BinaryOps.SUB, i32, (n, within))
        halves = []
        for dk in (0, 4):
            at = self._alu(BinaryOps.ADD, i32, (self._tc_at(start, self._alu(BinaryOps.ADD, i32, (k, c(dk))),
                                                            self.tc.config.bn, False), within))
            v = self._uop(UOps.LOAD, u16.vec(2), (smem, self._alu(BinaryOps.ADD, i32, (base, at))), "reinterpret",
                          False)
            halves += [self._uop(UOps.GEP, u16, (v,), 0), self._uop(UOps.GEP, u16, (v,), 1)]
        return self._uop(UOps.VECTORIZE, u16.vec(4), tuple(halves), None)

    def _tc_lane_frag(self, smem, base, r, kk, rows, k_major):
        """A lane's fragment of RDNA3's WMMA: the 16 elements (K from `kk`) of row `r` of a staged slice of `rows`
        rows, as a 16-element vector: two 16-byte loads where the slice is K-major (K is then two whole chunks),
        else 16 loads of one element (the slice's rows are K, so the lane's elements are a column of it)."""
        i32, u16 = dtypes.int32, dtypes.uint16
        def c(v):
            return self._const(v, i32)
        def add(a, b):
            return self._alu(BinaryOps.ADD, i32, (a, b))
        if k_major:
            halves = [self._uop(UOps.LOAD, u16.vec(8), (smem, add(base, self._tc_at(r, c(kk + h), rows, True))),
                               "aligned", False) for h in (0, 8)]
            lanes = tuple(self._uop(UOps.GEP, u16, (halves[j // 8],), j % 8) for j in range(16))
        else:
            # _tc_at places a chunk's first element: the lane's row is that chunk's start plus r % 8
            r_in = self._alu(BinaryOps.MOD, i32, (r, c(8)))
            r_chunk = self._alu(BinaryOps.SUB, i32, (r, r_in))
            lanes = tuple(self._uop(UOps.LOAD, u16, (smem, add(base, add(self._tc_at(r_chunk, c(kk + j), rows, False),
                                                                          r_in))), "bits", False) for j in range(16))
        return self._uop(UOps.VECTORIZE, u16.vec(16), lanes, None)

    def _tc_sg_frag(self, smem, base, r0, kk, rows, k_major, is_b):
        """A SIMD group's simdgroup_load of the 8x8 tile at row `r0`, K from `kk`, of a staged slice (unswizzled) of
        `rows` rows: A's tile is rows x K, B's K x columns, so the tile is loaded transposed where its slice stores
        the other way round (A staged with M contiguous, B staged with K contiguous). The value is the lane's
        thread_elements (2 of the 64)."""
        i32 = dtypes.int32
        stride = self.tc.config.bk if k_major else rows
        at = self._alu(BinaryOps.ADD, i32, (base, self._tc_at(r0, self._const(kk, i32), rows, k_major)))
        return self._uop(UOps.LOAD, self.tc.elem.vec(2), (smem, at), ("simdgroup", stride, k_major == is_b), False)

    def _tc_step(self, step, ktiles, tag):
        """Where pipeline step `step` (an int, or a uop) reads: (K's first index, {other reduced dim: its index}).
        Steps run K's slices innermost, then the other reduced dims (TCPlan.outer) in order, the last fastest."""
        i32, bk = dtypes.int32, self.tc.config.bk
        full, outer = self.full_shape, self.tc.outer
        def c(v):
            return self._const(v, i32)
        if isinstance(step, int):
            at, rest = {}, step // ktiles
            for d in reversed(outer):
                at[d], rest = NumNode(rest % full[d]), rest // full[d]
            return c((step % ktiles) * bk), at
        if not outer:
            return self._alu(BinaryOps.MUL, i32, (step, c(bk))), {}
        kt = self._alu(BinaryOps.MOD, i32, (step, c(ktiles))) if ktiles > 1 else c(0)
        rest = self._alu(BinaryOps.DIV, i32, (step, c(ktiles))) if ktiles > 1 else step
        at = {}
        for i, d in enumerate(reversed(outer)):
            v = Variable(f"tc_{tag}_r{d}", 0, full[d] - 1)
            last = i == len(outer) - 1
            # the outermost reduced dim takes what is left: the step never runs past the last one's end
            self._var_uops[v] = rest if last else self._alu(BinaryOps.MOD, i32, (rest, c(full[d])))
            if not last:
                rest = self._alu(BinaryOps.DIV, i32, (rest, c(full[d])))
            at[d] = v
        return self._alu(BinaryOps.MUL, i32, (kt, c(bk))), at

    def _tc_copy(self, op, rows_axis, rows, row0, at, gate, asy):
        """This thread's share of a rows x BK slice of operand `op` (rows from `row0` along `rows_axis`, K and the
        other reduced dims where `at` says, from _tc_step):
        [(row in the slice, k in the slice, is the chunk along K, 8 consecutive elements' 16-bit patterns)], chunks
        along K where the slice is staged K-major, else along the rows; read as one 16-byte vector where the operand
        is contiguous along the chunk, else element by element. `gate`: read only where true (else zeros). `asy`:
        the chunks are copied asynchronously (tensor_cores.copies_async holds): the last item is then (the buffer,
        the chunk's index, its condition or None) for COPY_ASYNC instead of a value."""
        from tinygrad.codegen.tensor_cores import along_k
        cfg = self.tc.config
        i32, el, nl = dtypes.int32, self.tc.elem, self.tc.lanes
        full, st = self.full_shape, op.arg.st
        nthreads = cfg.threads
        k_ax = self.tc.k_axis
        k_major = along_k(st, rows_axis, k_ax)
        inner = cfg.bk // nl if k_major else rows // nl
        outer_step = nthreads // inner
        n_chunks = rows * cfg.bk // nl // nthreads
        def c(v):
            return self._const(v, i32)
        tid = self._thread_id
        t_out = self._alu(BinaryOps.DIV, i32, (tid, c(inner)))
        t_in = self._alu(BinaryOps.MUL, i32, (self._alu(BinaryOps.MOD, i32, (tid, c(inner))), c(nl)))
        lane = Variable("tc_lane", 0, nl - 1)
        k0, outer_at = at
        out = []
        # bounds of the tiles' whole range: past the end of a dim no tile divides, the limits below say no
        padded_rows = -(-full[rows_axis] // rows) * rows
        padded_k = -(-full[k_ax] // cfg.bk) * cfg.bk
        for i in range(n_chunks):
            o = self._alu(BinaryOps.ADD, i32, (t_out, c(i * outer_step)))
            r_in, k_in = (o, t_in) if k_major else (t_in, o)
            vr = Variable(f"tc_r{rows_axis}_{i}", 0, padded_rows - (nl if not k_major else 1))
            vk = Variable(f"tc_k{rows_axis}_{i}", 0, padded_k - (nl if k_major else 1))
            self._var_uops[vr] = self._alu(BinaryOps.ADD, i32, (row0, r_in))
            self._var_uops[vk] = self._alu(BinaryOps.ADD, i32, (k0, k_in))
            nodes = self._tc_nodes(rows_axis, vr if k_major else vr + lane, vk + lane if k_major else vk, outer_at)
            idx, valid = st.expr_idxs(nodes)
            limits = [valid]
            # NOTE: a chunk starts at a multiple of its lanes, so where the dim's size is one too, the chunk is wholly
            # inside or wholly past the end: its start says which (a condition the same in every lane)
            if padded_rows != full[rows_axis]:
                whole = not k_major and full[rows_axis] % nl == 0
                limits.append((vr if whole else nodes[rows_axis]) < full[rows_axis])
            if padded_k != full[k_ax]:
                whole = k_major and full[k_ax] % nl == 0
                limits.append((vk if whole else nodes[k_ax]) < full[k_ax])
            if len(limits) > 1:
                valid = Node.ands(limits)
            base = _lane_base(idx, lane) if lane not in valid.vars() else None
            if i == 0 and base is None and not asy and not k_major and nthreads % rows == 0:
                # read element by element along the rows: a thread an element, neighbours reading neighbours
                return self._tc_copy_spread(op, rows_axis, rows, row0, at, gate)
            if asy:
                if base is None:
                    raise RuntimeError("internal error: an asynchronous copy of elements that are not consecutive")
                out.append((r_in, k_in, k_major, rows, (self.buf_uops[op.arg.idx], self._lower_node(base),
                                                        self._tc_cond(valid, gate))))
                continue
            # tensor-core operands move as 16-bit patterns ("bits": a half is not converted to a float register)
            zero = self._const(dtypes.as_const(0, el), el)
            if base is not None:
                vin = (self.buf_uops[op.arg.idx], self._lower_node(base))
                cond = self._tc_cond(valid, gate)
                if cond is not None:
                    vin = vin + (cond, self._uop(UOps.VECTORIZE, el.vec(nl), (zero,) * nl, None))
                val = self._uop(UOps.LOAD, el.vec(nl), vin, None, False)
            else:
                elems = []
                for j in range(nl):
                    li, lv = idx.substitute({lane: NumNode(j)}), valid.substitute({lane: NumNode(j)})
                    if _is_false(lv):
                        elems.append(zero)
                        continue
                    vin = (self.buf_uops[op.arg.idx], self._lower_node(li))
                    cond = self._tc_cond(lv, gate)
                    if cond is not None:
                        vin = vin + (cond, zero)
                    elems.append(self._uop(UOps.LOAD, el, vin, None if el.itemsize == 4 else "bits", False))
                val = self._uop(UOps.VECTORIZE, el.vec(nl), tuple(elems), None)
            out.append((r_in, k_in, k_major, rows, val))
        return out

    def _tc_nodes(self, rows_axis, r, k, outer_at):
        """Index nodes of the full shape for a staged slice's element: `r` along the operand's rows, `k` along K, the
        tile's bases (the batch) and the other reduced dims where `outer_at` says (_tc_step), 0 elsewhere."""
        nodes = []
        for d in range(len(self.full_shape)):
            if d == rows_axis:
                nodes.append(r)
            elif d == self.tc.k_axis:
                nodes.append(k)
            elif d in self._tc_bases:
                nodes.append(self._tc_bases[d])
            elif d in outer_at:
                nodes.append(outer_at[d])
            else:
                nodes.append(NumNode(0))
        return nodes

    def _tc_copy_spread(self, op, rows_axis, rows, row0, at, gate):
        """_tc_copy for an operand read along its rows one element at a time (a convolution's padded window): element
        e = tid + m * threads of the rows x BK slice is row e % rows, k e // rows, so a warp's 32 threads read 32
        neighbours in one transaction, where 8-element chunks a thread would spread each read of a warp over 8 times
        the bytes. Items (row, k, None, rows, the element), stored one by one (_tc_stage)."""
        cfg = self.tc.config
        i32, el = dtypes.int32, self.tc.elem
        full, st, k_ax = self.full_shape, op.arg.st, self.tc.k_axis
        nthreads = cfg.threads
        def c(v):
            return self._const(v, i32)
        tid = self._thread_id
        r_in = self._alu(BinaryOps.MOD, i32, (tid, c(rows))) if nthreads > rows else tid
        k_first = self._alu(BinaryOps.DIV, i32, (tid, c(rows))) if nthreads > rows else c(0)
        k0, outer_at = at
        padded_rows = -(-full[rows_axis] // rows) * rows
        padded_k = -(-full[k_ax] // cfg.bk) * cfg.bk
        vr = Variable(f"tc_sr{rows_axis}", 0, padded_rows - 1)
        self._var_uops[vr] = self._alu(BinaryOps.ADD, i32, (row0, r_in))
        zero = self._const(dtypes.as_const(0, el), el)
        out = []
        for m in range(rows * cfg.bk // nthreads):
            k_in = self._alu(BinaryOps.ADD, i32, (k_first, c(m * (nthreads // rows))))
            vk = Variable(f"tc_sk{rows_axis}_{m}", 0, padded_k - 1)
            self._var_uops[vk] = self._alu(BinaryOps.ADD, i32, (k0, k_in))
            idx, valid = st.expr_idxs(self._tc_nodes(rows_axis, vr, vk, outer_at))
            limits = [valid]
            if padded_rows != full[rows_axis]:
                limits.append(vr < full[rows_axis])
            if padded_k != full[k_ax]:
                limits.append(vk < full[k_ax])
            if len(limits) > 1:
                valid = Node.ands(limits)
            if _is_false(valid):
                val = zero
            else:
                vin = (self.buf_uops[op.arg.idx], self._lower_node(idx))
                cond = self._tc_cond(valid, gate)
                if cond is not None:
                    vin = vin + (cond, zero)
                val = self._uop(UOps.LOAD, el, vin, None if el.itemsize == 4 else "bits", False)
            out.append((r_in, k_in, None, rows, val))
        return out

    def _tc_elem_at(self, r, k, rows, layout_k):
        """The offset of one element (row `r`, `k`) in a staged slice: a swizzled slice places whole chunks
        (_tc_at), so the element's own place in its chunk goes on top."""
        if not self.tc.swizzled:
            return self._tc_at(r, k, rows, layout_k)
        i32, nl = dtypes.int32, self.tc.lanes
        col = k if layout_k else r
        within = self._alu(BinaryOps.MOD, i32, (col, self._const(nl, i32)))
        col = self._alu(BinaryOps.SUB, i32, (col, within))
        return self._alu(BinaryOps.ADD, i32, (self._tc_at(r, col, rows, True) if layout_k else
                                              self._tc_at(col, k, rows, False), within))

    def _limits_valid(self, valid, nodes):
        """`valid` and the dims' limits: past the end of a dim its loop overruns (a tile's partial end, PADTO) there
        is nothing to read or store."""
        return Node.ands([valid] + [nodes[d] < lim for d, lim in self._dim_limits.items()])

    def _tc_cond(self, valid, gate):
        if _is_true(valid):
            return gate
        v = self._lower_node(valid)
        return v if gate is None else self._alu(BinaryOps.AND, dtypes.bool, (v, gate))

    def _tc_stage(self, chunks, smem, base, layout_k):
        """Writes chunks read by _tc_copy into a staged slice at `base`, K-major or not (`layout_k`): a chunk along
        the slice's rows is one 16-byte store, a chunk across them (an SMEM operand read along K) one store per
        element."""
        i32, nl = dtypes.int32, self.tc.lanes
        for r_in, k_in, k_major, rows, val in chunks:
            if k_major is None:
                self._uop(UOps.STORE, None, (smem, self._alu(BinaryOps.ADD, i32, (
                    base, self._tc_elem_at(r_in, k_in, rows, layout_k))), val), None, False)
                continue
            if k_major != layout_k:
                for j in range(nl):
                    rj, kj = (r_in, self._alu(BinaryOps.ADD, i32, (k_in, self._const(j, i32)))) if k_major else \
                        (self._alu(BinaryOps.ADD, i32, (r_in, self._const(j, i32))), k_in)
                    lane = val.vin[j] if val.uop is UOps.VECTORIZE else self._uop(UOps.GEP, self.tc.elem, (val,), j)
                    self._uop(UOps.STORE, None, (smem, self._alu(BinaryOps.ADD, i32, (
                        base, self._tc_elem_at(rj, kj, rows, layout_k))), lane), None, False)
                continue
            at = self._alu(BinaryOps.ADD, i32, (base, self._tc_at(r_in, k_in, rows, k_major)))
            if isinstance(val, tuple):
                buf, idx, cond = val
                self._uop(UOps.COPY_ASYNC, None, (smem, at, buf, idx) + ((cond,) if cond is not None else ()), 16,
                          False)
            else:
                self._uop(UOps.STORE, None, (smem, at, val), "aligned", False)

def _scalar_dtype(v):
    if isinstance(v, tuple):
        return v[0].dtype
    return v.dtype.scalar() if v.dtype.count > 1 else v.dtype


def _lane_base(idx, lane):
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


def _terms(node):
    return list(node.nodes) if isinstance(node, SumNode) else [node]


def _even(node, even_var):
    """Is every value of `node` even? Where each term is a multiple of 2: an even constant, `even_var` (a
    Variable known to be even), or a product of either."""
    for t in _terms(node):
        if isinstance(t, NumNode):
            if t.b % 2:
                return False
        elif isinstance(t, MulNode):
            if not ((isinstance(t.b, int) and t.b % 2 == 0) or t.a is even_var):
                return False
        elif t is not even_var:
            return False
    return True


def _sint_prod(xs):
    """The product of ints and symbolic sizes (an int when every factor is)."""
    out = 1
    for x in xs:
        out = x * out if isinstance(x, Node) else out * x
    return out


def _is_one(s):
    return isinstance(s, int) and s == 1


def _is_zero(s):
    return (isinstance(s, int) and s == 0) or (isinstance(s, NumNode) and s.b == 0)


def _same(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return (not isinstance(a, int)) and (not isinstance(b, int)) and a == b


def _max_index(s):
    return s - 1 if isinstance(s, int) else s.max - 1


def _is_true(valid):
    return isinstance(valid, int) and valid == 1 or isinstance(valid, NumNode) and valid.b == 1


def _is_false(valid):
    return isinstance(valid, int) and valid == 0 or isinstance(valid, NumNode) and valid.b == 0

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

A row kernel (engine/fuse_rows.py: softmax, norms) holds a chain of reduces over the same rows, each its own loop over
the row in turn, and may store a whole row after them: codegen/rows.py.

A matmul-shaped kernel with the TC or SMEM Opt is a block tile staged in shared memory: codegen/lower_tc.py lowers
it (through the same Emitter), and its accumulators come back through the kernel's elementwise tail to the stores, by
the same `_lower_ast` and `_store` as the other kernels (each tiled dim's copies are offsets from the thread's base).
"""
from itertools import product

from tinygrad.codegen import gather, packed_halves, rows
from tinygrad.codegen.accumulate import SUM_BLOCK, TILE_SUM_BLOCK, needs_blocks, plan_blocks
from tinygrad.codegen.ast_facts import LEAVES, is_one, op_dims, out_dtype, pads_to_zero
from tinygrad.codegen.byte_pairs import merge_byte_pairs
from tinygrad.codegen.emitter import Emitter, is_false, is_true, lane_base
from tinygrad.codegen.index_math import all_even, max_index, same_size, sint_prod
from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.codegen.tile_values import TileValues
from tinygrad.codegen.uops import UOps
from tinygrad.dtype import PtrDType, dtypes
from tinygrad.helpers import DEBUG, NOOPT, to_function_name, toposort
from tinygrad.ops import BinaryOps, BufferOps, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.symbolic import Node, NumNode, Variable

# the binary op that folds one more element into a reduction
_REDUCE_ALU = {ReduceOps.SUM: BinaryOps.ADD, ReduceOps.MAX: BinaryOps.MAX, ReduceOps.PROD: BinaryOps.MUL}


def _topo_to_reduce(root):
    """The nodes of `root` once each, sources first, not descending into a reduce (its value is the accumulator)."""
    return toposort(root, lambda op: () if isinstance(op.op, ReduceOps) else op.src)


class Linearizer(TileValues):
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
        # the reduces (a row kernel's chain: each reads the ones before it), sources first, and the shapes iterated
        self.reduceop = None
        self.reduceops = []
        self.op_dtypes = {}
        seen_reduces = set()
        for root in self.ast:
            for op in root.toposort():
                if isinstance(op.op, ReduceOps) and op not in seen_reduces:
                    # NOTE: a chain's reduce may be in the AST twice (read in the row and after it): equal LazyOps
                    seen_reduces.add(op)
                    self.reduceops.append(op)
                    self.reduceop = op
                if id(op) not in self.op_dtypes:
                    self.op_dtypes[id(op)] = out_dtype(op, self.op_dtypes)
        self.output_shape = tuple(self.ast[0].arg.st.shape)
        self.full_shape = self._reduce_input_shape() if self.reduceop is not None else self.output_shape
        full, out = self.full_shape, self.output_shape
        self.reduce_axes = tuple([i for i in range(len(full))
                                  if self.reduceop is not None and not same_size(out[i], full[i])])
        rows.classify(self)  # row_kernel, row_tail
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
        self._tile_bases = None
        self._tile_offsets = None
        self._tile_split = None
        self._gate = None
        # a grouped kernel's (or a TC kernel's) thread position, set by _grid_indices (or _lower_tc)
        self._group_idx = self._base_id = self._thread_id = None
        self._block_threads = 0
        self._group_stride = 1  # between the slots of a group's neighbouring threads in shared memory
        # linearize's state: the CSE table and its scopes, each Variable's uop, the loop indices, the lane Variable
        self.buf_uops = {}
        self.em = Emitter(self.uops)
        self._topos = {}
        self._loop_vars, self._lane = [], None
        self._decided = False
        self.op_dims = op_dims(self.ast, self.reduce_axes)
        self.name = self._make_name()
        self.gpu = False
        if opts is not None and getattr(opts, "has_local", False):
            from tinygrad.codegen.heuristic_gpu import uses_grid
            # a row kernel takes the grid: a thread, or a group of threads (rows.row_opts), a row
            self.gpu = self.row_kernel or uses_grid(self)

    def _reduce_input_shape(self):
        for op in self.reduceop.toposort():
            if op.op in LEAVES:
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
            if self.row_kernel:
                raise ValueError(f"{opt}: a row kernel (a chain of reduces, or a reduce and a whole row) has no tile")
            from tinygrad.codegen.tensor_cores import simt_plan, tc_plan
            plan, why = (tc_plan if opt.op is OptOps.TC else simt_plan)(self, opt.amt, opt.axis)
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
            # NOTE: on a GPU a padded term that is not zero reads as the reduction's identity (rows.guard_padding);
            # a CPU kernel's vector lanes would each need that select, so there only sums of zeros pad
            if is_reduce and not self.gpu and not all(pads_to_zero(r) for r in self.reduceops):
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
            cap = self.opts.threads if self.opts is not None else 1
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
            # a row kernel's group may be a block of 256: its partials meet in a tree (rows.tree_combine)
            most = 256 if self.row_kernel else 64
            if not 2 <= amt <= most or left % amt != 0:
                raise ValueError(f"{opt}: 2 to {most} threads that divide the {left} steps left of axis {opt.axis}")
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
        if not self._decided and self.opts is not None and self.opts.supports_upcast and \
                not NOOPT:
            if self.row_kernel:
                chosen = rows.row_opts(self)
            elif self.gpu:
                from tinygrad.codegen.heuristic_gpu import gpu_opts
                chosen = gpu_opts(self)
            elif self.opts.has_local:
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

    # ---- the lowering ----
    def linearize(self):
        if self.uops:
            return self
        if not self._decided:
            self.hand_coded_optimizations()
        if DEBUG >= 5 and self.applied_opts:
            print(f"{self.name}: {self.applied_opts}")
        self.em = Emitter(self.uops)
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
            self.buf_uops[idx] = self.em.uop(UOps.DEFINE_GLOBAL, PtrDType(mb.dtype), (), (idx, f"data{idx}", is_out),
                                           False)
        self.vars = sorted(variables, key=lambda v: v.expr)
        for v in self.vars:
            self.em.bind(v, self.em.uop(UOps.DEFINE_VAR, dtypes.int32, (), v, False))

        if self.tc is not None:
            self._lane = None
            self._lower_tc()
        else:
            self._lower_loops()
        if self.opts is not None and self.opts.int_vectors:
            self.uops[:] = merge_byte_pairs(self.uops)
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
            self._loop_vars.append(None if is_one(steps) else Variable(f"ridx{i}", 0, max_index(steps)))
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
        # each reduce's accumulators, by its LazyOp; a chain's reduces in order, each reading the earlier ones
        red = {}
        for rop in self.reduceops:
            red[rop] = self._lower_reduce(rop, global_axes, gcombos, red)
        if self.row_tail:
            rows.lower_row_tail(self, gcombos, red)
        else:
            # everything after the reduce reads through the output shape: reduced dims are index 0 there
            memo = {}
            for g in gcombos:
                for root in self.ast:
                    self._store(root.arg, g, self._lower_ast(root.src[0], g, True, red, memo))
        for lp in reversed(loops):
            self.em.close_scope()
            self.em.uop(UOps.ENDLOOP, None, (lp,), None, False)

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
        # a row kernel's group of a warp or more takes the block's x threads: a warp's threads are neighbours along
        # the row (its loads one run of memory, and up to 256 threads a row: z has at most 64)
        row_group = grouped and self.row_kernel and self.group >= 32
        gmax = list(self.opts.global_max or CUDA_GLOBAL_MAX)
        lmax = self.opts.local_max or CUDA_LOCAL_MAX
        if row_group:
            lmax = (lmax[1], lmax[2], 1)  # the outputs' threads are the block's y and z
        if grouped:
            gmax[2] = 1  # the group takes a dimension of the block's threads: outputs use the grid's x and y
        # NOLOCALS: blocks of one thread
        plan = plan_grid(steps, gmax, (1, 1, 1) if self.no_locals else lmax,
                         max_threads=1 if self.no_locals else 1024 // self.group,
                         target_threads=1 if self.no_locals else max(1, TARGET_THREADS // self.group),
                         local=self.local_dims)
        gsize = [1, 1, 1]
        mapped = set()
        gates = []
        base = self.em.const(0)
        for dim in range(3):
            group = sorted([a.axis for a in plan.axes if a.dim == dim])
            if not group:
                continue
            extent = sint_prod([steps[d] for d in group])
            lsize = plan.local_size[dim]
            gsize[dim] = plan.global_size[dim] if isinstance(extent, int) else (extent + (lsize - 1)) // lsize
            if grouped:
                # NOTE: threads past the end must still reach the barrier: they compute the last element's value
                # again (an index clamped in bounds) and store nothing
                gid = self.em.uop(UOps.SPECIAL, i32, (), (dim, f"gidx{dim}", plan.global_size[dim]), False)
                tdim = dim + 1 if row_group else dim
                lid = self.em.uop(UOps.SPECIAL, i32, (), (tdim, f"lidx{tdim}", lsize), False)
                flat = self.em.add(self.em.mul(gid, self.em.const(lsize)), lid)
                base = self.em.add(base, self.em.mul(lid, self.em.const(1 if dim == 0 else plan.local_size[0])))
                if not isinstance(extent, int) or plan.global_size[dim] * lsize != extent:
                    inside = self.em.lt(flat, self.em.lower_node(extent))
                    gates.append(inside)
                    flat = self.em.uop(UOps.ALU, i32, (inside, flat, self.em.const(0)), TernaryOps.WHERE)
            else:
                size_arg = extent if isinstance(extent, int) else self.em.lower_node(extent)
                flat = self.em.uop(UOps.SPECIAL, i32, (), (dim, f"idx{dim}", size_arg, lsize), False)
            for j, d in enumerate(group):
                v = flat
                div = sint_prod([steps[e] for e in group[j + 1:]])
                if not (isinstance(div, int) and div == 1):
                    v = self.em.div(v, self.em.lower_node(div))
                if j != 0:
                    v = self.em.mod(v, self.em.lower_node(steps[d]))
                if self._loop_vars[d] is not None:
                    self.em.bind(self._loop_vars[d], v)
                mapped.add(d)
        for d in global_axes:
            # a symbolic dim whose bound is 1 has no place in the grid: its only index is 0
            if self._loop_vars[d] is not None and d not in mapped:
                self.em.bind(self._loop_vars[d], self.em.const(0))
        self.global_size = tuple(gsize)
        self.local_size = tuple(plan.local_size)
        if grouped:
            lx, ly = plan.local_size[0], plan.local_size[1]
            self._block_threads = lx * ly * self.group
            if row_group:
                # thread (group index g, outputs' flat index o) is the block's thread g + o * group
                self._group_idx = self.em.uop(UOps.SPECIAL, i32, (), (0, "lidx0", self.group), False)
                self._base_id = self.em.mul(base, self.em.const(self.group))
                self._group_stride = 1
            else:
                self._group_idx = self.em.uop(UOps.SPECIAL, i32, (), (2, "lidx2", self.group), False)
                self._base_id = base
                self._group_stride = lx * ly
            self._thread_id = self.em.add(self._base_id, self.em.mul(self._group_idx,
                                                                     self.em.const(self._group_stride)))
            # only the group's first thread stores the combined result (a row tail: each thread its part of the row)
            if not self.row_tail:
                gates.append(self.em.lt(self._group_idx, self.em.const(1)))
            self.local_size = (self.group, lx, ly) if row_group else (lx, ly, self.group)
        for g in gates:
            self._gate = g if self._gate is None else self.em.both(self._gate, g)

    def _loop(self, axis, threads=1):
        steps = self._steps(axis)
        lp = self.em.uop(UOps.LOOP, dtypes.int32, (self.em.const(0, dtypes.int32), self.em.lower_node(steps)),
                       threads if threads > 1 else None, False)
        self.em.open_scope()
        self._bind_loop_var(axis, lp, steps)
        return lp

    def _bind_loop_var(self, axis, lp, steps):
        """The index of dim `axis` from its loop's counter `lp`, which runs over `steps` (this thread's steps)."""
        if axis == self.group_axis and self.group_top:
            # GROUPTOP: thread t of the group takes the run of steps t*steps, t*steps+1, ...
            self.em.bind(self._loop_vars[axis], self.em.add(self.em.mul(self._group_idx, self.em.lower_node(steps)),
                                                             lp))
        elif axis == self.group_axis:
            # the group's threads take interleaved steps: thread t of the group the steps t, t+group, ...
            self.em.bind(self._loop_vars[axis], self.em.add(self.em.mul(lp, self.em.const(self.group)),
                                                             self._group_idx))
        else:
            self.em.bind(self._loop_vars[axis], lp)

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
                lo, hi = self.em.const(0), self.em.lower_node(count)
            else:
                ratio = self.em.const(units[i - 1] // unit)
                lo = self.em.mul(outer, ratio)
                if isinstance(count, int) and count % (units[i - 1] // unit) == 0:
                    hi = self.em.add(lo, ratio)
                else:
                    # the last block is short: it ends at the loop's end (lo + min(ratio, count - lo), which never
                    # passes the count, where lo + ratio could pass 2**31 - 1)
                    left = self.em.sub(self.em.lower_node(count), lo)
                    take = self.em.alu(TernaryOps.WHERE, i32, (self.em.lt(ratio, left),
                                                            ratio, left))
                    hi = self.em.add(lo, take)
            lp = self.em.uop(UOps.LOOP, i32, (lo, hi), None, False)
            self.em.open_scope()
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
                out[key] = tuple([self.em.uop(UOps.DEFINE_ACC, dtype, (), start, False) for _ in range(len(a))])
            else:
                out[key] = self.em.uop(UOps.DEFINE_ACC, a.dtype, (), start, False)
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
                base = self._tile_bases.get(d)
                out.append(NumNode(0) if base is None else base + self._tile_offsets[d][combo[d]])
            # M or N of merged dims: each one's index from the flat index (lower_tc.TileOutputs.split)
            flat = {name: out[ax] for ax, name in ((self.tc.m_axis, "tc_m"), (self.tc.n_axis, "tc_n"))}
            for dims in self._tile_split.values():
                for d, node in dims.items():
                    out[d] = node.substitute({v: flat[v.expr] for v in node.vars() if v.expr in flat})
            return out
        for d, s in enumerate(self.full_shape):
            if is_one(s) or (post and d in self.reduce_axes):
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

    def _lower_reduce(self, rop, global_axes, gcombos, red):
        """The loops of reduce `rop` around one accumulator per output of the tile; returns (the output dims that
        pick an accumulator, {their copies: the reduced value}). `red`: the accumulators of the reduces before it
        (a row kernel's chain), which its input may read."""
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
                accs[key] = self.em.uop(UOps.DEFINE_ACC, dtype, (), start, False)
            elif self._vec_ok(dtype):
                accs[key] = self.em.uop(UOps.DEFINE_ACC, dtype.vec(self.vector_width), (), start, False)
            else:
                accs[key] = tuple([self.em.uop(UOps.DEFINE_ACC, dtype, (), start, False)
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
        memo = {}
        rows.hoist(self, src, gcombos, red, memo)  # (a row kernel's: the reduces before this one are in `red`)
        # NOTE: on a GPU every padded term is guarded: a "zero" term can be 0/0 where a broadcast constant (a mean's
        # count) is masked too (layernorm's backward was NaN at rows of 1000 on the H100)
        guard = bool(self._dim_limits) and any(d in self._dim_limits for d in self.reduce_axes) and \
            (self.gpu or not pads_to_zero(rop))
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
        for r in rcombos:
            for key, g in reps:
                combo = tuple([r[d] if d in self.reduce_axes else g[d] for d in range(len(g))])
                val = self._lower_ast(src, combo, False, red, memo)
                if guard:
                    val = rows.guard_padding(self, val, combo, start, dtype)
                accs[key] = self._accumulate(accs[key], val, alu_op, dtype, loop)
        for lp, parent in reversed(loops):
            if parent is not None:
                # the block's partial sums are one addition into the level above
                accs = {key: self._accumulate(parent[key], a, alu_op, dtype, lp) for key, a in accs.items()}
            self.em.close_scope()
            self.em.uop(UOps.ENDLOOP, None, (lp,), None, False)
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
            return tuple([self.em.uop(UOps.PHI, dtype, (cur[i], self.em.uop(UOps.ALU, dtype, (self._lane_of(val, i),
                                                                                       cur[i]), op, False)) + tail,
                                    None, False) for i in range(len(cur))])
        if cur.dtype.count > 1:
            new = self.em.uop(UOps.ALU, cur.dtype, (self._as_vec(val, dtype), cur), op, False)
            return self.em.uop(UOps.PHI, cur.dtype, (cur, new) + tail, None, False)
        if isinstance(val, tuple) or val.dtype.count > 1:
            raise RuntimeError("internal error: a scalar accumulator got a value that differs between lanes")
        new = self.em.uop(UOps.ALU, dtype, (val, cur), op, False)
        return self.em.uop(UOps.PHI, dtype, (cur, new) + tail, None, False)

    def _group_combine(self, accs, op, dtype):
        """GROUP: each thread of a group holds a partial result per accumulator lane; they meet in shared memory
        (a slot per thread of the block), and after a barrier every thread folds its group's partials in order."""
        slots = []
        for key, a in accs.items():
            scalar = not isinstance(a, tuple) and a.dtype.count == 1
            lanes = [a] if scalar else [self._lane_of(a, i) for i in range(self.vector_width)]
            temps = []
            for lane in lanes:
                t = self.em.uop(UOps.DEFINE_LOCAL, PtrDType(dtype), (), (f"temp{len(self.uops)}", self._block_threads),
                              False)
                self.em.uop(UOps.STORE, None, (t, self._thread_id, lane), None, False)
                temps.append(t)
            slots.append((key, scalar, temps))
        self.em.uop(UOps.BARRIER, None, (), None, False)
        if self.row_kernel and self.group >= 32 and not self.group & (self.group - 1):
            return rows.tree_combine(self, slots, op, dtype)
        stride = self._group_stride
        out = {}
        for key, scalar, temps in slots:
            vals = []
            for t in temps:
                acc = None
                for j in range(self.group):
                    v = self.em.uop(UOps.LOAD, dtype, (t, self.em.add(self._base_id, self.em.const(
                        j * stride))), None)
                    acc = v if acc is None else self.em.uop(UOps.ALU, dtype, (acc, v), op)
                vals.append(acc)
            out[key] = vals[0] if scalar else tuple(vals)
        return out

    def _gated(self, valid):
        """A store's condition: `valid` (a symbolic Node) and the grid's gate; None when always true."""
        if self._gate is None:
            return None if is_true(valid) else self.em.lower_node(valid)
        if is_true(valid):
            return self._gate
        return self.em.both(self.em.lower_node(valid), self._gate)

    def _horizontal(self, acc, op, dtype):
        """Fold the lanes of an accumulator into one scalar, pairwise."""
        vals = [self._lane_of(acc, i) for i in range(self.vector_width)]
        while len(vals) > 1:
            vals = [self.em.uop(UOps.ALU, dtype, (vals[i], vals[i + 1]), op) for i in range(0, len(vals), 2)]
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
                acc_axes, accs = red[op]
                val = accs[tuple([combo[d] for d in acc_axes])]
            elif op.op in LEAVES:
                # a leaf with a source is a gathered load: codegen/gather.py
                val = gather.lower(self, op, combo, post, done[id(op.src[0])]) if op.src else \
                    self._lower_leaf(op, combo, post)
            else:
                dt = self.op_dtypes[id(op)]
                src = tuple([done[id(s)] for s in op.src])
                if op.op is UnaryOps.CAST or op.op is UnaryOps.BITCAST:
                    val = self._cast_any(UOps.CAST if op.op is UnaryOps.CAST else UOps.BITCAST, op.arg[0], src[0])
                elif op.op is TernaryOps.MULACC:
                    val = self._alu_any(BinaryOps.ADD, dt, (self._alu_any(BinaryOps.MUL, dt, src[:2]), src[2]))
                elif op.op is BinaryOps.DIV and rows.divides_by_the_row(self, op, dt):
                    # x / s over a row, s from its reduces: x * (1/s), one division a thread (the compiler hoists
                    # it), not an IEEE division an element (softmax's normalisation)
                    val = self._alu_any(BinaryOps.MUL, dt, (src[0], self._alu_any(UnaryOps.RECIP, dt, src[1:])))
                else:
                    val = self._alu_any(op.op, dt, src)
            memo[key] = val
            done[id(op)] = val
        return done[id(root)]

    def _lower_leaf(self, op, combo, post):
        st = op.arg.st
        idxs = self._idx_nodes(combo, post)
        my_idxs = [idxs[i] if not is_one(s) else NumNode(0) for i, s in enumerate(st.shape)]
        idx, valid = st.expr_idxs(my_idxs)
        if self._dim_limits:
            valid = self._limits_valid(valid, idxs)
        lane = self._lane
        if lane is None or (lane not in idx.vars() and lane not in valid.vars()):
            return self._leaf_scalar(op, idx, valid)
        dtype = op.arg.dtype
        lanes = packed_halves.load(self, op, idx, valid, lane)
        if lanes is not None:
            return lanes
        if op.op is BufferOps.LOAD and self._vec_load_ok(dtype) and lane not in valid.vars():
            base = lane_base(idx, lane)
            if base is not None:
                # consecutive lanes read consecutive elements: one vector load
                vdt = dtype.vec(self.vector_width)
                vin = (self.buf_uops[op.arg.idx], self.em.lower_node(base))
                if not is_true(valid):
                    cond = self.em.lower_node(valid)
                    vin = vin + (cond, self._as_vec(self.em.const(dtypes.as_const(0, dtype), dtype), dtype))
                return self.em.uop(UOps.LOAD, vdt, vin, None)
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
        if is_false(valid):
            return self.em.const(dtypes.as_const(0, dtype), dtype)
        if op.op is BufferOps.LOAD:
            vin = (self.buf_uops[op.arg.idx], self.em.lower_node(idx))
            if is_true(valid):
                return self.em.uop(UOps.LOAD, dtype, vin, None)
            zero = self.em.const(dtypes.as_const(0, dtype), dtype)
            return self.em.uop(UOps.LOAD, dtype, vin + (self.em.lower_node(valid), zero), None)
        if op.op is BufferOps.IOTA or isinstance(op.arg.val, Node):
            # an index (the element's own, for IOTA) or a symbolic value, computed in int32
            c = self.em.lower_node(idx if op.op is BufferOps.IOTA else op.arg.val)
            if dtype != dtypes.int32:
                c = self.em.uop(UOps.CAST, dtype, (c,), None)
        else:
            c = self.em.const(op.arg.val, dtype)
        if is_true(valid):
            return c
        zero = self.em.const(dtypes.as_const(0, dtype), dtype)
        return self.em.uop(UOps.ALU, dtype, (self.em.lower_node(valid), c, zero), TernaryOps.WHERE)

    def _store(self, mb, combo, val, post=True):
        nodes = self._idx_nodes(combo, post)
        idx, valid = mb.st.expr_idxs(nodes)
        if self._dim_limits:
            valid = self._limits_valid(valid, nodes)
        buf = self.buf_uops[mb.idx]
        lane = self._lane
        if lane is None or (lane not in idx.vars() and lane not in valid.vars()):
            if isinstance(val, tuple) or val.dtype.count > 1:
                raise RuntimeError("internal error: lanes with different values stored to one address")
            vin = (buf, self.em.lower_node(idx), val)
            gate = self._gated(valid)
            if gate is not None:
                vin = vin + (gate,)
            self.em.uop(UOps.STORE, None, vin, None, False)
            return
        if packed_halves.store(self, mb, idx, valid, val):
            return
        if self._vec_ok(mb.dtype) and lane not in valid.vars():
            base = lane_base(idx, lane)
            if base is not None:
                vin = (buf, self.em.lower_node(base), self._as_vec(val, mb.dtype))
                gate = self._gated(valid)
                if gate is not None:
                    vin = vin + (gate,)
                self.em.uop(UOps.STORE, None, vin, None, False)
                return
        for i in range(self.vector_width):
            sub = {lane: NumNode(i)}
            li, lvalid = idx.substitute(sub), valid.substitute(sub)
            if is_false(lvalid):
                continue
            vin = (buf, self.em.lower_node(li), self._lane_of(val, i))
            gate = self._gated(lvalid)
            if gate is not None:
                vin = vin + (gate,)
            self.em.uop(UOps.STORE, None, vin, None, False)

    # ---- block tiles in shared memory (TC, SMEM): codegen/lower_tc.py lowers them, the tail is ours ----
    def _lower_tc(self):
        from tinygrad.codegen.lower_tc import BlockTileKernel, lower_block_tile
        lower_block_tile(self.tc, BlockTileKernel(self.em, self.full_shape, self.buf_uops, self._launch,
                                                  self._store_tile))

    def _launch(self, global_size, local_size):
        self.global_size, self.local_size = global_size, local_size

    def _store_tile(self, out):
        """A block tile's accumulators (lower_tc.TileOutputs) through the kernel's elementwise tail to its stores:
        each tiled dim's copies are offsets from the thread's base index."""
        self._dim_limits = out.limits
        self._tile_bases, self._tile_offsets, self._tile_split = out.bases, out.offsets, out.split
        for d, offsets in out.offsets.items():
            self.upcasts[d] = len(offsets)
        n_ax = out.n_axis
        red = {self.reduceop: ([out.m_axis, n_ax], out.values)}
        self.loop_order = [d for d in range(len(self.full_shape)) if d not in self.reduce_axes]
        memo = {}
        paired = set()
        for g in self._combos(self.loop_order):
            if g in paired:
                continue
            if out.paired_stores and len(self.ast) == 1 and g[n_ax] % 2 == 0 and \
                    self._store_pair(g, n_ax, red, memo):
                paired.add(g[:n_ax] + (g[n_ax] + 1,) + g[n_ax + 1:])
                continue
            for root in self.ast:
                self._store(root.arg, g, self._lower_ast(root.src[0], g, True, red, memo))

    def _store_pair(self, g, n_ax, red, memo):
        """Stores the half (bfloat16) outputs of copies g and g+1 along N as one 4-byte store where they are
        neighbours with the same condition, and says so: a warp's stores of its accumulators then write 16 bytes a
        row, not 4 scattered halves (the wgmma kernels' epilogue)."""
        mb = self.ast[0].arg
        if mb.dtype not in (dtypes.float16, dtypes.bfloat16):
            return False
        g1 = g[:n_ax] + (g[n_ax] + 1,) + g[n_ax + 1:]
        if g1[n_ax] >= len(self._tile_offsets[n_ax]) or self._tile_offsets[n_ax][g1[n_ax]] != \
                self._tile_offsets[n_ax][g[n_ax]] + 1:
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
        if not all_even(idx0, self._tile_bases[n_ax]):
            return False
        u16 = dtypes.uint16
        bits = [self.em.uop(UOps.BITCAST, u16, (self._lower_ast(self.ast[0].src[0], c, True, red, memo),), None)
                for c in (g, g1)]
        vin = (self.buf_uops[mb.idx], self.em.lower_node(idx0),
               self.em.uop(UOps.VECTORIZE, u16.vec(2), tuple(bits), None))
        gate = self._gated(valid0)
        self.em.uop(UOps.STORE, None, vin + ((gate,) if gate is not None else ()), "aligned", False)
        return True

    def _limits_valid(self, valid, nodes):
        """`valid` and the dims' limits: past the end of a dim its loop overruns (a tile's partial end, PADTO) there
        is nothing to read or store."""
        return Node.ands([valid] + [nodes[d] < lim for d, lim in self._dim_limits.items()])


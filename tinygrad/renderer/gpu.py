"""The render loop every GPU language shares: a linearized kernel (a list of UOps) as the source of one GPU kernel.

A GPU backend writes a GPULanguage: CStyleLanguage's table of types, constants and ops, plus the spellings this loop
asks for (the block and thread indices, shared memory, the barrier, a warp shuffle, an atomic increment, a memory
fence, the kernel's signature and its preludes). `renderer/cuda.py` is the model; a new GPU renderer is such a table
and a one-line renderer function, not another copy of this loop.

Kernels with SPECIAL uops are the linearizer's: it mapped their output dims to the grid (codegen/gpu_dims.py) and
gives their launch sizes as data (the program record's global_size/local_size); they are rendered as they are,
vector uops included (16-byte loads and stores where the pointer is aligned at run time, else one element at a time).
Kernels without them are what the linearizer leaves as loops, today the memory-bound reductions
(codegen/heuristic_gpu.py says which), and are made parallel here as codegen/gpu_plan.py plans: the outer loops over
output elements become a grid-stride loop over all threads; for reductions with few outputs, a loop over blocks,
each block's threads splitting the reduction and combining with warp shuffles; for one large reduction, the whole
grid splits it and the last block to finish combines the blocks' results. Such a kernel is correct for any grid (and
any block of whole warps); the launch it was written for is the program record's `launch` (and `persistent` for
the reductions, which the runtime launches with no more blocks than the GPU holds at once). A kernel whose shared
arrays outgrow what a language may declare statically (CUDA: 48 KB) gets one dynamic array instead, whose size is
the record's `dynamic_shared` (codegen/program.py: every launch fact is data there, never text in the source).

Loads and stores whose index runs along such a loop (the loop's flat index plus an offset fixed for the loop)
move 16 bytes at a time: the loop's body is written for one element, and runs over the lanes of whole vectors
(for reductions, several a thread, loaded together) while every such pointer is aligned, which is checked at run
time; the elements after the last whole vector, and all of them where a pointer is misaligned, go one at a time.
Loops whose body has a loop of its own, or reads memory with a stride, keep a thread per element.

SPECIAL uops: arg = (dim, name, size[, threads]), dim 0/1/2 for x/y/z; the name's prefix picks the index:
  gidx*: the block index (size: blocks in the grid), lidx*: the thread index in the block (size: threads in the
  block; their product is the kernel's launch bound), idx*: the global thread index block*blockDim+thread, and
  threads that are past `size` return at once (so not with barriers). `size` is an int or an int32 uop (a symbolic
  extent); for idx*, the optional `threads` (block size in that dimension) gives the launch bound.
"""
from __future__ import annotations

import math
from typing import Callable

from tinygrad.codegen.accumulate import SUM_BLOCK
from tinygrad.codegen.gpu_plan import VEC_BYTES, _eval_max, _Parallel, _plan_parallel, _Vec
from tinygrad.codegen.program import ProgramSpec, TensorMapSpec
from tinygrad.codegen.uops import TmaInit, TmaMap, UOp, UOps
from tinygrad.dtype import DType, PtrDType, dtypes
from tinygrad.ops import BinaryOps
from tinygrad.renderer.cstyle import CStyleLanguage, KernelWriter
from tinygrad.renderer.prelude import read_prelude

# the name of a kernel's dynamic shared array (its DEFINE_LOCALs are slices of it)
DYNAMIC_SHARED = "tg_smem"
# tg_vec<T, W>: W values of T, aligned as one access up to 16 bytes (CUDA and HIP; Metal declares its own)
VEC_PRELUDE = read_prelude("cuda/vec.cuh")


class GPULanguage(CStyleLanguage):
    """CStyleLanguage plus what the GPU render loop spells per language. The defaults are the spelling CUDA and HIP
    share; a language that spells a slot otherwise overrides it. The methods at the end have no default."""
    name = "GPU"
    # a dim's index ("x", "y" or "z") -> the expression for it
    block_idx_fmt = "blockIdx.{}"     # the block's index in the grid
    thread_idx_fmt = "threadIdx.{}"   # the thread's index in its block
    block_dim_fmt = "blockDim.{}"     # threads per block
    grid_dim_fmt = "gridDim.{}"       # blocks in the grid
    shared_prefix = "__shared__ "     # declares an array shared by a block's threads
    device_var_prefix = "__device__ "  # declares a variable in device memory at module scope
    barrier = "__syncthreads();"      # every thread of the block waits here, and sees the others' shared writes
    fence = "__threadfence();"        # this thread's writes are visible to the whole GPU before what follows
    warp_size = 32                    # threads that run in lockstep and shuffle registers (a power of two)
    vec_prelude = VEC_PRELUDE         # tg_vec<T, W>: W values of T, aligned as one access
    vec_ops_prelude = ""              # tg_vec arithmetic, tg_vmax, tg_vload and tg_vstore (for vector uops)
    bitcast_prelude = ""              # tg_bitcast<T>(x) (for BITCAST uops)
    shared_align = "__align__(16) "   # aligns a shared array for 16-byte vector accesses
    # the most shared memory a kernel may declare statically; a kernel that needs more declares one dynamic array,
    # `dynamic_shared` formatted with its name, and the launch gives it the bytes (ProgramSpec.dynamic_shared)
    static_shared_max: int | None = 48 * 1024
    # (1024-byte aligned, as are the arrays in it: the granule of the tensor cores' 128-byte swizzle)
    dynamic_shared = "extern __shared__ __align__(1024) unsigned char {}[];"
    tensor_cores: tuple[str, ...] = ()  # the matrix instructions render_wmma spells (codegen/tensor_cores.py)
    # one big reduction spread over the whole grid needs device variables at module scope and an atomic counter;
    # a language without them (Metal) reduces it in one block instead
    grid_reduce = True
    # the loop plan's 16-byte accesses cast buffer pointers to tg_vec pointers and to integers (alignment checks),
    # which a language with address-space-qualified pointers (Metal) does not spell this way: it loops per element
    vector_loops = True
    # kernels start by waiting for the grid launched before them (ProgramSpec.waits_for_grid)
    grid_wait = False

    def block_idx(self, axis: str) -> str:
        return self.block_idx_fmt.format(axis)

    def thread_idx(self, axis: str) -> str:
        return self.thread_idx_fmt.format(axis)

    def block_dim(self, axis: str) -> str:
        return self.block_dim_fmt.format(axis)

    def grid_dim(self, axis: str) -> str:
        return self.grid_dim_fmt.format(axis)

    def address_space(self, buf: UOp) -> str:
        """The address-space qualifier (with a trailing space) of a pointer into buffer `buf` (a DEFINE_GLOBAL or
        DEFINE_LOCAL), for the render loop's pointer casts: none where pointers have no address space (CUDA)."""
        return ""

    def render_shuffle_down(self, val: str, offset: str) -> str:
        """`val` of the thread `offset` lanes further in this warp (every lane of the warp takes part)."""
        raise NotImplementedError(f"{type(self).__name__} has no warp shuffle")

    def render_shuffle_xor(self, val: str, mask: int) -> str:
        """`val` of lane (this lane ^ `mask`) of this warp (every lane of the warp takes part)."""
        raise NotImplementedError(f"{type(self).__name__} has no warp shuffle")

    def render_atomic_inc(self, var: str) -> str:
        """Adds 1 to the unsigned int device variable `var` atomically; the expression's value is the old count."""
        raise NotImplementedError(f"{type(self).__name__} has no atomic increment")

    def render_kernel(self, name: str, body: list[str], params: list, launch_bounds: int | None = None) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no kernel signature")

    def render_wmma(self, name: str, operands: list[str], part: int | None) -> str:
        """The WMMA uop `name` (a TensorCore's name) on its operands: A's registers, B's (half `part` of them where
        they hold two fragments), then C."""
        raise NotImplementedError(f"{type(self).__name__} has no tensor cores")

    def render_ldmatrix(self, ptr: str, matrices: int, trans: bool) -> str:
        """A warp's load of `matrices` 8x8 matrices of 16-bit elements from shared memory (`ptr`: this lane's row),
        transposed or not, as tensor-core operands (see codegen/tensor_cores.py)."""
        raise NotImplementedError(f"{type(self).__name__} has no matrix loads")

    def render_matrix_load(self, ptr: str, stride: int, trans: bool) -> str:
        """A SIMD group's load of an 8x8 tensor-core operand from shared memory (`ptr`: its first element; rows
        `stride` elements apart; `trans`: the tile is stored transposed), as this lane's part of it."""
        raise NotImplementedError(f"{type(self).__name__} has no matrix loads")

    def render_matrix_store(self, ptr: str, stride: int, val: str) -> str:
        """A SIMD group's store of the 8x8 float accumulator whose lane parts are `val` to shared memory at `ptr`
        (rows `stride` elements apart): where the accumulators' lane layout is not known, this is how they are
        read."""
        raise NotImplementedError(f"{type(self).__name__} has no matrix stores")

    def render_copy_async(self, dst: str, src: str, src_idx: str, valid: str | None) -> str:
        """Starts copying 16 bytes from element `src_idx` of global buffer `src` to shared `dst` (zeros where `valid`
        is false), without registers; ASYNC_COMMIT/ASYNC_WAIT order it."""
        raise NotImplementedError(f"{type(self).__name__} has no asynchronous copies")

    def render_async_commit(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no asynchronous copies")

    def render_async_wait(self, pending: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no asynchronous copies")

    def render_proxy_fence(self, kind: str) -> str:
        """A FENCE uop: this thread's shared-memory writes seen by the `kind` reads ("async_proxy": wgmma's)."""
        raise NotImplementedError(f"{type(self).__name__} has no {kind} fence")

    def wmma_prelude(self, names: set[str], copies: bool) -> str:
        """What render_wmma's expressions for the tensor cores `names` need declared (after the vector types), and
        the asynchronous copies where the kernel has them (`copies`)."""
        return ""

    def render_tma(self, arg, operands: list[str]) -> str:
        """A TMA uop other than a map (`arg` a Tma* record of codegen/uops.py) as a statement, its operands
        rendered."""
        raise NotImplementedError(f"{type(self).__name__} has no TMA")

    def tma_prelude(self) -> str:
        """What render_tma's statements and the tensor-map parameters need declared."""
        raise NotImplementedError(f"{type(self).__name__} has no TMA")


def _shared_layout(lang: GPULanguage, uops: list[UOp]) -> tuple[dict[int, int], int]:
    """Where each DEFINE_LOCAL lies in the kernel's dynamic shared array (by id; 1024-byte aligned offsets) and its
    total size, or ({}, 0) where the arrays fit static declarations."""
    offsets, total = {}, 0
    for u in uops:
        if u.uop is UOps.DEFINE_LOCAL:
            offsets[id(u)] = total
            base = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
            total += -(-u.arg[1] * base.itemsize // 1024) * 1024
    if lang.static_shared_max is None or total <= lang.static_shared_max:
        return {}, 0
    return offsets, total


# ---------------------------------------------------------------------------------------------------------------
# The render loop
# ---------------------------------------------------------------------------------------------------------------
_AXIS = "xyz"
# plans whose blocks loop over the work with a grid stride (ProgramSpec.persistent)
PERSISTENT = ("blocks", "grid", "warps")
# flattened nests of at least this many elements index in 64 bits (see open_flat)
BIG_NEST = 1 << 30


def uops_to_gpu(lang: GPULanguage, name: str, uops: list[UOp]) -> ProgramSpec:
    """GPU kernel `name` from its uops, in `lang`'s spelling: its source and launch facts."""
    specials = [u for u in uops if u.uop is UOps.SPECIAL]
    has_barrier = any(u.uop is UOps.BARRIER for u in uops)
    par = _Parallel() if specials else _plan_parallel(uops, lang.warp_size, lang.grid_reduce, lang.vector_loops)
    flat_loops = {id(lp) for lp in par.global_loops + par.reduce_loops}
    kw = KernelWriter(lang, uops)
    bx, tx, bdim, gdim = lang.block_idx("x"), lang.thread_idx("x"), lang.block_dim("x"), lang.grid_dim("x")
    wsz, wshift = lang.warp_size, lang.warp_size.bit_length() - 1
    r, body, fresh, emit, bind = kw.r, kw.body, kw.fresh, kw.emit, kw.bind
    dts: set[DType] = set()
    shared_at, shared_total = _shared_layout(lang, uops)
    if shared_total:
        emit(lang.dynamic_shared.format(DYNAMIC_SHARED))
    # per open vectorised nest (by the id of its outermost loop): what its closing needs
    open_vec: dict[int, dict] = {}
    tmaps: list[UOp] = []  # TMA map uops: the kernel's tensor-map parameters, in order
    cluster = 1  # blocks of a cluster (TMA multicast)
    hoisted: dict[int, str] = {}  # id of a moved load or store -> the variable standing for its element

    def buf_type(buf: UOp) -> str:
        return lang.buffer_type_map.get(buf.dtype.base) or lang.render_dtype(buf.dtype.base)

    def open_flat(loops: list[UOp], first: str, stride: str) -> None:
        """One loop over the flattened nest `loops`, each loop variable recovered by division and modulo. The body
        of a vectorised nest is rendered once, for one element `flat`, and placed by close_vec."""
        # a nest of 2**30 or more elements counts in 64 bits: its count may not fit an int (2**31 elements), and
        # a grid-stride step past the last element may overflow one (an endless loop)
        big = any(_eval_max(lp.vin[1]) is None for lp in loops) or \
            math.prod(_eval_max(lp.vin[1]) for lp in loops) >= BIG_NEST
        ity = "long long" if big else "int"
        extents = [f"(({ity}){r[id(lp.vin[1])]})" if big else f"({r[id(lp.vin[1])]})" for lp in loops]
        flat = fresh("flat")
        vec: _Vec | None = par.vec.get(id(loops[-1]))
        if loops is par.reduce_loops and _blocked_sum(par):
            open_block()
        if vec is None:
            emit(f"for ({ity} {flat} = {first}; {flat} < {'*'.join(extents)}; {flat} += {stride}) {{")
        else:
            emit("{")
            kw.depth += 1
            state = {"vec": vec, "first": first, "stride": f"({stride})", "flat": flat, "n": fresh("tg_n"), "off": {},
                     "ity": ity}
            emit(f"const {ity} {state['n']} = {'*'.join(extents)};")
            for u in vec.loads + vec.stores:
                terms = [f"{r[t]}*{c}" if c != 1 else r[t] for t, c in vec.offsets[id(u)].items() if t and c]
                const = vec.offsets[id(u)].get(None, 0)
                # "+offset" or "" after the buffer's name
                state["off"][id(u)] = "+(" + "+".join(terms + [str(const)] * bool(const)) + ")" if terms else \
                    f"+{const}" if const else ""
                hoisted[id(u)] = fresh("tg_ld" if u.uop is UOps.LOAD else "tg_st")
            state["start"] = len(body)
            open_vec[id(loops[0])] = state
        kw.depth += 1
        for k, lp in enumerate(loops):
            var = fresh("ridx")
            inner = "*".join(extents[k + 1:])
            expr = f"({flat}/({inner}))" if inner else flat
            emit(f"int {var} = {expr}%{extents[k]};" if k else f"int {var} = {expr};")
            r[id(lp)] = var

    # a thread's share of a long float sum (codegen/accumulate.py): the body adds into a partial of its own, which is
    # folded into the accumulator every `steps` steps of the loop and once after it
    block: dict[str, str] = {}

    def open_block() -> None:
        dt = par.acc.dtype
        block.update(acc=r[id(par.acc)], part=fresh("tg_blk"), count=fresh("tg_cnt"))
        emit(f"{lang.render_dtype(dt)} {block['part']} = {lang.render_const(par.acc.arg, dt)};")
        emit(f"int {block['count']} = 0;")
        r[id(par.acc)] = block["part"]

    def folded() -> str:
        dt = par.acc.dtype
        acc = block["acc"]
        return f"{acc} = {lang.render_result(lang.code_for_op[BinaryOps.ADD](block['part'], acc, dt), dt)};"

    def fold_block(per_step: int) -> None:
        """After a step of `per_step` additions: the partial into the accumulator once it holds a block."""
        if not block:
            return
        emit(f"if (++{block['count']} == {max(1, SUM_BLOCK // per_step)}) {{")
        emit(f"  {folded()}")
        emit(f"  {block['part']} = {lang.render_const(par.acc.arg, par.acc.dtype)};")
        emit(f"  {block['count']} = 0;")
        emit("}")

    def close_block() -> None:
        """After the loop: the last partial into the accumulator, which the code after the loop reads again."""
        if not block:
            return
        emit(folded())
        for u in uops:
            if u is par.acc or (u.uop is UOps.PHI and u.vin[0] is par.acc):
                r[id(u)] = block["acc"]
        block.clear()

    def close_vec(state: dict) -> None:
        """Places a vectorised nest's body (see _Vec): `unroll` whole vectors a thread per step while every moved
        pointer is aligned, their loads issued together (one vector a step without unrolling); then single
        elements."""
        lines = [line[2 * (kw.depth + 1):] for line in body[state["start"]:]]
        del body[state["start"]:]
        vec, n, first, stride, flat = state["vec"], state["n"], state["first"], state["stride"], state["flat"]
        w, unroll, moved = vec.width, vec.unroll, vec.loads + vec.stores
        ptr = {id(u): f"{r[id(u.vin[0])]}{state['off'][id(u)]}" for u in moved}
        vt = {id(u): f"tg_vec<{buf_type(u.vin[0])}, {w}>" for u in moved}
        names = {id(u): fresh("tg_vl" if u.uop is UOps.LOAD else "tg_vs") for u in moved}

        def element(index: str, lane: str) -> None:
            """The body for lane tg_j of the vectors, `lane` spelling a vector's element from its name."""
            emit("#pragma unroll")
            emit(f"for (int tg_j = 0; tg_j < {w}; tg_j++) {{")
            kw.depth += 1
            emit(f"const int {flat} = {index};")
            for u in moved:
                kind = ("const ", "") if u.uop is UOps.LOAD else ("", "&")
                emit(f"{kind[0]}{buf_type(u.vin[0])}{kind[1]} {hoisted[id(u)]} = {lane.format(names[id(u)])};")
            for line in lines:
                emit(line)
            kw.depth -= 1
            emit("}")

        # (a vector of more than 16 bytes is accessed 16 bytes at a time: see VEC_PRELUDE)
        aligned = " && ".join(f"((unsigned long long)({ptr[id(u)]}) & "
                              f"{min(w * u.vin[0].dtype.base.itemsize, VEC_BYTES) - 1}ull) == 0" for u in moved)
        nv, v = fresh("tg_nv"), fresh("tg_v")
        ity = state["ity"]
        emit(f"const {ity} {nv} = ({aligned}) ? {n}/{w} : 0;")
        emit(f"{ity} {v} = {first};")
        if unroll > 1:
            # every vector of a step loaded before any is used, each guarded: a thread with fewer vectors left than
            # `unroll` (a short row's last step) still issues all of its loads together, one memory latency a step.
            # The steps are written out one by one, each vector a constant of its own (an array of vectors, or one
            # assigned under a branch, went through local memory under nvcc: a million spill requests in one
            # matrix-vector product)
            emit(f"for (; {v} < {nv}; {v} += {unroll}*{stride}) {{")
            kw.depth += 1
            step = [v] + [f"{v}+{k}*{stride}" for k in range(1, unroll)]  # each step's vector index
            for k in range(unroll if vec.loads else 0):
                if k:
                    # a step past the thread's last vector loads that one again, unconditionally: a vector declared
                    # and then assigned under a branch was copied through local memory by nvcc
                    emit(f"const {ity} {v}_{k} = {step[k]} < {nv} ? {step[k]} : {nv}-1;")
                for u in vec.loads:
                    emit(f"const {vt[id(u)]} {names[id(u)]}_{k} = *(const {vt[id(u)]}*)({ptr[id(u)]}+"
                         f"{f'{v}_{k}' if k else v}*{w});")
            for k in range(unroll):
                at = f"({step[k]})*{w}" if k else f"{v}*{w}"
                emit(f"if ({step[k]} < {nv}) {{" if k else "{")
                kw.depth += 1
                for u in vec.stores:
                    emit(f"{vt[id(u)]} {names[id(u)]}_{k};")
                element(f"{at}+tg_j", "{}_" + str(k) + ".e[tg_j]")
                for u in vec.stores:
                    emit(f"*({vt[id(u)]}*)({ptr[id(u)]}+{at}) = {names[id(u)]}_{k};")
                kw.depth -= 1
                emit("}")
            fold_block(unroll * w)
            kw.depth -= 1
            emit("}")
        else:
            emit(f"for (; {v} < {nv}; {v} += {stride}) {{")
            kw.depth += 1
            for u in vec.loads:
                emit(f"const {vt[id(u)]} {names[id(u)]} = *(const {vt[id(u)]}*)({ptr[id(u)]}+{v}*{w});")
            for u in vec.stores:
                emit(f"{vt[id(u)]} {names[id(u)]};")
            element(f"{v}*{w}+tg_j", "{}.e[tg_j]")
            for u in vec.stores:
                emit(f"*({vt[id(u)]}*)({ptr[id(u)]}+{v}*{w}) = {names[id(u)]};")
            fold_block(w)
            kw.depth -= 1
            emit("}")
        # after the last whole vector, or everything where a pointer is misaligned
        emit(f"for ({ity} {flat} = {nv}*{w}+{first}; {flat} < {n}; {flat} += {stride}) {{")
        kw.depth += 1
        for u in vec.loads:
            emit(f"const {buf_type(u.vin[0])} {hoisted[id(u)]} = {r[id(u.vin[0])]}[{flat}{state['off'][id(u)]}];")
        for u in vec.stores:
            emit(f"{buf_type(u.vin[0])} {hoisted[id(u)]};")
        for line in lines:
            emit(line)
        for u in vec.stores:
            emit(f"{r[id(u.vin[0])]}[{flat}{state['off'][id(u)]}] = {hoisted[id(u)]};")
        fold_block(1)
        kw.depth -= 1
        emit("}")
        kw.depth -= 1
        emit("}")

    if par.mode in ("blocks", "grid"):
        red = f"{lang.shared_prefix}{lang.render_dtype(par.acc.dtype)} tg_red[{1024 // lang.warp_size}];"
        emit(f"{red}  // a partial result per warp")
    if par.mode == "grid":
        # launched with more blocks than there are partial slots, the extra blocks sit out
        emit(f"{lang.shared_prefix}bool tg_last;")
        emit(f"const unsigned int tg_blocks = {gdim} < {par.grid}u ? {gdim} : {par.grid}u;")
        emit(f"if ({bx} >= tg_blocks) return;")
    for u in uops:
        op, dt, vin = u.uop, u.dtype, u.vin
        if dt is not None:
            dts.add(dt.base if isinstance(dt, PtrDType) else dt)
        if kw.define_param(u) or kw.render_value(u):
            pass
        elif op is UOps.DEFINE_LOCAL:
            local_name, size = u.arg
            base = dt.base if isinstance(dt, PtrDType) else dt
            ctype = lang.buffer_type_map.get(base) or lang.render_dtype(base)
            if id(u) in shared_at:
                emit(f"{ctype}* {local_name} = ({ctype}*)({DYNAMIC_SHARED} + {shared_at[id(u)]});")
            else:
                emit(f"{lang.shared_prefix}{lang.shared_align}{ctype} {local_name}[{size}];")
            r[id(u)] = local_name
        elif op is UOps.SPECIAL:
            # arg = (dim, name, size[, threads per block]): see "SPECIAL uops" in the module docstring
            dim, sname, size = u.arg[0], u.arg[1], u.arg[2]
            size = r[id(size)] if isinstance(size, UOp) else size
            axis = _AXIS[dim]
            if sname.startswith("gidx"):
                emit(f"int {sname} = {lang.block_idx(axis)}; /* {size} */")
            elif sname.startswith("lidx"):
                emit(f"int {sname} = {lang.thread_idx(axis)}; /* {size} */")
            else:
                if has_barrier:
                    raise NotImplementedError(f"{sname}: a guarded global index cannot be used with barriers")
                emit(f"int {sname} = {lang.block_idx(axis)}*{lang.block_dim(axis)}+{lang.thread_idx(axis)};")
                emit(f"if ({sname} >= {size}) return;")
            r[id(u)] = sname
        elif op is UOps.BARRIER:
            emit(lang.barrier)
        elif op is UOps.LOOP and id(u) in flat_loops:
            nest = par.global_loops if id(u) in {id(lp) for lp in par.global_loops} else par.reduce_loops
            if u is nest[-1]:  # every bound is rendered by now
                if nest is par.reduce_loops and par.mode == "grid":
                    open_flat(nest, f"{bx}*{bdim}+{tx}", f"tg_blocks*{bdim}")
                elif nest is par.reduce_loops and par.mode == "warps":
                    open_flat(nest, f"({tx}&{wsz - 1})", str(wsz))
                elif nest is par.reduce_loops:
                    open_flat(nest, tx, bdim)
                elif par.mode == "blocks":
                    open_flat(nest, bx, gdim)
                elif par.mode == "warps":
                    open_flat(nest, f"{bx}*({bdim}>>{wshift})+({tx}>>{wshift})", f"{gdim}*({bdim}>>{wshift})")
                else:
                    open_flat(nest, f"{bx}*{bdim}+{tx}", f"{gdim}*{bdim}")
        elif op is UOps.LOOP:
            var = fresh("ridx")
            emit(f"for (int {var} = {r[id(vin[0])]}; {var} < {r[id(vin[1])]}; {var}++) {{")
            r[id(u)] = var
            kw.depth += 1
        elif op is UOps.ENDLOOP and id(vin[0]) in flat_loops:
            nest = par.global_loops if any(vin[0] is lp for lp in par.global_loops) else par.reduce_loops
            if vin[0] is not nest[0]:
                continue
            if nest is par.global_loops and par.mode in ("blocks", "warps"):
                kw.depth -= 1
                emit("}")  # the `if (thread 0)` (lane 0) around the stores
            if id(nest[0]) in open_vec:
                kw.depth -= 1
                close_vec(open_vec.pop(id(nest[0])))
            else:
                fold_block(1)
                kw.depth -= 1
                emit("}")
            if nest is par.reduce_loops:
                close_block()
            if nest is par.reduce_loops and par.mode == "warps":
                _emit_warp_tree(lang, par, r[id(par.acc)], emit)
                emit(f"if (({tx}&{wsz - 1}) == 0) {{")
                kw.depth += 1
            elif nest is par.reduce_loops:
                _emit_block_combine(lang, par, r[id(par.acc)], emit)
                if par.mode == "grid":
                    _emit_grid_combine(lang, par, r[id(par.acc)], emit)
                emit(f"if ({tx} == 0) {{")
                kw.depth += 1
                if par.mode == "grid":
                    emit("tg_done = 0;  // ready for the next launch")
        elif op is UOps.ENDLOOP:
            kw.depth -= 1
            emit("}")
        elif op is UOps.WMMA:
            # a wait for a warpgroup's accumulators is read lane by lane after it: a variable, not repeated inline
            wait = isinstance(u.arg[1], tuple) and u.arg[1][0] == "wait"
            bind(u, lang.render_wmma(u.arg[0], [r[id(v)] for v in vin], u.arg[1]), "wmma", inline=not wait)
        elif op is UOps.SHUFFLE:
            bind(u, lang.render_shuffle_xor(r[id(vin[0])], u.arg[1]), "shfl", inline=False)
        elif op is UOps.COPY_ASYNC:
            emit(lang.render_copy_async(f"{r[id(vin[0])]}+{r[id(vin[1])]}", r[id(vin[2])], r[id(vin[3])],
                                        r[id(vin[4])] if len(vin) > 4 else None) + ";")
        elif op is UOps.ASYNC_COMMIT:
            emit(lang.render_async_commit() + ";")
        elif op is UOps.ASYNC_WAIT:
            emit(lang.render_async_wait(u.arg) + ";")
        elif op is UOps.FENCE:
            emit(lang.render_proxy_fence(u.arg) + ";")
        elif op is UOps.TMA and isinstance(u.arg, TmaMap):
            # a tensor-map parameter (after every other one): the runtime encodes it from the launch's buffer
            # argument `arg` at each launch, as the program record's tensor_maps say
            r[id(u)] = u.arg.name
            tmaps.append(u)
        elif op is UOps.TMA:
            cluster = max(cluster, u.arg.cluster if isinstance(u.arg, TmaInit) else 1)
            emit(lang.render_tma(u.arg, [r[id(v)] for v in vin]) + ";")
        elif op is UOps.LOAD and u.arg in ("ldmatrix", "ldmatrix.trans"):
            bind(u, lang.render_ldmatrix(f"{r[id(vin[0])]}+{r[id(vin[1])]}", dt.count // 2, u.arg.endswith("trans")),
                 "frag", inline=False)
        elif op is UOps.LOAD and isinstance(u.arg, tuple) and u.arg[0] == "simdgroup":
            bind(u, lang.render_matrix_load(f"{r[id(vin[0])]}+{r[id(vin[1])]}", u.arg[1], u.arg[2]), "frag",
                 inline=False)
        elif op is UOps.LOAD and dt.count > 1:
            if u.arg in ("aligned", "reinterpret"):
                # "reinterpret": the buffer's bytes as the load's own type (a float's two 16-bit halves)
                el = lang.render_dtype(dt.scalar()) if u.arg == "reinterpret" else buf_type(vin[0])
                vt = f"{lang.address_space(vin[0])}tg_vec<{el}, {dt.count}>"
                access = f"*(const {vt}*)({r[id(vin[0])]}+{r[id(vin[1])]})"
            else:
                access = f"tg_vload<{buf_type(vin[0])}, {dt.count}>({r[id(vin[0])]}+{r[id(vin[1])]})"
            if len(vin) > 2:
                access = f"({r[id(vin[2])]})?{access}:{r[id(vin[3])]}"
            bind(u, access, "val", inline=False)
        elif op is UOps.LOAD:
            access = hoisted.get(id(u)) or f"{r[id(vin[0])]}[{r[id(vin[1])]}]"
            if u.arg != "bits":
                access = lang.render_load(access, vin[0].dtype.base)
            if len(vin) > 2:
                access = f"({r[id(vin[2])]})?{access}:{r[id(vin[3])]}"
            bind(u, access, "val", inline=False)
        elif op is UOps.STORE and isinstance(u.arg, tuple) and u.arg[0] == "simdgroup":
            emit(lang.render_matrix_store(f"{r[id(vin[0])]}+{r[id(vin[1])]}", u.arg[1], r[id(vin[2])]) + ";")
        elif op is UOps.STORE and vin[2].dtype.count > 1:
            vt = f"{buf_type(vin[0])}, {vin[2].dtype.count}"
            if u.arg == "aligned":
                space = lang.address_space(vin[0])
                line = f"*({space}tg_vec<{vt}>*)({r[id(vin[0])]}+{r[id(vin[1])]}) = {r[id(vin[2])]};"
            else:
                line = f"tg_vstore<{vt}>({r[id(vin[0])]}+{r[id(vin[1])]}, {r[id(vin[2])]});"
            emit(f"if ({r[id(vin[3])]}) {line}" if len(vin) > 3 else line)
        elif op is UOps.STORE:
            target = hoisted.get(id(u)) or f"{r[id(vin[0])]}[{r[id(vin[1])]}]"
            line = f"{target} = {lang.render_store(r[id(vin[2])], vin[0].dtype.base)};"
            emit(f"if ({r[id(vin[3])]}) {line}" if len(vin) > 3 else line)
        else:
            raise NotImplementedError(f"the {lang.name} renderer has no rule for {op}")
    if par.mode in ("blocks", "grid", "warps") and not par.global_loops:
        kw.depth -= 1
        emit("}")  # the `if (thread 0)` of a kernel without output loops
    bounds = _launch_bounds(specials, par)
    names = [p[0] for p in kw.params]
    maps = []
    for u in tmaps:
        m = u.arg
        maps.append(TensorMapSpec(names.index(r[id(u.vin[0])]), m.offset, m.elem_bytes, m.dims, m.strides,
                                  m.box, m.swizzle))
        kw.params.append((m.name, "tmap", False))
    extra = {"cluster": cluster} if cluster > 1 else {}
    kernel = lang.render_kernel(name, body, kw.params, bounds, **extra)
    prelude = lang.prelude(dts) + (lang.bitcast_prelude if any(u.uop is UOps.BITCAST for u in uops) else "")
    vectors = any(u.dtype is not None and u.dtype.count > 1 and not isinstance(u.dtype, PtrDType) for u in uops)
    prelude += lang.vec_prelude if par.vec or vectors else ""
    prelude += lang.vec_ops_prelude if vectors else ""
    async_ops = (UOps.COPY_ASYNC, UOps.ASYNC_COMMIT, UOps.ASYNC_WAIT)
    prelude += lang.wmma_prelude({u.arg[0] for u in uops if u.uop is UOps.WMMA},
                                 any(u.uop in async_ops for u in uops) or bool(tmaps))
    prelude += lang.tma_prelude() if tmaps else ""
    if par.mode == "grid":
        # per module (each kernel is a module of its own): the blocks' partial results and how many are done
        prelude += f"{lang.device_var_prefix}{lang.render_dtype(par.acc.dtype)} tg_part[{par.grid}];\n"
        prelude += f"{lang.device_var_prefix}unsigned int tg_done;\n"
    # a loop kernel's launch is the plan's; the linearizer gives those of kernels with SPECIAL uops
    launch = None if specials else ((par.grid, 1, 1), (par.block, 1, 1))
    return ProgramSpec(name, prelude + kernel, launch=launch, persistent=not specials and par.mode in PERSISTENT,
                       dynamic_shared=shared_total, tensor_maps=tuple(maps), waits_for_grid=lang.grid_wait)


def _emit_warp_tree(lang: GPULanguage, par: _Parallel, acc: str, emit: Callable[[str], None],
                    indent: str = "") -> None:
    """Folds the partial results of a warp's lanes into its first lane's `acc`, by shuffles."""
    dt = par.acc.dtype
    ty = lang.render_dtype(dt)
    folded = lang.render_result(lang.code_for_op[par.reduce_op]("tg_o", acc, dt), dt)
    emit(f"{indent}for (int tg_s = {lang.warp_size // 2}; tg_s > 0; tg_s >>= 1) {{")
    emit(f"{indent}  const {ty} tg_o = ({ty}){lang.render_shuffle_down(acc, 'tg_s')};")
    emit(f"{indent}  {acc} = {folded};")
    emit(f"{indent}}}")


def _emit_block_combine(lang: GPULanguage, par: _Parallel, acc: str, emit: Callable[[str], None]) -> None:
    """Folds the block's partial results into every thread's `acc`: a shuffle tree in each warp, the warps' results
    through shared memory, a shuffle tree in the first warp. Needs a block of whole warps (every launch's is)."""
    dt = par.acc.dtype
    tx, bdim, w = lang.thread_idx("x"), lang.block_dim("x"), lang.warp_size
    shift = w.bit_length() - 1
    _emit_warp_tree(lang, par, acc, emit)
    emit(f"if (({tx} & {w - 1}u) == 0) tg_red[{tx} >> {shift}] = {acc};")
    emit(lang.barrier)
    emit(f"if ({tx} < {w}) {{")
    emit(f"  {acc} = {tx} < ({bdim} >> {shift}) ? tg_red[{tx}] : {lang.render_const(par.acc.arg, dt)};")
    _emit_warp_tree(lang, par, acc, emit, "  ")
    emit(f"  if ({tx} == 0) tg_red[0] = {acc};")
    emit("}")
    emit(lang.barrier)
    emit(f"{acc} = tg_red[0];")
    emit(f"{lang.barrier}  // tg_red is reused by the next output")


def _blocked_sum(par: _Parallel) -> bool:
    """Is the plan's reduction a float sum spread so that one thread may take more than SUM_BLOCK additions? (A warp
    per output takes at most WARP_MAX_STEPS vectors a row over its lanes: a few additions a lane.)"""
    return par.mode in ("blocks", "grid") and par.reduce_op is BinaryOps.ADD and dtypes.is_float(par.acc.dtype)


def _emit_grid_combine(lang: GPULanguage, par: _Parallel, acc: str, emit: Callable[[str], None]) -> None:
    """After each block has its partial result in `acc`: every block publishes it, and the last block to finish
    folds all of them into `acc`; the other blocks return. Launches of one kernel are ordered on the stream, so one
    set of partial slots per module suffices."""
    dt = par.acc.dtype
    ty = lang.render_dtype(dt)
    tx, bx, bdim = lang.thread_idx("x"), lang.block_idx("x"), lang.block_dim("x")
    emit(f"if ({tx} == 0) {{")
    emit(f"  tg_part[{bx}] = {acc};")
    emit(f"  {lang.fence}  // the partial is visible to every block before the count says so")
    emit(f"  tg_last = {lang.render_atomic_inc('tg_done')} == tg_blocks - 1u;")
    emit("}")
    emit(lang.barrier)
    emit("if (!tg_last) return;")
    emit(f"{acc} = {lang.render_const(par.acc.arg, dt)};")
    emit(f"for (unsigned int tg_i = {tx}; tg_i < tg_blocks; tg_i += {bdim}) {{")
    emit(f"  const {ty} tg_p = ((volatile {ty}*)tg_part)[tg_i];")
    emit(f"  {acc} = {lang.render_result(lang.code_for_op[par.reduce_op]('tg_p', acc, dt), dt)};")
    emit("}")
    _emit_block_combine(lang, par, acc, emit)


def _launch_bounds(specials: list[UOp], par: _Parallel) -> int | None:
    if not specials:
        return par.block
    lidx = [u.arg[2] for u in specials if u.arg[1].startswith("lidx")]
    if lidx and all(isinstance(s, int) for s in lidx):
        return math.prod(lidx)
    local = [u.arg[3] for u in specials if len(u.arg) > 3 and not u.arg[1].startswith(("gidx", "lidx"))]
    return math.prod(local) if local and all(isinstance(s, int) for s in local) else None

"""Hand-written choices for GPU kernels: which kernels the linearizer maps to the grid, and their optimisations.

Two paths reach a GPU. The linearizer's own (`Linearizer.gpu`): output dims become the grid, a thread computes one
output or one register tile of outputs (UPCAST, with VECTORIZE along the innermost dim for 16-byte loads and
stores), LOCAL shapes the block, and UNROLL deepens the reduce loop. The GPU render loop's plan (`codegen/
gpu_plan.py`) for kernels left as plain loops: it spreads one reduction over a block (few outputs, each reading
a long contiguous row) or over the whole grid (one output), combining with warp shuffles.

NOTE: only memory-bound reductions stay with the renderer: few outputs, many contiguous inputs each. There one
thread per output would leave the GPU nearly idle, and the renderer's split reduction measured at 96% of copy
bandwidth (H100). Everything else, elementwise kernels and reductions with many outputs or strided inputs (matmul,
convolution, column sums), is the linearizer's.
"""
from __future__ import annotations

import math

from tinygrad.codegen.gpu_plan import WARP_MAX_STEPS, vector_width
from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.codegen.uops import VECTOR_DTYPES
from tinygrad.dtype import dtypes
from tinygrad.ops import BinaryOps, BufferOps, ReduceOps, UnaryOps

# reductions with at most this many outputs, each of at least RENDERER_MIN_INPUTS inputs read contiguously, stay
# with the renderer's split reductions (the same bounds as codegen/gpu_plan.py's block and grid modes)
RENDERER_MAX_OUTPUTS = 16384
RENDERER_MIN_INPUTS = 256
# below this many outputs the renderer splits even a strided reduction: too few threads for the grid otherwise
GRID_MIN_OUTPUTS = 1024
# a register tile's first dim takes at most TILE outputs (or a 16-byte vector)
TILE = 4
# tiles never leave fewer threads than this (a GPU holds ~2048 threads per multiprocessor, 132 of them on an H100)
MIN_THREADS = 1024
# the second dim of a register tile takes up to this many outputs (B's row reused for each: 4 x 8 accumulators)
TILE_SECOND = 8
# the reduce loop's body holds about this many steps: a short innermost reduced dim (a 3x3 kernel's width) is
# unrolled whole and the innermost long one (K, channels) by what is left (measured on the H100 by BEAM and a sweep:
# conv2d 8x64x56x56 3x3 8.8 -> 16.9 TFLOP/s, fp32 1024 matmul 9.7 -> 10.8 TFLOP/s with the 4x8 tile)
UNROLL_STEPS = 16
SHORT_DIM = 4
# the block of a tiled kernel: LOCAL_X threads along the innermost output dim, LOCAL_THREADS in all
LOCAL_X = 16
LOCAL_THREADS = 256
# a grouped reduction's block: up to GROUP_LOCAL_X outputs along the innermost output dim, GROUP threads each
GROUP_LOCAL_X = 64
MAX_BLOCK = 1024
# kernels left with fewer threads than this, reducing at least GROUP_MIN_INPUTS per output, split the reduction
# across GROUP threads of a block (a matrix-vector product: 8192 outputs would fill a twentieth of an H100)
GROUP_BELOW_THREADS = 1 << 15
GROUP_MIN_INPUTS = 256
GROUP = 16
# tensor-core configs (indices into codegen/tensor_cores.TC_CONFIGS) in order of preference, and the fewest blocks
# the chosen one may leave (an H100 has 132 multiprocessors). Measured on the H100 (4096^3 fp16, TFLOP/s, a@b and
# a@b.T, one run): 128x128x32 in 4 stages (64 KB, dynamic shared memory) 319/314, in 2 stages 308/289, in 3 stages
# 302/292, 128x128x64 in 3 stages 305/312, 128x256x32 (8 warps) 273/273, 128x64x32 in 4 stages 283/273, 64x64
# 250/215. Where a block gets only 48 KB, the 4-stage tile does not fit and the 2-stage one is next. On Hopper, wgmma
# comes first (PyTorch 706/718 in the same run): 128x256x64 in 4 stages 448/449, in 3 stages 426/426, 128x128x64
# 414/419, 64x256x64 308/321. With TMA (a thread copying whole slices, mbarriers instead of block barriers) the
# 128x256x64 tile in 4 stages measured 521/523 on an H200, against 460/469 for cp.async in the same run; clusters of
# 2 sharing B's slices (multicast) 345-368, 128x128 in 6 stages 210-220. Once the epilogue stored pairs of halves
# (H100, PyTorch 728): 128x256x64 with a producer warp 622/621, without 608/601, 256x128 with one 603/603.
TC_PREFERENCE = (31, 26, 23, 22, 21, 14, 0, 4, 3, 5, 6, 7, 8)
TC_MIN_BLOCKS = 128
# matmuls with fewer rows or columns than this stay off tensor cores (their smallest tile is 32 x 32)
TC_MIN_DIM = 32
# a tile is taken only where its share of real outputs is at least this fraction of the best config's
TC_MIN_FILL = 0.8
# float32 convolutions on TF32 tensor cores take this config (32 x 64) first where it fits as well as the others:
# BEAM=2 chose it for the benchmark's 8x64x56x56 3x3 on the H100 (21.3 TFLOP/s, against 16.4-16.8 for the 64 x 64
# tile the fill rule takes); a TF32 slice is twice the bytes of a half one, and half-height tiles keep twice the
# blocks in flight to cover the padded window's element-wise staging
TF32_CONV_FIRST = 6
# float32 matmuls: SMEM configs (indices into codegen/tensor_cores.SIMT_CONFIGS) in order of preference, taken as
# for tensor cores. Measured on the H100 (TFLOP/s, 1024^3 and 4096^3; PyTorch 28.3 and 51.0 in the same run):
# 128x128x8 19.0 / 45.9, 64x128x16 26.6 / 35.7, 128x64x16 26.4 / 36.9, 64x64x16 25.0 / 28.7; the register tiles
# without shared memory 10.9 / 19.6
SMEM_PREFERENCE = (4, 3, 2, 0, 5, 6)


def _bound(s) -> int:
    return s if isinstance(s, int) else int(s.max)


def _reduce_reads_contiguously(lin) -> bool:
    """Does every load under the reduce read consecutive elements along the innermost reduced dim (or the same
    element, a broadcast)? Or, where some load does, do the others read elements at most 16 bytes apart (a run of
    elements a step: a product over quantized words reads 8 floats a word, 4 of them 16 bytes after the last
    word's)?"""
    inner = max(lin.reduce_axes)
    strides = [(op.arg.st.real_strides()[inner], op.arg.dtype.itemsize) for op in lin.reduceop.toposort()
               if op.op is BufferOps.LOAD]
    if not all(isinstance(s, int) and s >= 0 for s, _ in strides):
        return False
    if all(s in (0, 1) for s, _ in strides):
        return True
    return any(s == 1 for s, _ in strides) and all(s * size <= 16 for s, size in strides)


def uses_grid(lin) -> bool:
    """Does the linearizer map this kernel's output dims to the GPU grid itself (else the renderer plans it)?"""
    if lin.reduceop is None or not lin.reduce_axes:
        return True
    full = lin.full_shape
    outputs = math.prod(_bound(full[d]) for d in range(len(full)) if d not in lin.reduce_axes)
    inputs = math.prod(_bound(full[d]) for d in lin.reduce_axes)
    if outputs <= RENDERER_MAX_OUTPUTS and inputs >= RENDERER_MIN_INPUTS:
        if lin.opts.tensor_cores and outputs >= GRID_MIN_OUTPUTS and _matmul_shaped(lin):
            # a product summed over a long reduce, with a tile's worth of outputs along each operand's own dims (a
            # convolution's weight gradient, 64 x 64 x 3 x 3 outputs each over batch x OH x OW): a block tile
            # reads each input once a tile, where a block an output would read them once an output
            return True
        return not (outputs < GRID_MIN_OUTPUTS or _reduce_reads_contiguously(lin))
    # many short contiguous rows along one output dim (an LLM's output projection: 262,144 rows of 640 int8
    # weights): a warp per row, 16-byte loads of the weights
    live = [d for d in range(len(full)) if d not in lin.reduce_axes and (not isinstance(full[d], int) or full[d] > 1)]
    if len(live) == 1 and inputs >= RENDERER_MIN_INPUTS and _reduce_reads_contiguously(lin):
        narrowest = min(op.arg.dtype.itemsize for op in lin.reduceop.toposort() if op.op is BufferOps.LOAD)
        return -(-inputs // vector_width(narrowest)) > WARP_MAX_STEPS
    return True


def _matmul_shaped(lin) -> bool:
    """Is the kernel a sum of products of two tensor-core loads (through casts), with at least TC_MIN_DIM outputs
    along the dims only the first varies along and as many along those only the second does (a block tile's)?"""
    red = lin.reduceop
    src = _uncast(red.src[0])
    if red.op is not ReduceOps.SUM or src.op is not BinaryOps.MUL:
        return False
    loads = [_uncast(op) for op in src.src]
    if any(op.op is not BufferOps.LOAD for op in loads):
        return False
    # only operands tensor cores take: a float32 tile of few blocks would be slower than a block an output
    tc_dtypes = (dtypes.float16, dtypes.bfloat16) + ((dtypes.float32,) if "tf32" in lin.opts.tensor_cores else ())
    if any(op.arg.dtype not in tc_dtypes for op in loads):
        return False
    full, (xd, yd) = lin.full_shape, (lin.op_dims[id(op)] for op in loads)
    outs = [d for d in range(len(full)) if d not in lin.reduce_axes]
    if any(not isinstance(full[d], int) for d in outs):
        return False
    return min(math.prod(full[d] for d in outs if d in mine and d not in other)
               for mine, other in ((xd, yd), (yd, xd))) >= TC_MIN_DIM


def _uncast(op):
    while op.op is UnaryOps.CAST and not op.arg[1]:
        op = op.src[0]
    return op


def _stride(st, d: int):
    return st.real_strides()[d]


def _broadcast(st, d: int) -> bool:
    """Does a load through `st` read the same element all along dim `d` (so a tile along d reuses it)?"""
    s = _stride(st, d)
    return isinstance(s, int) and s == 0


def _fit(size: int, amt: int) -> int:
    """The largest power of two up to `amt` that divides `size`."""
    while amt > 1 and size % amt:
        amt //= 2
    return amt


def gpu_opts(lin) -> list[Opt]:
    """The optimisations for a kernel on the grid (before linearize), by its shape:

    - elementwise: the innermost output dim as 16-byte vectors where the output is contiguous along it (a thread per
      vector: one wide load and store each);
    - reductions (matmul, convolution): a register tile of TILE x TILE_SECOND outputs a thread. Its first dim is the
      innermost output dim, along which some load is reused (a matmul's row of A), as vector lanes where the output
      is contiguous (B and C move 16 bytes at a time, coalesced across the threads of a warp); its second dim the
      innermost other output dim along which the loads that vary with the first are reused (B's row, for every row
      of the tile). The reduce loop is unrolled as _unrolls says, and the block is LOCAL_X x LOCAL_Y threads over
      the tile's two dims, so that a block's loads are a compact block of A and of B. Kernels left with too few
      threads to fill the GPU split the reduction across GROUP threads of a block as well (GROUP: partial results
      combined through shared memory), so a matrix-vector product keeps enough loads in flight.
    Tiles shrink (then go) where they would leave fewer than MIN_THREADS threads."""
    full, red = lin.full_shape, frozenset(lin.reduce_axes)
    outs = [d for d in range(len(full)) if d not in red and isinstance(full[d], int) and full[d] > 1]
    if not outs:
        return []
    store = lin.ast[0].arg
    dtype = lin.op_dtypes[id(lin.reduceop)] if lin.reduceop is not None else store.dtype
    inner = outs[-1]
    # (half and bfloat16 move as packed vectors of their bits where the device has half_vectors: codegen/packed_halves)
    packed = dtype in (dtypes.float16, dtypes.bfloat16) and lin.opts.half_vectors
    width = lin.opts.max_vector_bytes // dtype.itemsize if dtype in VECTOR_DTYPES or packed else 0
    contiguous = all(isinstance(_stride(r.arg.st, inner), int) and _stride(r.arg.st, inner) == 1 for r in lin.ast)
    vec = width if width >= 2 and contiguous and full[inner] % width == 0 else 0
    if lin.reduceop is None:
        return [Opt(OptOps.VECTORIZE, inner, vec)] if vec else []
    if lin.opts.tensor_cores:
        tc = tensor_core_opt(lin)
        if tc is not None:
            return [tc]
    if lin.opts.has_shared:
        tile = smem_opt(lin)
        if tile is not None:
            return [tile]
    outputs = math.prod(_bound(full[d]) for d in range(len(full)) if d not in red)
    rdims = [d for d in lin.reduce_axes if isinstance(full[d], int) and full[d] > 1]
    if lin.opts.has_shared and rdims and outputs < GROUP_BELOW_THREADS and \
            math.prod(full[d] for d in rdims) >= GROUP_MIN_INPUTS:
        # too few outputs to fill the GPU (a matrix-vector product): a thread per output, each output's reduction
        # split across GROUP threads of a block, and wide blocks. Memory-bound, so what counts is loads in flight:
        # tiles of outputs would cut the threads by their size (BEAM measured x @ W on the H100 at 60 us this way,
        # 133 us with 4-output tiles)
        group = _fit(full[rdims[-1]], GROUP)
        if group > 1:
            ret = [Opt(OptOps.GROUP, rdims[-1], group)]
            live = [d for d in outs if full[d] > 1]
            if live:
                ret.append(Opt(OptOps.LOCAL, live[-1], min(MAX_BLOCK // group, full[live[-1]], GROUP_LOCAL_X)))
            return ret
    budget = outputs // MIN_THREADS  # the most outputs a thread may take
    loads = [op.arg.st for op in lin.reduceop.toposort() if op.op is BufferOps.LOAD]
    ret, tiled = [], []
    # the first dim of the tile: vector lanes, or copies
    first = vec if vec and vec <= budget else _fit(full[inner], min(TILE, budget))
    if first > 1 and any(_broadcast(st, inner) for st in loads):
        ret.append(Opt(OptOps.VECTORIZE, inner, first) if first == vec else Opt(OptOps.UPCAST, inner, first))
        tiled.append(inner)
        budget //= first
        varying = [st for st in loads if not _broadcast(st, inner)]
    else:
        varying = loads
    for d in reversed(outs):
        if d in tiled or not varying or not all(_broadcast(st, d) for st in varying):
            continue
        amt = _fit(full[d], min(TILE_SECOND, budget))
        if amt > 1:
            ret.append(Opt(OptOps.UPCAST, d, amt))
            tiled.append(d)
        break
    ret += _unrolls(full, rdims)
    unroll = next((o.amt for o in ret if o.op is OptOps.UNROLL and rdims and o.axis == rdims[-1]), 1)
    # too few threads for the GPU (a matrix-vector product): the reduction is split across threads of a block too
    group = 1
    threads = outputs // math.prod(o.amt for o in ret if o.op in (OptOps.UPCAST, OptOps.VECTORIZE))
    # GROUP combines the threads' partial results through shared memory: only where the device has it
    if lin.opts.has_shared and rdims and threads < GROUP_BELOW_THREADS and \
            math.prod(full[d] for d in rdims) >= GROUP_MIN_INPUTS:
        group = _fit(full[rdims[-1]] // unroll, GROUP)
        if group > 1:
            ret.append(Opt(OptOps.GROUP, rdims[-1], group))
    # the block: LOCAL_X threads along the innermost output dim, the rest of the block along the next one out
    steps = {d: full[d] // math.prod(o.amt for o in ret if o.axis == d and o.op is not OptOps.UNROLL) for d in outs}
    live = [d for d in outs if steps[d] > 1]
    budget = LOCAL_THREADS // group
    if len(live) >= 2 or (live and group > 1):
        lx = min(LOCAL_X, steps[live[-1]], budget)
        ret.append(Opt(OptOps.LOCAL, live[-1], lx))
        if len(live) >= 2:
            ret.append(Opt(OptOps.LOCAL, live[-2], max(1, min(budget // lx, steps[live[-2]]))))
    return ret


def tensor_core_opt(lin) -> Opt | None:
    """TC for a matmul-shaped kernel of half or bfloat16 operands (codegen/tensor_cores.py), or None: the first
    config of TC_PREFERENCE that fits the kernel and still gives TC_MIN_BLOCKS blocks, else the fitting config with
    the most blocks."""
    from tinygrad.codegen.tensor_cores import TC_CONFIGS, tc_plan
    return _block_tile(lin, OptOps.TC, TC_PREFERENCE, TC_CONFIGS, tc_plan)


def smem_opt(lin) -> Opt | None:
    """SMEM for a matmul-shaped kernel of float32 operands, chosen as tensor_core_opt chooses TC."""
    from tinygrad.codegen.tensor_cores import SIMT_CONFIGS, simt_plan
    return _block_tile(lin, OptOps.SMEM, SMEM_PREFERENCE, SIMT_CONFIGS, simt_plan)


def _block_tile(lin, op, preference, configs, planner) -> Opt | None:
    fits, first, merge = [], None, _merge(lin, op, preference, planner)
    for i in preference:
        plan, _ = planner(lin, i, merge)
        if plan is None:
            continue
        full, cfg = lin.full_shape, configs[i]
        if plan.simt and plan.outer:
            # a float32 convolution: the SMEM tile restages K's slices for every filter tap, and the H200 ran the
            # benchmark's 3x3 at 11.7 TFLOP/s that way, against 17 with the plain tiles below
            return None
        if op is OptOps.TC and plan.outer and plan.elem == dtypes.float32:
            first = TF32_CONV_FIRST
        m, n = plan.size(full, plan.m_axis), plan.size(full, plan.n_axis)
        if min(m, n) < TC_MIN_DIM:
            return None  # a few rows (batch-1 or batch-2 decode): mostly padding on tensor cores; GROUP reads faster
        tiles = -(-m // cfg.bm) * -(-n // cfg.bn)
        fits.append((i, tiles * math.prod(full[d] for d in plan.batch), m * n / (tiles * cfg.bm * cfg.bn)))
    if not fits:
        return None
    # the tiles' share of real outputs (the rest is padding past M's or N's end) within TC_MIN_FILL of the best: a
    # convolution's 64 channels by 56 columns fill 22% of a 128 x 128 tile, 88% of a 64 x 64 one
    fill = max(f for _, _, f in fits) * TC_MIN_FILL
    fits = [(i, blocks) for i, blocks, f in fits if f >= fill]
    if first is not None:
        fits.sort(key=lambda x: x[0] != first)
    return Opt(op, merge, next((i for i, blocks in fits if blocks >= TC_MIN_BLOCKS),
                               max(fits, key=lambda x: x[1])[0]))


def _merge(lin, op, preference, planner) -> int:
    """The TC Opt's axis (bits: 1 merges N's dims, 2 M's, 4 K's; TCPlan.n_dims, m_dims, k_dims): the first of 0-3
    that some config plans with M and N at least TC_MIN_DIM long, plus 4 where K alone is shorter than that. A
    convolution's 7- or 14-wide output rows take N as batch x OH x OW; its input gradient's taps and channels (too
    many blocks for the grid's z unmerged) N as channels x taps, and M as batch x OH x OW where OW alone is narrow."""
    if op is not OptOps.TC:
        return 0
    full = lin.full_shape
    for merge in (0, 1, 2, 3):
        plan = _first_plan(lin, preference, planner, merge)
        if plan is not None and min(plan.size(full, plan.m_axis), plan.size(full, plan.n_axis)) >= TC_MIN_DIM:
            # K shorter than a slice, with other reduced dims looping around it (a 7x7 stem's taps of 3 channels, a
            # weight gradient's 7 or 14 columns): every reduced dim merged into K, where that plans
            if full[plan.k_axis] < TC_MIN_DIM and plan.outer and _first_plan(lin, preference, planner, merge | 4):
                return merge | 4
            return merge
    return 0


def _first_plan(lin, preference, planner, merge: int):
    return next((p for p in (planner(lin, i, merge)[0] for i in preference) if p is not None), None)


def _unrolls(full, rdims: list[int]) -> list[Opt]:
    """UNROLLs of the reduce loop (see UNROLL_STEPS): the innermost reduced dim whole where it is short, then the
    innermost long reduced dim by a power of two that divides it."""
    ret, steps = [], 1
    if rdims and full[rdims[-1]] <= SHORT_DIM:
        ret.append(Opt(OptOps.UNROLL, rdims[-1], full[rdims[-1]]))
        steps = full[rdims[-1]]
    long = [d for d in rdims if full[d] > SHORT_DIM]
    if long:
        room = max(1, UNROLL_STEPS // steps)
        amt = _fit(full[long[-1]], 1 << (room.bit_length() - 1))
        # NOTE: at least two steps of the dim stay a loop: a reduce fully unrolled is the compiler's to schedule
        while amt > 1 and full[long[-1]] < 2 * amt:
            amt //= 2
        if amt > 1:
            ret.append(Opt(OptOps.UNROLL, long[-1], amt))
    return ret

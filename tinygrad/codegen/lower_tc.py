"""Block-tile kernels (the TC and SMEM Opts) lowered to uops: codegen/tensor_cores.py plans them, this makes them.

A block of threads computes a BM x BN tile of a matmul-shaped kernel's outputs. Its K loop stages BK-wide slices of
both operands in shared memory (codegen/tc_slices.py) through one of three pipelines: `SyncPipeline` (two buffers:
the next slice read into registers while this one is used), `AsyncPipeline` (`stages` slices in flight, copied by
cp.async) or `TmaPipeline` (Hopper: whole slices copied by the TMA unit, mbarriers saying when a stage has landed
and when it is free). Each step multiplies the staged slices by one kind of tile (TCPlan.kind, a TileKind; TILES
maps each to its class):

  * `WgmmaTile` (Hopper): a warpgroup issues a whole slice's wgmma instructions, which read shared memory themselves;
  * `MmaSyncTile` (NVIDIA sm_80+, half/bfloat16 or float32 as TF32): mma.sync on fragments read by ldmatrix;
  * `RdnaWmmaTile` (AMD RDNA3): WMMA on fragments read by plain loads of each lane's row or column;
  * `SimdgroupTile` (Apple): simdgroup_matrix on simdgroup_load tiles, read back through threadgroup memory;
  * `SimtTile` (SMEM, float32 without tensor cores): a TM x TN tile of FMAs a thread.

Then each tile says where its accumulators are (a thread's base row and column and each copy's offset from them),
and the linearizer runs them through the kernel's elementwise tail to the stores (`BlockTileKernel.store`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from tinygrad.codegen.emitter import Emitter
from tinygrad.codegen.tc_slices import SliceStager
from tinygrad.codegen.tensor_cores import WGMMA_IN_FLIGHT, WGMMA_IN_FLIGHT_TMA, TCPlan, TileKind, slice_elems, tma_box
from tinygrad.codegen.uops import TmaExit, TmaInit, TmaMap, TmaProduce, TmaProducer, TmaRelease, TmaWait, UOp, UOps
from tinygrad.dtype import PtrDType, dtypes
from tinygrad.ops import BinaryOps
from tinygrad.shape.symbolic import Variable


@dataclass(frozen=True)
class TileOutputs:
    """Where a block tile's accumulators are, for the kernel's stores: per tiled dim (the batch, M, N) the thread's
    base index (a Variable bound to its uop) and each copy's offset from it; the accumulators' values by (copy along
    M, copy along N); the dims whose last tiles run past their sizes (-> the sizes); and whether neighbouring half
    outputs along N may be stored as one 4-byte store (the wgmma epilogue)."""
    m_axis: int
    n_axis: int
    bases: dict
    offsets: dict
    values: dict
    limits: dict
    paired_stores: bool
    # M or N of merged dims (TCPlan.m_dims, n_dims): {m_axis or n_axis: {each merged dim: its index as a Node of
    # Variable "tc_m" or "tc_n", the flat index (the base plus the copy's offset along that axis)}}
    split: dict = field(default_factory=dict)


@dataclass(frozen=True)
class BlockTileKernel:
    """What the linearizer hands a block-tile lowering: its uop emitter, the kernel's full shape and buffers
    (index -> DEFINE_GLOBAL), and two calls back: `launch(global_size, local_size)` and `store(TileOutputs)`."""
    em: Emitter
    full_shape: tuple
    buffers: dict
    launch: Callable[[tuple, tuple], None]
    store: Callable[[TileOutputs], None]


@dataclass(frozen=True)
class _Operand:
    """A staged operand: its load, the dim of its rows (M or N), the tile's rows, the tile's first row, its slices'
    shared memory, the elements of one slice and whether slices are stored K-major."""
    load: object
    rows_axis: int
    rows: int
    row0: UOp
    smem: UOp
    slice_size: int
    along_k: bool


def lower_block_tile(plan: TCPlan, kernel: BlockTileKernel) -> None:
    """The whole kernel of a TC or SMEM plan: grid, staging pipeline, K loop, accumulators to the stores."""
    em, full, cfg = kernel.em, kernel.full_shape, plan.config
    i32 = dtypes.int32
    m_ax, n_ax = plan.m_axis, plan.n_axis
    tiles_y, tiles_x = -(-plan.size(full, m_ax) // cfg.bm), -(-plan.size(full, n_ax) // cfg.bn)
    # outputs past the end of M or N (the last tiles of sizes no tile divides) are neither read nor stored (merged
    # dims: past the outermost one's size, which takes the flat index's quotient whole)
    limits = {}
    for ax, tile in ((m_ax, cfg.bm), (n_ax, cfg.bn)):
        if plan.size(full, ax) % tile:
            outermost = (plan.merged(ax) or (ax,))[0]
            limits[outermost] = full[outermost]
    nbatch = math.prod(full[d] for d in plan.batch)
    # the grid: x over N's tiles, y over M's, z over the batch; one flat block of threads
    block_x = em.uop(UOps.SPECIAL, i32, (), (0, "gidx0", tiles_x), False)
    block_y = em.uop(UOps.SPECIAL, i32, (), (1, "gidx1", tiles_y), False)
    block = cfg.block_threads  # (a TMA producer warp after the others)
    tid = em.uop(UOps.SPECIAL, i32, (), (0, "lidx0", block), False)
    kernel.launch((tiles_x, tiles_y, nbatch), (block, 1, 1))
    batch = {}
    if plan.batch:
        block_z = em.uop(UOps.SPECIAL, i32, (), (2, "gidx2", nbatch), False)
        inner = 1
        for d in reversed(plan.batch):
            v = Variable(f"tc_batch{d}", 0, full[d] - 1)
            u = em.div(block_z, em.const(inner)) if inner > 1 else block_z
            em.bind(v, em.mod(u, em.const(full[d])) if inner * full[d] < nbatch else u)
            batch[d] = v
            inner *= full[d]
    row0_a, row0_b = em.mul(block_y, em.const(cfg.bm)), em.mul(block_x, em.const(cfg.bn))
    size_a = slice_elems(cfg.bm, cfg.bk, plan.a_along_k)
    size_b = slice_elems(cfg.bn, cfg.bk, plan.b_along_k)
    smem_a = em.uop(UOps.DEFINE_LOCAL, PtrDType(plan.elem), (), ("tc_a", plan.stages * size_a), False)
    smem_b = em.uop(UOps.DEFINE_LOCAL, PtrDType(plan.elem), (), ("tc_b", plan.stages * size_b), False)
    a = _Operand(plan.a, m_ax, cfg.bm, row0_a, smem_a, size_a, plan.a_along_k)
    b = _Operand(plan.b, n_ax, cfg.bn, row0_b, smem_b, size_b, plan.b_along_k)
    stager = SliceStager(em, plan, full, kernel.buffers, tid, batch)
    wgmma = plan.kind is TileKind.WGMMA
    tile = TILES[plan.kind](em, plan, stager, tid)
    # the other reduced dims' steps around K's: each stages K's slices again
    steps = stager.ktiles * math.prod(full[d] for d in plan.outer)
    pipe_kind = TmaPipeline if cfg.tma else AsyncPipeline if plan.asynchronous else SyncPipeline
    pipe = pipe_kind(em, plan, stager, (a, b), tid, steps, tile.in_flight, wgmma)
    pipe.prologue()
    loop = em.uop(UOps.LOOP, i32, (em.const(0), em.const(steps)), None, False)
    em.open_scope()
    cur = pipe.begin_step(loop)
    tile.multiply(loop, a, b, em.mul(cur, em.const(size_a)), em.mul(cur, em.const(size_b)))
    pipe.end_step(loop)
    em.close_scope()
    em.uop(UOps.ENDLOOP, None, (loop,), None, False)
    tile.finish()
    pipe.finish()
    # the accumulators through the kernel's elementwise tail: each tiled dim's copies are offsets from the
    # thread's base row (column)
    base_m, base_n, off_m, off_n = tile.outputs(row0_a, row0_b)
    row = Variable("tc_row", 0, tiles_y * cfg.bm - 1 - max(off_m))
    # (for wgmma tc_col is even: the paired stores rely on it)
    col = Variable("tc_col", 0, tiles_x * cfg.bn - 1 - max(off_n))
    em.bind(row, base_m)
    em.bind(col, base_n)
    bases = {**batch, m_ax: row, n_ax: col}
    offsets = {**{d: [0] for d in batch}, m_ax: off_m, n_ax: off_n}
    values = {(cm, cn): tile.value(cm, cn) for cm in range(len(off_m)) for cn in range(len(off_n))}
    split = {}
    for ax, name, tiles in ((m_ax, "tc_m", tiles_y * cfg.bm), (n_ax, "tc_n", tiles_x * cfg.bn)):
        if plan.merged(ax):
            split[ax] = plan.split(full, ax, Variable(name, 0, tiles - 1))
    kernel.store(TileOutputs(m_ax, n_ax, bases, offsets, values, limits, wgmma, split))


# ---------------------------------------------------------------------------------------------------------------
# Staging pipelines: how each step's slices reach shared memory
# ---------------------------------------------------------------------------------------------------------------
class SyncPipeline:
    """Two buffers: the first slice staged before the loop; at each step the next slice is read into registers,
    and written to the other buffer once this one has been used."""

    def __init__(self, em: Emitter, plan: TCPlan, stager: SliceStager, operands: tuple, tid: UOp, steps: int,
                 in_flight: int, fence: bool):
        self.em, self.plan, self.stager, self.operands, self.tid = em, plan, stager, operands, tid
        self.steps, self.in_flight, self.fence = steps, in_flight, fence
        self.stages = plan.stages

    def prologue(self) -> None:
        em, st = self.em, self.stager
        # the first slice of K into buffer 0
        for op in self.operands:
            st.stage(st.copy(op.load, op.rows_axis, op.rows, op.row0, st.step_at(0, "pre0"), None, False), op.smem,
                     em.const(0), op.along_k)
        em.uop(UOps.BARRIER, None, (), None, False)

    def begin_step(self, loop: UOp) -> UOp:
        """Issues this step's copies; returns which buffer holds this step's slices."""
        em, st = self.em, self.stager
        nxt = em.add(loop, em.const(1))
        more = em.lt(nxt, em.const(self.steps))
        at = st.step_at(nxt, "next")
        self.held = [st.copy(op.load, op.rows_axis, op.rows, op.row0, at, more, False) for op in self.operands]
        return em.mod(loop, em.const(2))

    def end_step(self, loop: UOp) -> None:
        em = self.em
        other = em.mod(em.add(loop, em.const(1)), em.const(2))
        for chunks, op in zip(self.held, self.operands):
            self.stager.stage(chunks, op.smem, em.mul(other, em.const(op.slice_size)), op.along_k)
        em.uop(UOps.BARRIER, None, (), None, False)

    def finish(self) -> None:
        pass


class AsyncPipeline(SyncPipeline):
    """`stages` buffers filled by cp.async: stages-1-in_flight slices in flight ahead of the one being used (a commit
    group each, empty past the end so that every step commits one)."""

    def prologue(self) -> None:
        em, st = self.em, self.stager
        for i in range(self.stages - 1 - self.in_flight):
            if i < self.steps:
                for op in self.operands:
                    st.stage(st.copy(op.load, op.rows_axis, op.rows, op.row0, st.step_at(i, f"pre{i}"), None, True),
                             op.smem, em.const(i * op.slice_size), op.along_k)
            em.uop(UOps.ASYNC_COMMIT, None, (), None, False)

    def begin_step(self, loop: UOp) -> UOp:
        em, st = self.em, self.stager
        # this slice has landed (this thread's copies; the barrier makes everyone's visible, and says that every
        # thread is done with the buffer the next copies overwrite), then the slice stages-1 ahead is started
        em.uop(UOps.ASYNC_WAIT, None, (), self.stages - 2 - self.in_flight, False)
        if self.fence:
            # the copies were writes of this thread; wgmma reads through the asynchronous proxy
            em.uop(UOps.FENCE, None, (), "async_proxy", False)
        em.uop(UOps.BARRIER, None, (), None, False)
        ahead = em.add(loop, em.const(self.stages - 1 - self.in_flight))
        more = em.lt(ahead, em.const(self.steps))
        buf = em.mod(ahead, em.const(self.stages))
        at = st.step_at(ahead, "ahead")
        for op in self.operands:
            st.stage(st.copy(op.load, op.rows_axis, op.rows, op.row0, at, more, True), op.smem,
                     em.mul(buf, em.const(op.slice_size)), op.along_k)
        em.uop(UOps.ASYNC_COMMIT, None, (), None, False)
        return em.mod(loop, em.const(self.stages))

    def end_step(self, loop: UOp) -> None:
        pass


class TmaPipeline(SyncPipeline):
    """Hopper's TMA (see UOps.TMA): thread 0 copies whole slices; every stage is filled before the loop, and at
    step k the stage of step k-1-in_flight (whose wgmma every warp has waited for by its step k-1) takes step
    k+S-1-in_flight.
    With a producer warp, that warp copies every step's slices instead, each once its stage is freed."""

    def prologue(self) -> None:
        em, plan, cfg = self.em, self.plan, self.plan.config
        a, b = self.operands
        tma = cfg.tma
        self.maps = []
        for is_a, op, name in ((True, a, "tmap_a"), (False, b, "tmap_b")):
            dims, strides, box, offset = tma_box(plan, is_a, self.stager.full)
            self.maps.append(em.uop(UOps.TMA, None, (self.stager.buffers[op.load.arg.idx],),
                                    TmaMap(name, offset, op.load.arg.dtype.itemsize, dims, strides, box, 128), False))
        self.bars = em.uop(UOps.DEFINE_LOCAL, PtrDType(dtypes.uint64), (), ("tc_bar", 2 * self.stages), False)
        em.uop(UOps.TMA, None, (self.bars, self.tid), TmaInit(self.stages, cfg.threads // 32 * tma, tma), False)
        self.leader = em.eq(self.tid, em.const(0))
        self.produce = TmaProduce(self.stages, a.slice_size, b.slice_size, plan.b_along_k, cfg.bn // 64, tma)
        copies = (a.smem, b.smem, self.maps[0], self.maps[1], a.row0, b.row0)
        if cfg.producer:
            # the last warp copies every step's slices, each once its stage is freed, and leaves
            em.uop(UOps.TMA, None, (self.bars, self.tid) + copies,
                   TmaProducer(self.stages, a.slice_size, b.slice_size, plan.b_along_k, cfg.bn // 64, self.steps,
                               cfg.threads, tma), False)
        for i in range(0 if cfg.producer else min(self.stages, self.steps)):
            em.uop(UOps.TMA, None, (self.bars, self.leader, em.const(i)) + copies, self.produce, False)

    def begin_step(self, loop: UOp) -> UOp:
        em, a, b = self.em, *self.operands
        if not self.plan.config.producer:
            ahead = em.add(loop, em.const(self.stages - 1 - self.in_flight))
            started = em.lt(em.const(self.in_flight), loop)
            go = em.both(self.leader, em.both(started, em.lt(ahead, em.const(self.steps))))
            em.uop(UOps.TMA, None, (self.bars, go, ahead, a.smem, b.smem, self.maps[0], self.maps[1], a.row0, b.row0),
                   self.produce, False)
        em.uop(UOps.TMA, None, (self.bars, loop), TmaWait(self.stages), False)
        return em.mod(loop, em.const(self.stages))

    def end_step(self, loop: UOp) -> None:
        # the instructions of the slice `in_flight` steps back are done (the wgmma waited for them): its stage is free
        em, in_flight = self.em, self.in_flight
        go = em.eq(em.mod(self.tid, em.const(32)), em.const(0))
        if in_flight:
            go = em.both(go, em.lt(em.const(in_flight - 1), loop))
        em.uop(UOps.TMA, None, (self.bars, em.add(loop, em.const(-in_flight)) if in_flight else loop, go),
               TmaRelease(self.stages, self.plan.config.tma), False)

    def finish(self) -> None:
        self.em.uop(UOps.TMA, None, (), TmaExit(self.plan.config.tma), False)


# ---------------------------------------------------------------------------------------------------------------
# Tiles: how a step multiplies the staged slices, and where the accumulators end up
# ---------------------------------------------------------------------------------------------------------------
class WgmmaTile:
    """Hopper's wgmma: a warpgroup per 64 rows of the tile; one accumulator of BN/2 floats a thread (BN/8 m16n8
    tiles), the whole slice (BK/16 instructions issued together) multiplied at each step."""

    def __init__(self, em: Emitter, plan: TCPlan, stager: SliceStager, tid: UOp):
        self.em, self.plan, cfg = em, plan, plan.config
        self.warp, lane = em.div(tid, em.const(32)), em.mod(tid, em.const(32))
        self.c_row, self.c_pair = em.div(lane, em.const(4)), em.mod(lane, em.const(4))
        self.group_a = em.mul(em.div(tid, em.const(128)), em.const(64 * cfg.bk))  # the group's first row of A
        self.acc = em.uop(UOps.DEFINE_ACC, plan.tc.acc.vec(cfg.bn // 2), (), 0.0, False)
        # B staged N-major: 64-column atoms of BK rows, this far apart
        self.b_atoms = cfg.bk * 64 * plan.elem.itemsize
        # wgmma leaves a slice's instructions in flight into the next step: the buffer they read is refilled one
        # step later than an mma.sync kernel's, so the copies run `in_flight` slices less ahead
        self.in_flight = WGMMA_IN_FLIGHT_TMA if cfg.tma else WGMMA_IN_FLIGHT

    def multiply(self, loop: UOp, a: _Operand, b: _Operand, base_a: UOp, base_b: UOp) -> None:
        # the previous slice's instructions are waited for (every group has, once past the next barrier: its buffer
        # is then refilled)
        em, plan, acc = self.em, self.plan, self.acc
        out = em.uop(UOps.WMMA, acc.dtype, (a.smem, em.add(base_a, self.group_a), b.smem, base_b, acc),
                     (plan.tc.name, (plan.config.bn, plan.b_along_k, self.b_atoms, self.in_flight)), False)
        self.acc = em.uop(UOps.PHI, acc.dtype, (acc, out, loop), None, False)

    def finish(self) -> None:
        wait = (self.plan.tc.name, ("wait", self.plan.config.bn))
        self.acc = self.em.uop(UOps.WMMA, self.acc.dtype, (self.acc,), wait, False)

    def outputs(self, row0_a: UOp, row0_b: UOp) -> tuple:
        # warp w (of all the block's) holds rows 16w+g and 16w+g+8, columns 8j+2q and 8j+2q+1 of its group
        em = self.em
        off_n = [(i // 2) * 8 + i % 2 for i in range(self.plan.config.bn // 4)]
        return (em.add(row0_a, em.add(em.mul(self.warp, em.const(16)), self.c_row)),
                em.add(row0_b, em.mul(self.c_pair, em.const(2))), [0, 8], off_n)

    def value(self, cm: int, cn: int) -> UOp:
        return self.em.uop(UOps.GEP, self.plan.tc.acc, (self.acc,), (cn // 2) * 4 + cm * 2 + cn % 2)


class SimtTile:
    """SMEM (float32, no tensor cores): thread (ty, tx) holds rows ty*4.. of each group of 4 rows (4*BM/TM apart)
    and columns likewise, a TM x TN tile of FMAs on 4-float vectors read from the slices."""
    in_flight = 0

    def __init__(self, em: Emitter, plan: TCPlan, stager: SliceStager, tid: UOp):
        self.em, self.cfg = em, plan.config
        cfg, f32 = plan.config, dtypes.float32
        tx, ty = em.mod(tid, em.const(cfg.bn // cfg.tn)), em.div(tid, em.const(cfg.bn // cfg.tn))
        self.row_t, self.col_t = em.mul(ty, em.const(4)), em.mul(tx, em.const(4))
        self.gap_m, self.gap_n = 4 * cfg.bm // cfg.tm, 4 * cfg.bn // cfg.tn
        self.accs = [[em.uop(UOps.DEFINE_ACC, f32.vec(4), (), 0.0, False) for _ in range(cfg.tn // 4)]
                     for _ in range(cfg.tm)]

    def multiply(self, loop: UOp, a: _Operand, b: _Operand, base_a: UOp, base_b: UOp) -> None:
        em, cfg, f32 = self.em, self.cfg, dtypes.float32
        for kk in range(cfg.bk):
            # slices are rows-major: 4 consecutive rows (columns) of one k are one 16-byte read
            va = [em.uop(UOps.LOAD, f32.vec(4), (a.smem, em.add(base_a, em.add(
                em.const(kk * cfg.bm + g * self.gap_m), self.row_t))), "aligned", False) for g in range(cfg.tm // 4)]
            vb = [em.uop(UOps.LOAD, f32.vec(4), (b.smem, em.add(base_b, em.add(
                em.const(kk * cfg.bn + g * self.gap_n), self.col_t))), "aligned", False) for g in range(cfg.tn // 4)]
            for i in range(cfg.tm):
                a_s = em.uop(UOps.GEP, f32, (va[i // 4],), i % 4)
                a4 = em.uop(UOps.VECTORIZE, f32.vec(4), (a_s,) * 4, None)
                for j in range(cfg.tn // 4):
                    acc = self.accs[i][j]
                    prod = em.uop(UOps.ALU, f32.vec(4), (a4, vb[j]), BinaryOps.MUL, False)
                    out = em.uop(UOps.ALU, f32.vec(4), (prod, acc), BinaryOps.ADD, False)
                    self.accs[i][j] = em.uop(UOps.PHI, acc.dtype, (acc, out, loop), None, False)

    def finish(self) -> None:
        pass

    def outputs(self, row0_a: UOp, row0_b: UOp) -> tuple:
        cfg = self.cfg
        off_m = [(i // 4) * self.gap_m + i % 4 for i in range(cfg.tm)]
        off_n = [(j // 4) * self.gap_n + j % 4 for j in range(cfg.tn)]
        return self.em.add(row0_a, self.row_t), self.em.add(row0_b, self.col_t), off_m, off_n

    def value(self, cm: int, cn: int) -> UOp:
        return self.em.uop(UOps.GEP, dtypes.float32, (self.accs[cm][cn // 4],), cn % 4)


class _WarpTile:
    """A tensor-core tile of warps: WM x WN warps, each a (BM/WM) x (BN/WN) part of the block tile made of
    tiles_m x tiles_n instruction tiles, one accumulator each; subclasses read the fragments."""
    in_flight = 0
    # the lanes of C's layout: (c_row, c_pair) = (l // 4, l % 4) (not RDNA3's, whose lanes hold columns)
    quads = True

    def __init__(self, em: Emitter, plan: TCPlan, stager: SliceStager, tid: UOp):
        self.em, self.plan, self.stager, self.tc = em, plan, stager, plan.tc
        cfg = plan.config
        self.warp_rows, self.warp_cols = cfg.bm // cfg.wm, cfg.bn // cfg.wn
        self.tiles_m, self.tiles_n = self.warp_rows // self.tc.m, self.warp_cols // self.tc.n
        self.warp, self.lane = em.div(tid, em.const(32)), em.mod(tid, em.const(32))
        self.warp_m, self.warp_n = em.div(self.warp, em.const(cfg.wn)), em.mod(self.warp, em.const(cfg.wn))
        if self.quads:
            # mma.sync's C: lane (c_row, c_pair) = (l // 4, l % 4); simdgroup_store's read back likewise
            self.c_row, self.c_pair = em.div(self.lane, em.const(4)), em.mod(self.lane, em.const(4))
        self.accs = [[em.uop(UOps.DEFINE_ACC, self.tc.acc.vec(self.tc.acc_elems), (), 0.0, False)
                      for _ in range(self.tiles_n)] for _ in range(self.tiles_m)]

    def fragments(self, kk: int, a: _Operand, b: _Operand, base_a: UOp, base_b: UOp) -> tuple[list, list]:
        raise NotImplementedError

    def b_fragment(self, frags_b: list, nt: int) -> tuple:
        """B's fragment of N tile `nt` and which half of it the instruction takes (None: all of it)."""
        return frags_b[nt], None

    def multiply(self, loop: UOp, a: _Operand, b: _Operand, base_a: UOp, base_b: UOp) -> None:
        em = self.em
        for kk in range(0, self.plan.config.bk, self.tc.k):
            frags_a, frags_b = self.fragments(kk, a, b, base_a, base_b)
            for mt in range(self.tiles_m):
                for nt in range(self.tiles_n):
                    acc = self.accs[mt][nt]
                    fb, part = self.b_fragment(frags_b, nt)
                    out = em.uop(UOps.WMMA, acc.dtype, (frags_a[mt], fb, acc), (self.tc.name, part), False)
                    self.accs[mt][nt] = em.uop(UOps.PHI, acc.dtype, (acc, out, loop), None, False)

    def finish(self) -> None:
        pass

    def _quad_bases(self, row0_a: UOp, row0_b: UOp) -> tuple[UOp, UOp]:
        """The thread's first row and column of C where lane (c_row, c_pair) holds row c_row, columns 2 c_pair and
        2 c_pair + 1."""
        em = self.em
        return (em.add(row0_a, em.add(em.mul(self.warp_m, em.const(self.warp_rows)), self.c_row)),
                em.add(row0_b, em.add(em.mul(self.warp_n, em.const(self.warp_cols)), em.mul(self.c_pair, em.const(2)))))


class MmaSyncTile(_WarpTile):
    """mma.sync (m16n8k16 half/bfloat16, m16n8k8 TF32) on fragments read by ldmatrix: lane l gives the address of
    row l % 8 of 8x8 matrix l // 8 (of the four A's fragment is made of: rows +0/+8, K +0/+8 in that order; of the
    four of two B fragments side by side: K +0/+8, then N +8)."""

    def __init__(self, em: Emitter, plan: TCPlan, stager: SliceStager, tid: UOp):
        super().__init__(em, plan, stager, tid)
        c, add, mul, div, mod = em.const, em.add, em.mul, em.div, em.mod
        mat_row, matrix = mod(self.lane, c(8)), div(self.lane, c(8))
        warp_m, warp_n, warp_rows, warp_cols = self.warp_m, self.warp_n, self.warp_rows, self.warp_cols
        self.a_row = add(mul(warp_m, c(warp_rows)), add(mat_row, mul(mod(matrix, c(2)), c(8))))  # row within the slice
        # (K's next 16-byte chunk of a row: 8 halves on, or 4 floats for TF32)
        self.a_k = mul(div(matrix, c(2)), c(plan.lanes))
        self.b_row = add(mul(warp_n, c(warp_cols)), add(mat_row, mul(div(matrix, c(2)), c(8))))
        self.b_k = mul(mod(matrix, c(2)), c(plan.lanes))
        # transposed staging: the matrices are 8 K-rows of 8 elements, so the lane's row runs along K instead
        if not plan.a_along_k:
            self.a_row = add(mul(warp_m, c(warp_rows)), mul(mod(matrix, c(2)), c(8)))
            self.a_k = add(mat_row, mul(div(matrix, c(2)), c(8)))
        if not plan.b_along_k:
            self.b_row = add(mul(warp_n, c(warp_cols)), mul(div(matrix, c(2)), c(8)))
            self.b_k = add(mat_row, mul(mod(matrix, c(2)), c(8)))
        # TF32 from a slice of B staged N-major: ldmatrix transposes only 16-bit elements, so lane (g, t) reads its
        # two floats of each N tile itself (_b_floats), column g of the warp's tile
        self.b_floats = self.tc.dtype == dtypes.float32 and not plan.b_along_k
        if self.b_floats:
            self.b_col = add(mul(warp_n, c(warp_cols)), self.c_row)

    def fragments(self, kk: int, a: _Operand, b: _Operand, base_a: UOp, base_b: UOp) -> tuple[list, list]:
        em, plan, tc, u16 = self.em, self.plan, self.tc, dtypes.uint16
        c, add, offset = em.const, em.add, self.stager.offset
        # NOTE: the swizzle makes each fragment's address a function of its row and K, not one base's offset
        frags_a = [em.uop(UOps.LOAD, u16.vec(8), (a.smem, add(base_a, offset(
            add(self.a_row, c(mt * tc.m)), add(self.a_k, c(kk)), a.rows, plan.a_along_k))),
            "ldmatrix" if plan.a_along_k else "ldmatrix.trans", False) for mt in range(self.tiles_m)]
        if self.b_floats:
            frags_b = [self._b_floats(b.smem, base_b, add(self.b_col, c(nt * tc.n)), add(self.c_pair, c(kk)))
                       for nt in range(self.tiles_n)]
        else:
            # B's fragments two N tiles at a time (tiles_n is even: TCPlan's configs divide by 16 along N)
            frags_b = [em.uop(UOps.LOAD, u16.vec(8), (b.smem, add(base_b, offset(
                add(self.b_row, c(nt * tc.n)), add(self.b_k, c(kk)), b.rows, plan.b_along_k))),
                "ldmatrix" if plan.b_along_k else "ldmatrix.trans", False) for nt in range(0, self.tiles_n, 2)]
        return frags_a, frags_b

    def b_fragment(self, frags_b: list, nt: int) -> tuple:
        # ldmatrix's B fragments hold two N tiles: which half this one is
        return (frags_b[nt], None) if self.b_floats else (frags_b[nt // 2], nt % 2)

    def _b_floats(self, smem: UOp, base: UOp, n: UOp, k: UOp) -> UOp:
        """mma.sync m16n8k8 TF32's B fragment of lane (g, t) from an N-major slice: the floats at (K k, column n) and
        (K k + 4, column n), with k = t and n = g of the tile, as the four 16-bit halves of its two registers."""
        em, u16 = self.em, dtypes.uint16
        within = em.mod(n, em.const(self.plan.lanes))
        start = em.sub(n, within)
        halves = []
        for dk in (0, 4):
            at = em.add(self.stager.offset(start, em.add(k, em.const(dk)), self.plan.config.bn, False), within)
            v = em.uop(UOps.LOAD, u16.vec(2), (smem, em.add(base, at)), "reinterpret", False)
            halves += [em.uop(UOps.GEP, u16, (v,), 0), em.uop(UOps.GEP, u16, (v,), 1)]
        return em.uop(UOps.VECTORIZE, u16.vec(4), tuple(halves), None)

    def outputs(self, row0_a: UOp, row0_b: UOp) -> tuple:
        # copy (2*tile + half) of M is row tile*16 + 8*half of the warp's part, copy (2*tile + j) of N column
        # tile*8 + j (the pairs of C's layout)
        off_m = [(i // 2) * self.tc.m + (i % 2) * 8 for i in range(2 * self.tiles_m)]
        off_n = [(i // 2) * self.tc.n + i % 2 for i in range(2 * self.tiles_n)]
        return (*self._quad_bases(row0_a, row0_b), off_m, off_n)

    def value(self, cm: int, cn: int) -> UOp:
        return self.em.uop(UOps.GEP, self.tc.acc, (self.accs[cm // 2][cn // 2],), (cm % 2) * 2 + cn % 2)


class RdnaWmmaTile(_WarpTile):
    """RDNA3's WMMA (wave32): lane l reads row (column) l % 16 of each 16-row tile of A (of B), all 16 K of it, by
    plain loads; lanes 16-31 the same as 0-15. Its 8 floats of C are rows 2v + l // 16 of column l % 16."""
    quads = False

    def __init__(self, em: Emitter, plan: TCPlan, stager: SliceStager, tid: UOp):
        super().__init__(em, plan, stager, tid)
        self.lane_row, self.lane_half = em.mod(self.lane, em.const(16)), em.div(self.lane, em.const(16))
        self.a_row = em.add(em.mul(self.warp_m, em.const(self.warp_rows)), self.lane_row)
        self.b_row = em.add(em.mul(self.warp_n, em.const(self.warp_cols)), self.lane_row)

    def fragments(self, kk: int, a: _Operand, b: _Operand, base_a: UOp, base_b: UOp) -> tuple[list, list]:
        em, tc, plan = self.em, self.tc, self.plan
        frags_a = [self._lane_fragment(a.smem, base_a, em.add(self.a_row, em.const(mt * tc.m)), kk, a.rows,
                                       plan.a_along_k) for mt in range(self.tiles_m)]
        frags_b = [self._lane_fragment(b.smem, base_b, em.add(self.b_row, em.const(nt * tc.n)), kk, b.rows,
                                       plan.b_along_k) for nt in range(self.tiles_n)]
        return frags_a, frags_b

    def _lane_fragment(self, smem: UOp, base: UOp, r: UOp, kk: int, rows: int, k_major: bool) -> UOp:
        """A lane's fragment: the 16 elements (K from `kk`) of row `r` of a staged slice of `rows` rows, as a
        16-element vector: two 16-byte loads where the slice is K-major (K is then two whole chunks), else 16 loads
        of one element (the slice's rows are K, so the lane's elements are a column of it)."""
        em, u16, offset = self.em, dtypes.uint16, self.stager.offset
        if k_major:
            halves = [em.uop(UOps.LOAD, u16.vec(8), (smem, em.add(base, offset(r, em.const(kk + h), rows, True))),
                             "aligned", False) for h in (0, 8)]
            lanes = tuple(em.uop(UOps.GEP, u16, (halves[j // 8],), j % 8) for j in range(16))
        else:
            # the slice's offsets place a chunk's first element: the lane's row is that chunk's start plus r % 8
            r_in = em.mod(r, em.const(8))
            r_chunk = em.sub(r, r_in)
            lanes = tuple(em.uop(UOps.LOAD, u16, (smem, em.add(base, em.add(offset(r_chunk, em.const(kk + j), rows,
                                                                                     False), r_in))), "bits", False)
                          for j in range(16))
        return em.uop(UOps.VECTORIZE, u16.vec(16), lanes, None)

    def outputs(self, row0_a: UOp, row0_b: UOp) -> tuple:
        # copy (8*tile + v) of M is row tile*16 + 2v of the lane's half (l // 16), copy j of N the lane's column of
        # tile j
        em, tc = self.em, self.tc
        off_m = [(i // 8) * tc.m + (i % 8) * 2 for i in range(8 * self.tiles_m)]
        off_n = [j * tc.n for j in range(self.tiles_n)]
        return (em.add(row0_a, em.add(em.mul(self.warp_m, em.const(self.warp_rows)), self.lane_half)),
                em.add(row0_b, em.add(em.mul(self.warp_n, em.const(self.warp_cols)), self.lane_row)), off_m, off_n)

    def value(self, cm: int, cn: int) -> UOp:
        return self.em.uop(UOps.GEP, self.tc.acc, (self.accs[cm // 8][cn],), cm % 8)


class SimdgroupTile(_WarpTile):
    """Apple's simdgroup_matrix: simdgroup_load of whole 8x8 tiles from the SIMD group's first row (column) of the
    slices (staged without the swizzle), accumulators read back through an 8x8 float tile of threadgroup memory a
    SIMD group (simdgroup_store)."""

    def __init__(self, em: Emitter, plan: TCPlan, stager: SliceStager, tid: UOp):
        self.readback = em.uop(UOps.DEFINE_LOCAL, PtrDType(dtypes.float32), (),
                               ("tc_c", plan.config.threads // 32 * 64), False)
        super().__init__(em, plan, stager, tid)
        self.a_row = em.mul(self.warp_m, em.const(self.warp_rows))
        self.b_row = em.mul(self.warp_n, em.const(self.warp_cols))

    def fragments(self, kk: int, a: _Operand, b: _Operand, base_a: UOp, base_b: UOp) -> tuple[list, list]:
        em, tc, plan = self.em, self.tc, self.plan
        frags_a = [self._tile_load(a.smem, base_a, em.add(self.a_row, em.const(mt * tc.m)), kk, a.rows, plan.a_along_k,
                                   False) for mt in range(self.tiles_m)]
        frags_b = [self._tile_load(b.smem, base_b, em.add(self.b_row, em.const(nt * tc.n)), kk, b.rows, plan.b_along_k,
                                   True) for nt in range(self.tiles_n)]
        return frags_a, frags_b

    def _tile_load(self, smem: UOp, base: UOp, r0: UOp, kk: int, rows: int, k_major: bool, is_b: bool) -> UOp:
        """A SIMD group's simdgroup_load of the 8x8 tile at row `r0`, K from `kk`, of a staged slice of `rows` rows:
        A's tile is rows x K, B's K x columns, so the tile is loaded transposed where its slice stores the other way
        round (A staged with M contiguous, B staged with K contiguous). The value is the lane's thread_elements (2
        of the 64)."""
        em = self.em
        stride = self.plan.config.bk if k_major else rows
        at = em.add(base, self.stager.offset(r0, em.const(kk), rows, k_major))
        return em.uop(UOps.LOAD, self.plan.elem.vec(2), (smem, at), ("simdgroup", stride, k_major == is_b), False)

    def outputs(self, row0_a: UOp, row0_b: UOp) -> tuple:
        # each 8x8 accumulator stored through the SIMD group's tile of threadgroup memory: lane (c_row, c_pair) reads
        # row c_row, columns 2*c_pair and 2*c_pair+1 (one barrier before, so the tile is whole; one after, so the next
        # store waits for every lane's read)
        em, tc = self.em, self.tc
        at_w = em.mul(self.warp, em.const(64))
        self.back = [[None] * self.tiles_n for _ in range(self.tiles_m)]
        for mt in range(self.tiles_m):
            for nt in range(self.tiles_n):
                em.uop(UOps.STORE, None, (self.readback, at_w, self.accs[mt][nt]), ("simdgroup", tc.n), False)
                em.uop(UOps.BARRIER, None, (), None, False)
                self.back[mt][nt] = em.uop(UOps.LOAD, dtypes.float32.vec(2), (self.readback, em.add(at_w, em.add(
                    em.mul(self.c_row, em.const(8)), em.mul(self.c_pair, em.const(2))))), "aligned", False)
                em.uop(UOps.BARRIER, None, (), None, False)
        off_m = [i * tc.m for i in range(self.tiles_m)]
        off_n = [(j // 2) * tc.n + j % 2 for j in range(2 * self.tiles_n)]
        return (*self._quad_bases(row0_a, row0_b), off_m, off_n)

    def value(self, cm: int, cn: int) -> UOp:
        return self.em.uop(UOps.GEP, self.tc.acc, (self.back[cm][cn // 2],), cn % 2)


# the tile class of each kind of plan
TILES = {TileKind.WGMMA: WgmmaTile, TileKind.MMA_SYNC: MmaSyncTile, TileKind.TF32: MmaSyncTile,
         TileKind.RDNA3_WMMA: RdnaWmmaTile, TileKind.SIMDGROUP: SimdgroupTile, TileKind.SIMT: SimtTile}

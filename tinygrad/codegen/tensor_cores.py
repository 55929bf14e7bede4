"""Which kernels can run on tensor cores, and the block tiling the linearizer gives them (the TC Opt).

A tensor core multiplies small matrices held in the registers of a whole warp: `mma.sync.m16n8k16` (NVIDIA sm_80 and
later) adds a 16x16 (A, row-major) times 16x8 (B, column-major) product of half or bfloat16 inputs to a 16x8 float
accumulator, each of the warp's 32 threads holding a fixed part of each matrix (`TensorCore`'s docstring says which).

A kernel qualifies when it is a sum of products of two half (or two bfloat16) loads, accumulated in float, over one
reduced dim (K), with an output dim along which only the first operand varies (M) and one along which only the
second varies (N): a matmul, batched or not, whatever its operands' layouts. The other output dims (a batch) each
take the grid's z. The TC Opt's axis may merge dims (TCPlan.n_dims, m_dims, k_dims): N then spans every output dim
along which only B varies (a convolution's batch x OH x OW, where a 7- or 14-wide row alone is narrower than a
tile), M likewise, and K every reduced dim (a 7x7 stem's 3 channels x 49 taps); a staged slice's rows and the
stores index each merged dim through the flat index's quotients and remainders.
A block of threads computes a BM x BN tile of outputs: the K loop stages BK-wide slices of both
operands in shared memory (`stages` slices in flight, copied straight from global memory by cp.async where both
operands allow it, else two: the next slice read into registers while the tensor cores work on this one), swizzled
so that reads and writes of a warp hit distinct banks, each warp computing a (BM/WM) x (BN/WN) part of the tile from
fragments read out of shared memory with `ldmatrix` (transposing where a slice is staged with M or N contiguous),
and the accumulators run through the kernel's elementwise tail (casts, bias, activations) to the stores.

On Hopper (sm_90a) the wgmma configs stage 64-wide slices of K the way the tensor cores read them themselves (A's
rows of K, B's rows of K or 64-column atoms of it, all in the 128-byte swizzle), and a warpgroup of 4 warps issues
a slice's four k16 steps for 64 rows by BN columns from shared memory, without ldmatrix or operand registers.

The other matrix instructions take the same block tile and staged slices, their fragments read differently
(TensorCore.frag): RDNA3's WMMA (AMD gfx11, wave32) from plain loads of each lane's own row of A and column of B, and
Apple's simdgroup_matrix from `simdgroup_load` of 8x8 tiles of slices staged without the swizzle (the load takes a
row stride, not a permutation), its accumulators read back through `simdgroup_store` to threadgroup memory.

>>> c = TC_CONFIGS[0]
>>> (c.bm, c.bn, c.bk, c.threads, c.stages)
(128, 128, 32, 128, 2)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

from tinygrad.dtype import dtypes
from tinygrad.ops import BinaryOps, BufferOps, ReduceOps, UnaryOps
from tinygrad.shape.symbolic import NumNode


@dataclass(frozen=True)
class TensorCore:
    """One matrix instruction: D (m x n, `acc`) = A (m x k, `dtype`) @ B (k x n) + C, across the 32 threads of a warp.

    For m16n8k16, thread `lane` = 4*g + t holds A's rows g and g+8 at columns 2t, 2t+1, 2t+8, 2t+9 (four pairs of
    consecutive K, one 32-bit register each: (g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8)), B's column g at rows 2t,
    2t+1 and 2t+8, 2t+9 (two pairs), and C's rows g and g+8 at columns 2t and 2t+1 (four floats: (g, 2t), (g, 2t+1),
    (g+8, 2t), (g+8, 2t+1)).

    `frag` says how a warp's fragments come from the staged slices:
      * "ldmatrix" (mma.sync): as above, by ldmatrix;
      * "wgmma" (Hopper): none, the instruction reads the slices itself (see WgmmaConfig);
      * "lane" (RDNA3 WMMA, wave32): lane l holds row l % 16 of A and column l % 16 of B, all 16 K of each as one
        16-element vector (lanes 16-31 hold the same as lanes 0-15), read by plain loads, and 8 floats of C: rows
        2v + l // 16 (v = 0..7) of column l % 16;
      * "simdgroup" (Metal's simdgroup_matrix): `simdgroup_load` of 8x8 tiles of A and B, whose spread over the
        lanes is the compiler's; a lane carries its `thread_elements()` (2 of each matrix) between calls, and C is
        read back through `simdgroup_store` (lane l then takes row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1)."""
    name: str
    m: int
    n: int
    k: int
    dtype: object
    acc: object
    frag: str = "ldmatrix"

    @property
    def acc_elems(self) -> int:
        """Accumulator floats a lane holds for one m x n tile."""
        return self.m * self.n // 32


TENSOR_CORES = {
    "m16n8k16": (TensorCore("m16n8k16_f16", 16, 8, 16, dtypes.float16, dtypes.float32),
                 TensorCore("m16n8k16_bf16", 16, 8, 16, dtypes.bfloat16, dtypes.float32)),
    # float32 operands as TF32 (sm_80 and later, offered where ALLOW_TF32=1): m16n8k8 takes the same bytes of a row
    # of K a register as m16n8k16 (a float where two halves were), so its fragments are the same ldmatrix loads of
    # K-major slices; the tensor cores ignore each float's low 13 bits of mantissa
    "tf32": (TensorCore("m16n8k8_tf32", 16, 8, 8, dtypes.float32, dtypes.float32),),
    # AMD RDNA3 (gfx11): v_wmma_f32_16x16x16_{f16,bf16} on a wave32 wavefront
    "wmma_gfx11": (TensorCore("wmma_f16_gfx11", 16, 16, 16, dtypes.float16, dtypes.float32, "lane"),
                   TensorCore("wmma_bf16_gfx11", 16, 16, 16, dtypes.bfloat16, dtypes.float32, "lane")),
    # Apple GPUs (Apple7 family and later): simdgroup_multiply_accumulate on simdgroup_half8x8 operands into a
    # simdgroup_float8x8 (the renderer keeps bfloat16 as bits, so half only)
    "simdgroup": (TensorCore("simdgroup_f16", 8, 8, 8, dtypes.float16, dtypes.float32, "simdgroup"),),
    # Hopper (sm_90a): wgmma.mma_async, a warpgroup (4 warps) multiplying a 64 x 16 slice of A by a 16 x BN slice of
    # B, both read by the tensor cores straight from shared memory; the accumulator is laid out as BN/8 m16n8 tiles
    # per warp (warp w of the group holding rows 16w..16w+15). See WgmmaConfig.
    "wgmma": (TensorCore("wgmma_f16", 64, 8, 16, dtypes.float16, dtypes.float32, "wgmma"),
              TensorCore("wgmma_bf16", 64, 8, 16, dtypes.bfloat16, dtypes.float32, "wgmma")),
}


# wgmma slices left in flight when the next is issued (1: the tensor cores never wait for the issue of the next;
# 0: each slice is waited for before the next), for slices copied by cp.async and by TMA. NOTE: ptxas serialises
# every wgmma of a kernel (warning C7514) where one is in flight across a loop (the mbarrier waits' spin loops);
# waiting for each slice measured faster there (H200, 4096^3 fp16: 521 TFLOP/s, against 468 with one in flight)
WGMMA_IN_FLIGHT = 1
WGMMA_IN_FLIGHT_TMA = 0


@dataclass(frozen=True)
class TCConfig:
    """A block tile of warp-level matrix fragments (mma.sync on ldmatrix fragments, TF32, RDNA3 WMMA, Metal
    simdgroup: which instruction is the device's, TCPlan.kind): BM x BN outputs, K staged BK at a time, WM x WN
    warps (each a (BM/WM) x (BN/WN) tile)."""
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int = 2  # slices in flight where both operands are copied asynchronously (else 2: see TCPlan)
    # what only a WgmmaConfig has: no warpgroups, no TMA, no producer warp
    wgmma: ClassVar[bool] = False
    tma: ClassVar[int] = 0
    producer: ClassVar[bool] = False

    @property
    def threads(self) -> int:
        """The threads that multiply and stage."""
        return 32 * self.wm * self.wn

    @property
    def block_threads(self) -> int:
        return self.threads


@dataclass(frozen=True)
class WgmmaConfig:
    """A block tile of Hopper's wgmma: WM x WN warpgroups (4 warps each) along M and N, each a (BM/WM) x (BN/WN)
    tile; BK = 64, so that a staged row of K (or a 64-wide atom of a slice staged N-major) is the 128 bytes of the
    hardware's 128-byte swizzle."""
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int = 2
    # slices copied by the TMA unit instead of cp.async (0: cp.async): a thread of the block issues each slice's
    # copies (whole boxes of A and B, described by tensor maps the runtime encodes), and mbarriers say when a stage
    # has landed and when every warp is done with it. `tma` blocks form a cluster along M whose members share B's
    # slice: each copies 1/tma of it into all of them (multicast), so L2 serves B once per cluster
    tma: int = 0
    # (TMA) one more warp, whose first thread only copies slices: the warps that multiply never wait for a stage to
    # be freed, nor for each other's steps
    producer: bool = False
    wgmma: ClassVar[bool] = True

    @property
    def threads(self) -> int:
        """The threads that multiply (and stage, without TMA)."""
        return 128 * self.wm * self.wn

    @property
    def block_threads(self) -> int:
        return self.threads + (32 if self.producer else 0)


# the TC Opt's amount picks one of these (the heuristic takes the first that fits; BEAM tries them all)
TC_CONFIGS = (
    TCConfig(128, 128, 32, 2, 2),
    TCConfig(128, 128, 32, 2, 4, 3),
    TCConfig(128, 128, 32, 4, 2, 3),
    TCConfig(64, 128, 32, 2, 2, 4),
    TCConfig(128, 64, 32, 2, 2, 4),
    TCConfig(64, 64, 32, 2, 2, 4),
    TCConfig(32, 64, 32, 1, 2, 4),
    TCConfig(64, 32, 32, 2, 1, 4),
    TCConfig(32, 32, 32, 1, 1, 4),
    TCConfig(128, 128, 16, 2, 2, 4),
    TCConfig(128, 256, 16, 2, 4, 3),
    TCConfig(256, 128, 16, 4, 2, 3),
    TCConfig(128, 128, 32, 2, 2, 3),
    TCConfig(128, 256, 32, 2, 4),
    # past 48 KB: dynamic shared memory (LinearizerOptions.shared_max)
    TCConfig(128, 128, 32, 2, 2, 4),
    TCConfig(128, 256, 32, 2, 4, 3),
    TCConfig(256, 128, 32, 4, 2, 3),
    TCConfig(128, 256, 32, 2, 4, 4),
    TCConfig(256, 128, 32, 4, 2, 4),
    TCConfig(128, 128, 64, 2, 2, 3),
    TCConfig(128, 256, 64, 2, 4, 3),
    # Hopper: wgmma on slices staged by cp.async (dynamic shared memory; two 128x128 blocks fit a multiprocessor)
    WgmmaConfig(128, 128, 64, 2, 1, 3),
    WgmmaConfig(128, 256, 64, 2, 1, 3),
    WgmmaConfig(128, 256, 64, 2, 1, 4),
    WgmmaConfig(64, 256, 64, 1, 1, 4),
    WgmmaConfig(256, 128, 64, 4, 1, 4),
    # Hopper: wgmma on slices copied by TMA, alone or in clusters of 2 blocks sharing B's slices (multicast)
    WgmmaConfig(128, 256, 64, 2, 1, 4, tma=1),
    WgmmaConfig(128, 256, 64, 2, 1, 4, tma=2),
    WgmmaConfig(256, 128, 64, 4, 1, 4, tma=2),
    WgmmaConfig(128, 128, 64, 2, 1, 6, tma=1),
    WgmmaConfig(256, 128, 64, 4, 1, 4, tma=1),
    WgmmaConfig(128, 256, 64, 2, 1, 4, tma=1, producer=True),
    WgmmaConfig(256, 128, 64, 4, 1, 4, tma=1, producer=True),
    WgmmaConfig(128, 256, 64, 2, 1, 4, tma=2, producer=True),
)
@dataclass(frozen=True)
class SimtConfig:
    """A float32 block tile without tensor cores (the SMEM Opt): BM x BN outputs, K staged BK at a time, each thread
    a TM x TN tile of them (groups of 4 consecutive rows and columns, 4*BM/TM apart), computed with FMAs from shared
    memory."""
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    stages: int = 2
    # what only a WgmmaConfig has: no warpgroups, no TMA, no producer warp
    wgmma: ClassVar[bool] = False
    tma: ClassVar[int] = 0
    producer: ClassVar[bool] = False

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def block_threads(self) -> int:
        return self.threads


# the SMEM Opt's amount picks one of these
SIMT_CONFIGS = (
    SimtConfig(64, 64, 16, 4, 4),
    SimtConfig(128, 128, 16, 8, 8),
    SimtConfig(128, 64, 16, 8, 4),
    SimtConfig(64, 128, 16, 4, 8),
    SimtConfig(128, 128, 8, 8, 8),
    SimtConfig(32, 64, 16, 4, 4),
    SimtConfig(32, 32, 16, 4, 4),
    SimtConfig(64, 64, 16, 4, 4, 3),
    SimtConfig(128, 128, 16, 8, 8, 3),
)


# A staged slice is rows of 16-byte chunks; chunk c of row i is stored at chunk c ^ swizzle(i) of its row, so that the
# eight rows an ldmatrix reads at one chunk (or a 16-byte copy writes) fall in distinct banks (see swizzle)
# the grid's y and z hold at most this many blocks
GRID_YZ_MAX = 65535


def smem_bytes(cfg, a_k: bool = True, b_k: bool = True, stages: int | None = None, itemsize: int = 2) -> int:
    """Shared memory of a config: `stages` staged slices of A (BM rows) and of B (BN rows)."""
    return (stages or cfg.stages) * itemsize * (slice_elems(cfg.bm, cfg.bk, a_k) + slice_elems(cfg.bn, cfg.bk, b_k))


def readback_bytes(cfg, tc) -> int:
    """Threadgroup memory a simdgroup_matrix kernel reads its accumulators back through: one 8x8 float tile a SIMD
    group (0 for every other kind)."""
    return cfg.threads // 32 * 64 * 4 if tc is not None and tc.frag == "simdgroup" else 0


def copies_async(st, rows_axis: int, k_axis: int, k_major: bool, full, lanes: int = 8) -> bool:
    """Can an operand's 16-byte chunks be copied straight to shared memory (cp.async, which needs 16-byte aligned
    addresses)? Where its tracker is one view without a mask, contiguous along the chunk, with an offset and every
    other stride a multiple of a chunk's `lanes` elements (device buffers start 256-byte aligned), and the chunk's
    dim a multiple of `lanes` long (a chunk is then wholly inside or wholly past the end)."""
    if len(st.views) != 1 or st.views[0].mask is not None:
        return False
    v = st.views[0]
    chunk = k_axis if k_major else rows_axis
    if full[chunk] % lanes:
        return False
    if not isinstance(v.offset, int) or v.offset % lanes:
        return False
    for d, stride in enumerate(v.strides):
        if not isinstance(stride, int) or (d == chunk and stride != 1) or (d != chunk and stride % lanes):
            return False
    return True


class TileKind(Enum):
    """The kinds of block tile, each multiplied by its own tile class in codegen/lower_tc.py."""
    MMA_SYNC = "mma.sync"  # NVIDIA sm_80+: half/bfloat16 fragments read by ldmatrix
    TF32 = "tf32"  # the same instruction family on float32 operands (m16n8k8)
    WGMMA = "wgmma"  # Hopper: a warpgroup's instructions read the staged slices themselves
    RDNA3_WMMA = "wmma"  # AMD gfx11: each lane's fragment read by plain loads
    SIMDGROUP = "simdgroup"  # Apple: simdgroup_load tiles, accumulators read back through threadgroup memory
    SIMT = "simt"  # SMEM: float32 FMAs, no tensor cores


@dataclass(frozen=True)
class TCPlan:
    """How a kernel maps onto tensor cores: its M, N and K dims, the loads of A (varies along M and K) and B (along N
    and K), the other output dims (the grid's z), the other reduced dims (loops around K's pipeline), the instruction
    and the block tile."""
    m_axis: int
    n_axis: int
    k_axis: int
    a: object
    b: object
    batch: tuple[int, ...]
    tc: TensorCore
    config: TCConfig | WgmmaConfig | SimtConfig
    # per operand: staged with K contiguous (rows of BK), else with its M or N contiguous (BK rows)
    a_along_k: bool
    b_along_k: bool
    # slices in flight: the config's where both operands are copied asynchronously (cp.async), else 2 (the next
    # slice read into registers while the tensor cores work on this one)
    stages: int
    asynchronous: bool
    # SMEM (float32, FMAs; `config` a SimtConfig, `tc` None): slices staged rows-major without a swizzle
    simt: bool = False
    # the other reduced dims, outermost first: loops around K's slices (a convolution's filter taps)
    outer: tuple[int, ...] = ()
    # the output dims merged into N (into M), outermost first, the last n_axis (m_axis): the TC Opt's axis bits 1
    # (2); () where N (M) is that one dim. A convolution's N is batch x OH x OW, and a 7x7 or 14x14 output is too
    # narrow for a tile on its own; its input gradient's M is too (and its N input channels x filter taps)
    n_dims: tuple[int, ...] = ()
    m_dims: tuple[int, ...] = ()
    # the reduced dims merged into K (bit 4), outermost first, the last k_axis: a 7x7 stem's 3 channels x 7 x 7 taps
    # (147, where one tap's 3 channels would fill a tenth of a slice), a weight gradient's batch x OH x OW
    k_dims: tuple[int, ...] = ()

    def merged(self, axis: int) -> tuple[int, ...]:
        """The dims merged into M's, N's or K's dim (`axis`), () where none are."""
        return {self.n_axis: self.n_dims, self.m_axis: self.m_dims, self.k_axis: self.k_dims}[axis]

    def size(self, full, axis: int) -> int:
        """The length of M or N (`axis`): that dim's, or the product of the merged dims'."""
        dims = self.merged(axis)
        return math.prod(full[d] for d in dims) if dims else full[axis]

    def split(self, full, axis: int, r) -> dict:
        """M's or N's flat index `r` (a Node) as each merged dim's index, row-major over the merged dims ({axis: r}
        where there are none). The outermost takes the quotient whole: `r` past the end shows as it past its size."""
        dims = self.merged(axis)
        if not dims:
            return {axis: r}
        out, div = {}, 1
        for i, d in enumerate(reversed(dims)):
            q = r // div if div > 1 else r
            out[d] = q if i == len(dims) - 1 else q % full[d]
            div *= full[d]
        return out

    @property
    def kind(self) -> TileKind:
        if self.simt:
            return TileKind.SIMT
        if self.config.wgmma:
            return TileKind.WGMMA
        if self.tc.frag == "lane":
            return TileKind.RDNA3_WMMA
        if self.tc.frag == "simdgroup":
            return TileKind.SIMDGROUP
        return TileKind.TF32 if self.tc.dtype == dtypes.float32 else TileKind.MMA_SYNC

    @property
    def elem(self):
        """The dtype a staged slice holds: tensor-core operands move as their 16-bit patterns (uint16), except on
        Metal, whose buffers hold half itself (a uint16 read of one would convert the value), and float32 (SMEM,
        TF32) as itself."""
        if self.simt or self.tc.dtype == dtypes.float32:
            return dtypes.float32
        return dtypes.float16 if self.tc.frag == "simdgroup" else dtypes.uint16

    @property
    def lanes(self) -> int:
        """Elements of one 16-byte chunk."""
        return 16 // self.elem.itemsize

    @property
    def swizzled(self) -> bool:
        """Are the staged slices swizzled by 16-byte chunks (see swizzle)? Not for SMEM, nor where simdgroup_load
        reads them (it takes tiles of rows at a fixed stride)."""
        return not self.simt and self.tc.frag != "simdgroup"


def along_k(st, rows_axis: int, k_axis: int) -> bool:
    """Is an operand read through `st` staged with K contiguous? Yes unless it is contiguous along its rows (M or N)
    and not along K: its 16-byte chunks are then read along the rows, and the slice is stored transposed."""
    s = st.real_strides()
    unit_rows = _unit(st, s, rows_axis)
    unit_k = _unit(st, s, k_axis)
    return not (unit_rows and not unit_k)


def _unit(st, strides, d: int) -> bool:
    """Does `st` read consecutive elements along dim `d`? By its stride, else (a view its strides can't express: a
    convolution's padded window, W and the filter's column summed into one index) where it reads inside the view,
    probed at two points: there, a copy along `d` reads neighbours, which the threads of a warp then share."""
    if strides[d] is not None:
        return isinstance(strides[d], int) and strides[d] == 1
    shape = [s if isinstance(s, int) else None for s in st.shape]
    if None in shape or shape[d] < 2:
        return False
    for frac in (3, 2):
        pt = [min(n // frac, n - 2) if i == d else n // frac for i, n in enumerate(shape)]
        at = []
        for off in (0, 1):
            idx, valid = st.expr_idxs([NumNode(v + (off if i == d else 0)) for i, v in enumerate(pt)])
            if not (isinstance(idx, NumNode) and isinstance(valid, NumNode) and valid.b == 1):
                return False
            at.append(idx.b)
        if at[1] - at[0] != 1:
            return False
    return True


def slice_elems(rows: int, bk: int, k_major: bool) -> int:
    """Elements of one staged slice of `rows` rows by BK: stored K-major (rows of BK) or rows-major (BK rows)."""
    return rows * bk


def swizzle(row_elems: int, lanes: int = 8) -> tuple[int, int]:
    """For rows of `row_elems` elements (`lanes` of them a 16-byte chunk): (L, C) such that chunk c of row i is
    stored at chunk c ^ ((i // L) % C). Rows of fewer than 8 chunks share a 128-byte line of banks, L of them a
    line; XOR by the line's index spreads eight consecutive rows' same chunk over the 8 chunk positions of the banks.

    >>> swizzle(32), swizzle(128)
    ((2, 4), (1, 8))
    """
    chunks = row_elems // lanes
    return max(1, 8 // chunks), min(chunks, 8)


def _operand(op, simt: bool, tf32: bool = False):
    """The half/bfloat16 LOAD under `op` when `op` is that load or a cast of it (the float32 LOAD that `op` is, for
    SMEM, or where TF32 tensor cores are offered), else None."""
    if op.op is BufferOps.LOAD and op.arg.dtype == dtypes.float32:
        return op if simt or tf32 else None
    if simt:
        return None
    # casts between the load's own dtype and float32 keep its value exactly (a gradient cast to float and back)
    targets = []
    while op.op is UnaryOps.CAST and not op.arg[1]:
        targets.append(op.arg[0])
        op = op.src[0]
    if op.op is BufferOps.LOAD and op.arg.dtype in (dtypes.float16, dtypes.bfloat16) and \
            all(t in (dtypes.float32, op.arg.dtype) for t in targets):
        return op
    return None


def tc_plan(lin, amt: int, merge: int = 0) -> tuple[TCPlan | None, str]:
    """The tensor-core plan for Linearizer `lin` with config TC_CONFIGS[amt], or (None, why it does not fit). With
    `merge` (the TC Opt's axis, bits) N spans every output dim along which only B varies (1: TCPlan.n_dims), M every
    one along which only A varies (2: TCPlan.m_dims), K every reduced dim (4: TCPlan.k_dims)."""
    kinds = lin.opts.tensor_cores if lin.opts is not None else ()
    if not kinds:
        return None, "the device has no tensor cores"
    if not 0 <= amt < len(TC_CONFIGS):
        return None, f"no tensor-core config {amt} (0 to {len(TC_CONFIGS) - 1})"
    if not 0 <= merge < 8:
        return None, f"axis {merge}: bits 1 (N the merged output dims only B varies along), 2 (M, A's) and 4 (K " \
            "every reduced dim), or 0"
    return _plan(lin, TC_CONFIGS[amt], kinds, False, merge)


def simt_plan(lin, amt: int, merge: int = 0) -> tuple[TCPlan | None, str]:
    """The SMEM plan (a float32 matmul's block tile staged in shared memory) for `lin` with SIMT_CONFIGS[amt]."""
    if lin.opts is None or not lin.opts.has_shared:
        return None, "the device has no shared memory"
    if not 0 <= amt < len(SIMT_CONFIGS):
        return None, f"no SMEM config {amt} (0 to {len(SIMT_CONFIGS) - 1})"
    if merge:
        return None, "SMEM tiles take N as one output dim (axis 0)"
    return _plan(lin, SIMT_CONFIGS[amt], lin.opts.tensor_cores, True)


def _plan(lin, cfg, kinds, simt: bool, merge: int = 0) -> tuple[TCPlan | None, str]:
    if not lin.gpu:
        return None, "the kernel is not mapped to the GPU grid (the renderer spreads it)"
    red = lin.reduceop
    if red is None or red.op is not ReduceOps.SUM or lin.op_dtypes[id(red)] != dtypes.float32:
        return None, "not a sum accumulated in float"
    src = red.src[0]
    # the product in half, then cast to float, or the product of the casts: tensor cores multiply exactly either way
    if not simt and src.op is UnaryOps.CAST and not src.arg[1] and src.arg[0] == dtypes.float32:
        src = src.src[0]
    if src.op is not BinaryOps.MUL:
        return None, "the reduce is not over a product"
    tf32 = not simt and "tf32" in kinds
    x, y = _operand(src.src[0], simt, tf32), _operand(src.src[1], simt, tf32)
    if x is None or y is None or x.arg.dtype != y.arg.dtype:
        return None, "the product is not of two float32 loads" if simt else \
            "the product is not of two half or two bfloat16 loads" + (" (or float32: TF32)" if tf32 else "")
    full = lin.full_shape
    rdims = [d for d in lin.reduce_axes if not (isinstance(full[d], int) and full[d] == 1)]
    if not rdims or any(not isinstance(full[d], int) for d in rdims):
        return None, "no reduced dim, or one of a symbolic size"
    xd, yd = lin.op_dims[id(x)], lin.op_dims[id(y)]
    shared = [d for d in rdims if d in xd and d in yd]
    if not shared:
        return None, "the operands share no reduced dim"
    # K: the longest reduced dim both operands vary along, staged slice by slice; any other reduced dims (a
    # convolution's filter taps) are loops around that pipeline, each of their steps staging K's slices again
    k = max(shared, key=lambda d: (full[d], d))
    k_dims = ()
    if merge & 4:
        if len(rdims) < 2 or len(shared) != len(rdims):
            return None, "K has no other reduced dim (along which both operands vary) to merge with"
        k_dims, k = tuple(rdims), max(rdims)
    outer = tuple(d for d in rdims if d != k and d not in k_dims)
    outs = [d for d in range(len(full)) if d not in lin.reduce_axes]
    only_x = [d for d in outs if d in xd and d not in yd and full[d] != 1]
    only_y = [d for d in outs if d in yd and d not in xd and full[d] != 1]
    if not only_x or not only_y:
        return None, "no output dim along which only one operand varies (not a matmul)"
    # N: the innermost such dim (the output is usually contiguous along it: accumulator pairs are stored together)
    if max(only_y) > max(only_x):
        a, b, m, n, only_a, only_b = x, y, max(only_x), max(only_y), only_x, only_y
    else:
        a, b, m, n, only_a, only_b = y, x, max(only_y), max(only_x), only_y, only_x
    n_dims = tuple(sorted(only_b)) if merge & 1 else ()
    m_dims = tuple(sorted(only_a)) if merge & 2 else ()
    if (merge & 1 and len(n_dims) < 2) or (merge & 2 and len(m_dims) < 2):
        return None, "M or N has no other output dim (along which only its operand varies) to merge with"
    for dim_name, s in (("M", full[m]), ("N", full[n]), ("K", full[k])) + tuple(("M/N", full[d]) for d in
                                                                              n_dims + m_dims):
        if not isinstance(s, int):
            return None, f"{dim_name}={s} is symbolic"
    # NOTE: sizes no tile divides are fine: the last tiles read zeros past the end and store nothing there
    batch = tuple(d for d in outs if d not in (m, n) + n_dims + m_dims and full[d] != 1)
    if any(not isinstance(full[d], int) for d in batch):
        return None, "a symbolic batch dim"
    if math.prod(full[d] for d in batch) > GRID_YZ_MAX or \
            -(-math.prod(full[d] for d in m_dims or (m,)) // cfg.bm) > GRID_YZ_MAX:
        return None, "more blocks than the grid's y or z holds"
    wide = a.arg.dtype.itemsize == 4  # float32 elements: SMEM, or TF32 tensor cores
    lanes = 4 if wide else 8
    # tensor-core slices are staged the way the operand's chunks are read; SMEM slices always rows-major (a thread
    # reads 4 consecutive rows or columns at one k); TF32's A always K-major (ldmatrix can't transpose 32-bit
    # elements: an A read along its rows is written to its slice an element at a time), its B either way (read
    # from an N-major slice a float at a time)
    if simt:
        a_k, b_k = False, False
    elif wide:
        a_k, b_k = True, along_k(b.arg.st, n, k)
    else:
        a_k, b_k = along_k(a.arg.st, m, k), along_k(b.arg.st, n, k)
    if n_dims and b_k and not _unit(b.arg.st, b.arg.st.real_strides(), k):
        # merged N read along neither (a strided convolution's window): a thread an element along the rows, so a
        # warp reads neighbours `stride` apart rather than 32 elements a channel (H x W) apart
        b_k = False
    if m_dims and a_k and not wide and not _unit(a.arg.st, a.arg.st.real_strides(), k):
        a_k = False
    # (a B of merged dims staged along its rows reads element by element: its 16-byte chunks would cross them)
    asynchronous = "cp.async" in kinds and not (n_dims and not b_k) and not (m_dims and not a_k) and not k_dims and \
        all(along_k(op.arg.st, ax, k) == lay and copies_async(op.arg.st, ax, k, lay, full, lanes)
            for op, ax, lay in ((a, m, a_k), (b, n, b_k)))
    stages = cfg.stages if asynchronous else 2
    wgmma_tile = cfg.wgmma
    if wgmma_tile:
        if "wgmma" not in kinds:
            return None, f"config {cfg}: the device has no wgmma (Hopper, sm_90a)"
        # the tensor cores read A's rows of K and B either way; slices copied by cp.async into the swizzled layouts
        # (three buffers at least: one being copied, one read, one still read by the last slice's instructions)
        if not asynchronous or not a_k or cfg.bk != 64 or cfg.bn % 64 or cfg.bn > 256 or stages < 3:
            return None, f"config {cfg}: wgmma takes A contiguous along K and both operands copied asynchronously " \
                "(BK 64, BN a multiple of 64 up to 256, 3 stages or more)"
        if smem_bytes(cfg, a_k, b_k, stages) <= 48 * 1024:
            return None, f"config {cfg}: wgmma slices are placed in dynamic shared memory (1024-byte aligned)"
        if cfg.tma and (n_dims or m_dims or k_dims):
            return None, f"config {cfg}: TMA copies boxes of one dim per side, not merged output dims"
        if cfg.tma:
            why = _tma_unfit(cfg, a, b, m, n, k, b_k, batch, outer, full, kinds)
            if why:
                return None, f"config {cfg}: {why}"
    tc = None
    if not simt:
        kinds = ("wgmma",) if wgmma_tile else tuple(kind for kind in kinds if kind != "wgmma")
        tc = next((t for kind in kinds for t in TENSOR_CORES.get(kind, ()) if t.dtype == a.arg.dtype), None)
    # (TMA: the stages' mbarriers take one more 1024-byte aligned piece of it)
    if smem_bytes(cfg, a_k, b_k, stages, 4 if wide else 2) + readback_bytes(cfg, tc) + \
            (1024 if cfg.tma else 0) > lin.opts.shared_max:
        return None, f"config {cfg} needs more shared memory than the device gives a block"
    if simt:
        if cfg.tm % 4 or cfg.tn % 4 or cfg.bm % cfg.tm or cfg.bn % cfg.tn or cfg.threads > 1024:
            return None, f"config {cfg}: thread tiles that do not divide the block tile"
    elif wgmma_tile:
        if cfg.bm != 64 * cfg.wm or cfg.wn != 1:
            return None, f"config {cfg}: a warpgroup computes 64 rows of the tile, all its columns"
    elif tc is not None and (cfg.bm % (cfg.wm * tc.m) or cfg.bk % tc.k or
                             cfg.bn % (cfg.wn * tc.n * (2 if tc.frag == "ldmatrix" else 1))):
        # ldmatrix reads B's fragments two N tiles at a time
        return None, f"config {cfg}: warps that do not divide the tile"
    for rows in (cfg.bm, cfg.bn):
        # each thread copies whole chunks of a slice, along K or along its rows
        if (rows * cfg.bk // lanes) % cfg.threads or cfg.threads % (cfg.bk // lanes) or cfg.threads % (rows // lanes):
            return None, f"config {cfg}: its threads do not split a staged slice evenly"
    if simt:
        return TCPlan(m, n, k, a, b, batch, None, cfg, a_k, b_k, stages, asynchronous, True, outer, n_dims,
                      m_dims, k_dims), ""
    if tc is None:
        return None, f"no tensor core of the device takes {a.arg.dtype}"
    return TCPlan(m, n, k, a, b, batch, tc, cfg, a_k, b_k, stages, asynchronous, outer=outer, n_dims=n_dims,
                  m_dims=m_dims, k_dims=k_dims), ""


def _tma_unfit(cfg, a, b, m: int, n: int, k: int, b_k: bool, batch, outer, full, kinds) -> str:
    """Why TMA can't copy this kernel's slices ("" where it can): each operand must be a plain 2D box of its buffer,
    (K, M) for A and (K, N) or (N, K) for B, innermost first, which the runtime encodes as a tensor map (16-byte
    aligned start and row strides: copies_async has checked both)."""
    if "tma" not in kinds:
        return "the device has no TMA (Hopper, sm_90)"
    if batch or outer:
        return "TMA copies a plain matmul's operands (no batch dims, no reduced dims besides K)"
    for op, rows, along in ((a, m, True), (b, n, b_k)):
        # the stride between the box's rows: along M (N) where K is contiguous, else along K
        row_stride = op.arg.st.views[0].strides[rows if along else k]
        if not isinstance(row_stride, int) or row_stride <= 0:
            return "an operand repeats its rows (a zero stride): not a tensor map's box"
    if cfg.tma > 1 and (-(-full[m] // cfg.bm)) % cfg.tma:
        return f"clusters of {cfg.tma} blocks along M need a multiple of {cfg.tma} row tiles"
    return ""


def tma_box(plan, op_is_a: bool, full) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    """The tensor map of one operand of a TMA plan: (dims, byte strides of dims 1.., box, byte offset of its start),
    innermost first. A: (K, M), a box of BK x BM; B staged K-major: (K, N), BK x BN/cluster (each block of a cluster
    copies its share of the rows); B staged N-major: (N, K), 64-column atoms of BK rows."""
    cfg, op = plan.config, plan.a if op_is_a else plan.b
    v, item = op.arg.st.views[0], op.arg.dtype.itemsize
    k, rows = plan.k_axis, plan.m_axis if op_is_a else plan.n_axis
    if op_is_a or plan.b_along_k:
        box = (cfg.bk, cfg.bm) if op_is_a else (cfg.bk, cfg.bn // cfg.tma)
        return (full[k], full[rows]), (v.strides[rows] * item,), box, v.offset * item
    return (full[rows], full[k]), (v.strides[k] * item,), (64, cfg.bk), v.offset * item

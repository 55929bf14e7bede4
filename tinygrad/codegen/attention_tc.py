"""Attention on tensor cores (mma.sync m16n8k16, half or bfloat16): both products of the online softmax per warp.

A block of 4 warps owns 64 query rows of one (batch, head), 16 rows a warp, or 128 (32 a warp: two 16-row tiles,
`warp_tiles`) where the head dims are at most 64. Each warp keeps its rows of q as mma.sync A fragments in registers
for the whole kernel. For each tile of TILE_K = 64 keys the block stages k and v (as half or bfloat16, a row of the
head dim per key, padded by 8 elements so ldmatrix's 8 rows hit distinct banks) in shared memory, by cp.async into
two stages where their 16-byte chunks are aligned (the next tile's copies in flight while this one multiplies);
then each warp

- computes its 16 x 64 scores S = q k^T: per 16 of the head dim one A fragment (q's) and, per pair of 8-key tiles,
  one ldmatrix of k's rows (B fragments, k-major as mma.sync's "col" operand wants);
- applies the score's tail and the softmax's input (scale, masks) to each float of S's accumulators (in float32),
  whose layout gives lane 4g + t rows g and g + 8 at keys 2t, 2t + 1 of each 8-key tile;
- runs the online softmax on them: a row's max over the lane's 16 values, then across the 4 lanes of its quad by
  two xor shuffles; the running sum stays a partial sum per lane until the end (summed across the quad once);
- reuses exp(s - m) as P's A fragments without shared memory: the accumulators of two consecutive 8-key tiles are,
  converted to 16 bits, exactly the A fragment of those 16 keys (rows g, g + 8; keys 2t, 2t + 1, 2t + 8, 2t + 9);
- multiplies P by v's tile (ldmatrix.trans of v's rows: B fragments of 16 keys by 8 value columns) into the
  rescaled output accumulators.

Causal attention stops at the block's diagonal tile (the mask itself comes from the softmax's input, per element).
Query rows past the end compute the last row again and are not stored; keys past the end are staged as the last key
and weigh nothing.
"""
from __future__ import annotations

import math

from tinygrad.codegen.ast_facts import LEAVES
from tinygrad.codegen.attention_gpu import GRID_Y_MAX, batch_indices, tiled_sides
from tinygrad.codegen.emitter import is_true, lane_base
from tinygrad.codegen.uops import UOps
from tinygrad.dtype import PtrDType, dtypes
from tinygrad.helpers import toposort
from tinygrad.ops import BinaryOps, BufferOps, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.symbolic import MulNode, NumNode, SumNode, Variable

TILE_K, WARPS = 64, 4  # keys a staged tile; warps a block (16 or 32 query rows each)
PAD = 8  # elements after each staged row: rows 16 bytes apart mod 128, so an ldmatrix's 8 rows take distinct banks
MIN_ROWS = 16  # fewer query rows than a warp's 16 leave the tensor cores mostly idle: the SIMT kernels take them
MAX_HEAD = 256
_NAMES = {dtypes.float16: "m16n8k16_f16", dtypes.bfloat16: "m16n8k16_bf16"}


def takes(kern, p) -> bool:
    """Whether the tensor-core kernel lowers this attention: a CUDA-style device with mma.sync m16n8k16, q's, k's
    and v's sides all half (or all bfloat16), head dims multiples of 16 up to MAX_HEAD, at least MIN_ROWS rows."""
    opts = kern.opts
    if not kern.gpu or "m16n8k16" not in getattr(opts, "tensor_cores", ()):
        return False
    if p.sq < MIN_ROWS or math.prod(p.bs) > GRID_Y_MAX or p.d % 16 or p.dv % 16 or max(p.d, p.dv) > MAX_HEAD:
        return False
    sides = tiled_sides(kern, p)
    if sides is None:
        return False
    dts = {kern._dtypes[id(s)] for s in sides + (p.v_root,)}
    return len(dts) == 1 and next(iter(dts)) in _NAMES


class _Warp:
    """The uops of one thread's place in the block: its warp, lane, quad row g and pair t."""

    def __init__(self, em):
        self.em = em
        self.tid = em.uop(UOps.SPECIAL, dtypes.int32, (), (0, "lidx0", 32 * WARPS), False)
        self.warp, self.lane = em.div(self.tid, em.const(32)), em.mod(self.tid, em.const(32))
        self.g, self.t = em.div(self.lane, em.const(4)), em.mod(self.lane, em.const(4))
        self.mat, self.mat_row = em.div(self.lane, em.const(8)), em.mod(self.lane, em.const(8))

    def quad(self, op, v):
        """`op` (MAX or ADD) of float `v` over the 4 lanes of this lane's quad (the lanes of one row of C)."""
        em = self.em
        for mask in (1, 2):
            other = em.uop(UOps.SHUFFLE, dtypes.float32, (v,), ("xor", mask), False)
            v = em.uop(UOps.ALU, dtypes.float32, (v, other), op)
        return v


def warp_tiles(p) -> int:
    """16-row tiles of queries a warp owns: 2 where the head dims are at most 64 (each fragment of k or v read from
    shared memory then feeds two products; the registers hold it), else 1."""
    return 2 if max(p.d, p.dv) <= 64 else 1


def lower(kern, p) -> None:
    """Fill `kern.uops` with the tensor-core attention kernel (see the module docstring)."""
    em, i32, f32 = kern.em, dtypes.int32, dtypes.float32
    q_side, k_side = tiled_sides(kern, p)
    tdt = kern._dtypes[id(q_side)]
    name = _NAMES[tdt]
    mt_n = warp_tiles(p)
    tile_q = 16 * mt_n * WARPS
    nbatch = math.prod(p.bs)
    qtiles = (p.sq + tile_q - 1) // tile_q
    w = _Warp(em)
    g0 = em.uop(UOps.SPECIAL, i32, (), (0, "gidx0", qtiles), False)
    g1 = em.uop(UOps.SPECIAL, i32, (), (1, "gidx1", nbatch), False)
    kern.global_size, kern.local_size = (qtiles, nbatch, 1), (32 * WARPS, 1, 1)
    bidx = batch_indices(em, p, g1, nbatch)
    # the thread's query rows: g and g + 8 of each of its warp's 16-row tiles (row r = 2 mt + half), clamped to the
    # last row, and whether they exist
    row0 = em.add(em.mul(g0, em.const(tile_q)), em.add(em.mul(w.warp, em.const(16 * mt_n)), w.g))
    rows, gates = [], []
    for r in range(2 * mt_n):
        qi, gate = _clamped(em, em.add(row0, em.const(8 * r)), p.sq, p.sq % tile_q != 0, f"qi{r}")
        rows.append(qi)
        gates.append(gate)
    # the lane's column pair within an 8-wide tile: 2t
    pair = Variable("pair", 0, 6)
    em.bind(pair, em.mul(w.t, em.const(2)))
    qfrags = [_q_fragments(kern, p, q_side, bidx, rows[2 * mt:2 * mt + 2], pair) for mt in range(mt_n)]
    ks, vs = p.d + PAD, p.dv + PAD
    k_copy = _Stager(kern, p, k_side, p.d, ks, lambda j, x: bidx + [NumNode(0), j, x])
    v_copy = _Stager(kern, p, p.v_root, p.dv, vs, lambda j, x: bidx + [NumNode(0), x, j])
    # both staged by cp.async where both allow it: two stages, the next tile's copies in flight during this one's
    stages = 2 if "cp.async" in kern.opts.tensor_cores and k_copy.asynchronous and v_copy.asynchronous else 1
    sm_k = em.uop(UOps.DEFINE_LOCAL, PtrDType(tdt), (), ("attn_k", stages * TILE_K * ks), False)
    sm_v = em.uop(UOps.DEFINE_LOCAL, PtrDType(tdt), (), ("attn_v", stages * TILE_K * vs), False)
    acc4 = f32.vec(4)
    ms = [em.uop(UOps.DEFINE_ACC, f32, (), -math.inf, False) for _ in rows]
    ls = [em.uop(UOps.DEFINE_ACC, f32, (), 0.0, False) for _ in rows]
    outs = [[em.uop(UOps.DEFINE_ACC, acc4, (), 0.0, False) for _ in range(p.dv // 8)] for _ in range(mt_n)]
    ntiles = (p.sk + TILE_K - 1) // TILE_K
    end = em.const(ntiles)
    if p.causal:
        # keys past the block's last query row are masked for all its rows (tile_q is a multiple of TILE_K)
        last = em.mul(em.add(g0, em.const(1)), em.const(tile_q // TILE_K))
        end = em.uop(UOps.ALU, i32, (em.lt(last, end), last, end), TernaryOps.WHERE)
    if stages == 2:
        k_copy.issue(em.const(0), em.const(0), w.tid, sm_k, True)
        v_copy.issue(em.const(0), em.const(0), w.tid, sm_v, True)
        em.uop(UOps.ASYNC_COMMIT, None, (), None, False)
    tloop = em.uop(UOps.LOOP, i32, (em.const(0), end), None, False)
    em.open_scope()
    tbase = em.mul(tloop, em.const(TILE_K))
    if stages == 2:
        # the next tile into the other stage (zeros past the last: nothing is read), then wait for this one's
        nxt = em.add(tloop, em.const(1))
        other = em.mod(nxt, em.const(2))
        more = em.lt(nxt, end)
        k_copy.issue(em.mul(nxt, em.const(TILE_K)), em.mul(other, em.const(TILE_K * ks)), w.tid, sm_k, True, more)
        v_copy.issue(em.mul(nxt, em.const(TILE_K)), em.mul(other, em.const(TILE_K * vs)), w.tid, sm_v, True, more)
        em.uop(UOps.ASYNC_COMMIT, None, (), None, False)
        em.uop(UOps.ASYNC_WAIT, None, (), 1, False)
        stage = em.mod(tloop, em.const(2))
        k_at, v_at = em.mul(stage, em.const(TILE_K * ks)), em.mul(stage, em.const(TILE_K * vs))
    else:
        k_copy.issue(tbase, em.const(0), w.tid, sm_k, False)
        v_copy.issue(tbase, em.const(0), w.tid, sm_v, False)
        k_at = v_at = em.const(0)
    em.uop(UOps.BARRIER, None, (), None, False)
    # S = q k^T: per query tile 8 accumulators of 16 x 8 (keys 8 nt ... 8 nt + 7)
    zero = em.uop(UOps.VECTORIZE, acc4, tuple(em.const(0.0, f32) for _ in range(4)), None)
    nts = TILE_K // 8
    s = [[zero] * nts for _ in range(mt_n)]
    key_row = em.add(w.mat_row, em.mul(em.div(w.mat, em.const(2)), em.const(8)))
    key_col = em.mul(em.mod(w.mat, em.const(2)), em.const(8))
    u16x8 = dtypes.uint16.vec(8)
    for kk in range(p.d // 16):
        for nt in range(0, nts, 2):
            at = em.add(em.mul(em.add(key_row, em.const(8 * nt)), em.const(ks)), em.add(key_col, em.const(16 * kk)))
            frag = em.uop(UOps.LOAD, u16x8, (sm_k, em.add(k_at, at)), "ldmatrix", False)
            for mt in range(mt_n):
                for half in (0, 1):
                    s[mt][nt + half] = em.uop(UOps.WMMA, acc4, (qfrags[mt][kk], frag, s[mt][nt + half]), (name, half),
                                              False)
    # each float of S through the score's tail and the softmax's input, at its row and key: x[r][nt][e], row r's
    # keys 8 nt + 2t + e
    x = [[[None, None] for _ in range(nts)] for _ in rows]
    for nt in range(nts):
        for e in range(2):
            j = em.add(tbase, em.add(em.mul(w.t, em.const(2)), em.const(8 * nt + e)))
            kj, inside = _clamped(em, j, p.sk, p.sk % TILE_K != 0, f"kj{nt}_{e}_{len(kern.uops)}")
            for r in range(len(rows)):
                acc = em.uop(UOps.GEP, f32, (s[r // 2][nt],), 2 * (r % 2) + e)
                score = _lower_wide(kern, p.s_root, bidx + [rows[r], kj, NumNode(0)], {id(p.rs): acc})
                v = _lower_wide(kern, p.x, bidx + [rows[r], kj], {"scores": score})
                if v.dtype != f32:
                    v = em.uop(UOps.CAST, f32, (v,), None)
                if inside is not None:
                    v = em.uop(UOps.ALU, f32, (inside, v, em.const(-math.inf, f32)), TernaryOps.WHERE)
                x[r][nt][e] = v
    # the online softmax of each row
    rescale, m_new, l_new = [], [], []
    pv = [[[None, None] for _ in range(nts)] for _ in rows]
    for r in range(len(rows)):
        top = None
        for nt in range(nts):
            for e in range(2):
                v = x[r][nt][e]
                top = v if top is None else em.uop(UOps.ALU, f32, (top, v), BinaryOps.MAX)
        top = w.quad(BinaryOps.MAX, top)
        mn = em.uop(UOps.ALU, f32, (ms[r], top), BinaryOps.MAX)
        safe = kern._finite(mn)
        rescale.append(kern._exp(ms[r], safe))
        m_new.append(mn)
        total = None
        for nt in range(nts):
            for e in range(2):
                pe = kern._exp(x[r][nt][e], safe)
                pv[r][nt][e] = pe
                total = pe if total is None else em.uop(UOps.ALU, f32, (total, pe), BinaryOps.ADD)
        l_new.append(em.uop(UOps.ALU, f32, (em.uop(UOps.ALU, f32, (ls[r], rescale[r]), BinaryOps.MUL), total),
                            BinaryOps.ADD))
    # P's A fragments: two consecutive 8-key tiles of accumulators, each float rounded to the tensor cores' type,
    # in the A order (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1), then the same 8 keys on
    pfrags = [[] for _ in range(mt_n)]
    for mt in range(mt_n):
        for kk in range(TILE_K // 16):
            lanes = []
            for nt in (2 * kk, 2 * kk + 1):
                for r in (2 * mt, 2 * mt + 1):
                    for e in range(2):
                        # (one conversion: the rounding to 16 bits is the pattern itself)
                        lanes.append(em.uop(UOps.CAST, dtypes.uint16, (pv[r][nt][e],), ("bits", tdt)))
            pfrags[mt].append(em.uop(UOps.VECTORIZE, u16x8, tuple(lanes), None))
    o_new = []
    for mt in range(mt_n):
        r0, r1 = rescale[2 * mt], rescale[2 * mt + 1]
        scale4 = em.uop(UOps.VECTORIZE, acc4, (r0, r0, r1, r1), None)
        o_new.append([em.uop(UOps.ALU, acc4, (o, scale4), BinaryOps.MUL) for o in outs[mt]])
    # v's B fragments by ldmatrix.trans: lane l gives row (key) 8 (l // 8 % 2) + l % 8, columns 8 (l // 16) on
    v_key = em.add(w.mat_row, em.mul(em.mod(w.mat, em.const(2)), em.const(8)))
    v_col = em.mul(em.div(w.mat, em.const(2)), em.const(8))
    for kk in range(TILE_K // 16):
        for nc in range(0, p.dv // 8, 2):
            at = em.add(em.mul(em.add(v_key, em.const(16 * kk)), em.const(vs)), em.add(v_col, em.const(8 * nc)))
            frag = em.uop(UOps.LOAD, u16x8, (sm_v, em.add(v_at, at)), "ldmatrix.trans", False)
            for mt in range(mt_n):
                for half in (0, 1):
                    o_new[mt][nc + half] = em.uop(UOps.WMMA, acc4, (pfrags[mt][kk], frag, o_new[mt][nc + half]),
                                                  (name, half), False)
    # NOTE: the PHIs assign in place: the running maxes are written last (the rescales read them)
    outs = [[em.uop(UOps.PHI, acc4, (o, u, tloop), None, False) for o, u in zip(os_, us)]
            for os_, us in zip(outs, o_new)]
    ls = [em.uop(UOps.PHI, f32, (a, u, tloop), None, False) for a, u in zip(ls, l_new)]
    ms = [em.uop(UOps.PHI, f32, (a, u, tloop), None, False) for a, u in zip(ms, m_new)]
    em.uop(UOps.BARRIER, None, (), None, False)  # (before the next copies overwrite this tile's stage)
    em.close_scope()
    em.uop(UOps.ENDLOOP, None, (tloop,), None, False)
    if stages == 2:
        em.uop(UOps.ASYNC_WAIT, None, (), 0, False)  # (the last, empty copies land before the block leaves)
    invs = [em.uop(UOps.ALU, f32, (w.quad(BinaryOps.ADD, lsum),), UnaryOps.RECIP) for lsum in ls]
    for mt in range(mt_n):
        for nc in range(p.dv // 8):
            for half in (0, 1):
                r = 2 * mt + half
                for e in range(2):
                    val = em.uop(UOps.ALU, f32, (em.uop(UOps.GEP, f32, (outs[mt][nc],), 2 * half + e), invs[r]),
                                 BinaryOps.MUL)
                    kern._store(p, bidx, rows[r], pair + (8 * nc + e), val, gates[r])


def _clamped(em, i, size: int, ragged: bool, name: str):
    """(a Variable bound to row `i`, the gate `i < size` or None): where the tiles can run past the last of `size`
    rows (`ragged`), the row is clamped to the last one, so every load stays in bounds and the gate masks it."""
    gate = None
    if ragged:
        gate = em.lt(i, em.const(size))
        i = em.uop(UOps.ALU, dtypes.int32, (gate, i, em.const(size - 1)), TernaryOps.WHERE)
    v = Variable(name, 0, size - 1)
    em.bind(v, i)
    return v, gate


def _q_fragments(kern, p, q_side, bidx, rows, pair):
    """The warp's A fragments of q, one per 16 of the head dim: lane (g, t) holds rows g, g + 8 at dims 2t, 2t + 1,
    2t + 8, 2t + 9 in the order (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1), then the same at + 8."""
    em = kern.em
    frags = []
    for kk in range(p.d // 16):
        lanes = []
        for hi in (0, 8):
            for half in (0, 1):
                for e in range(2):
                    d = pair + (16 * kk + hi + e)
                    val = kern._lower(q_side, bidx + [rows[half], NumNode(0), d], {})
                    lanes.append(em.uop(UOps.BITCAST, dtypes.uint16, (val,), None))
        frags.append(em.uop(UOps.VECTORIZE, dtypes.uint16.vec(8), tuple(lanes), None))
    return frags


class _Stager:
    """Copies of one side (k's or v's) into shared memory, a tile of TILE_K keys at a time: key r's `width` elements
    at r * stride, 8 at a time (16 bytes) where the side is a load of the tensor cores' type contiguous along its
    elements (by cp.async where its addresses are 16-byte aligned too: `asynchronous`), else one at a time. `frame(j,
    x)`: the side's frame indices of key j and element x."""

    def __init__(self, kern, p, side, width, stride, frame):
        self.kern, self.p, self.side, self.width, self.stride, self.frame = kern, p, side, width, stride, frame
        self.lane = Variable("_lane", 0, 7)
        self.vector = self.asynchronous = False
        if side.op is BufferOps.LOAD and side.arg.dtype == kern._dtypes[id(side)]:
            probe = Variable("_probe_j", 0, p.sk - 1), Variable("_probe_x", 0, width // 8 - 1)
            idx, valid = side.arg.st.expr_idxs(_frame_of(side, frame(probe[0], probe[1] * 8 + self.lane)))
            base = lane_base(idx, self.lane) if is_true(valid) else None
            self.vector = base is not None
            # (device buffers start 256-byte aligned: a chunk whose first element's index is a multiple of 8 for
            # every key and chunk is 16-byte aligned)
            self.asynchronous = self.vector and _multiple_of(base, 8)

    def issue(self, tbase, offset, tid, smem, copy_async, more=None):
        """The block's threads copy keys tbase ... tbase + TILE_K - 1 (the last key in place of those past the end)
        to smem + offset; by cp.async where `copy_async` (then zeros where `more`, if given, is false)."""
        kern, p, em, i32 = self.kern, self.p, self.kern.em, dtypes.int32
        threads = 32 * WARPS
        chunk = 8 if self.vector else 1
        per_row = self.width // chunk
        total = TILE_K * per_row
        for n in range((total + threads - 1) // threads):
            flat = em.add(em.const(n * threads), tid)
            gate = None
            if (n + 1) * threads > total:
                gate = em.lt(flat, em.const(total))
                flat = em.uop(UOps.ALU, i32, (gate, flat, em.const(total - 1)), TernaryOps.WHERE)
            r, c = em.div(flat, em.const(per_row)), em.mod(flat, em.const(per_row))
            j = em.add(tbase, r)
            if p.sk % TILE_K or more is not None:
                j = em.uop(UOps.ALU, i32, (em.lt(j, em.const(p.sk)), j, em.const(p.sk - 1)), TernaryOps.WHERE)
            jv, cv = Variable(f"sj{len(kern.uops)}", 0, p.sk - 1), Variable(f"sc{len(kern.uops)}", 0, per_row - 1)
            em.bind(jv, j)
            em.bind(cv, c)
            at = em.add(offset, em.add(em.mul(r, em.const(self.stride)), em.mul(c, em.const(chunk))))
            if self.vector:
                idx, _ = self.side.arg.st.expr_idxs(_frame_of(self.side, self.frame(jv, cv * 8 + self.lane)))
                base = em.lower_node(lane_base(idx, self.lane))
                buf = kern.bufs[self.side.arg.idx]
                if copy_async:
                    # NOTE: no gate: TILE_K * width / 8 chunks are a multiple of the block's threads (width % 16 == 0)
                    assert gate is None
                    em.uop(UOps.COPY_ASYNC, None, (smem, at, buf, base) + ((more,) if more is not None else ()), 16,
                           False)
                    continue
                val = em.uop(UOps.LOAD, dtypes.uint16.vec(8), (buf, base), None)
            else:
                val = kern._lower(self.side, self.frame(jv, cv), {})
                tdt = smem.dtype.base
                if val.dtype != tdt:
                    val = em.uop(UOps.CAST, tdt, (val,), None)
            em.uop(UOps.STORE, None, (smem, at, val) + ((gate,) if gate is not None else ()), None, False)


def _lower_wide(kern, root, idxs, given):
    """kern._lower of the score's tail or the softmax's input, computed in float32 where the graph says half or
    bfloat16: the score stays the tensor cores' float32 sum, as PyTorch's flash kernels keep it, instead of being
    rounded to 16 bits after each op (two conversions an op, on every score of every tile)."""
    em, f32 = kern.em, dtypes.float32
    narrow = (dtypes.float16, dtypes.bfloat16)
    order = toposort(root, lambda op: () if isinstance(op.op, ReduceOps) or id(op) in given else op.src)
    done = {}
    for op in order:
        if id(op) in given:
            val = given[id(op)]
        elif op.op is BufferOps.LOAD and op.arg.idx < 0:
            # (the scores placeholder, attention.SCORES: the only one parse lets into these parts)
            val = given["scores"]
        elif op.op in LEAVES:
            val = kern._leaf(op, idxs)
            if val.dtype in narrow:
                val = em.uop(UOps.CAST, f32, (val,), None)
        else:
            src = tuple(done[id(x)] for x in op.src)
            if op.op is UnaryOps.CAST and op.arg[0] in narrow:
                val = src[0]
            else:
                dt = kern._dtypes[id(op)]
                val = kern._lower_op(op, f32 if dt in narrow else dt, src)
        done[id(op)] = val
    return done[id(root)]


def _frame_of(op, idxs):
    """A leaf's own indices from the frame's (its dims of size 1 are index 0)."""
    shape = op.arg.st.shape
    return [idxs[n] if shape[n] != 1 else NumNode(0) for n in range(len(shape))]


def _multiple_of(node, n: int) -> bool:
    """Whether index expression `node` is a multiple of `n` whatever its variables' values (a sum of multiples)."""
    if isinstance(node, NumNode):
        return node.b % n == 0
    if isinstance(node, SumNode):
        return all(_multiple_of(t, n) for t in node.nodes)
    if isinstance(node, MulNode):
        return isinstance(node.b, int) and node.b % n == 0 or _multiple_of(node.a, n)
    return False

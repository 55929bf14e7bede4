"""Attention's GPU kernels (codegen/attention.py lowers the rest): how the threads of a block share the work.

Many query rows (SPLIT_ROWS or more): a block is TILE_Q query rows of one (batch, head), a thread each; for each
tile of TILE_K keys the block's threads store k's and v's sides (the parts of the score's product and of the output's
that do not depend on the query) in shared memory as float32, wait at a barrier, and each runs the online softmax
over the tile from there, q's side of its row kept in registers. Few rows (decode): a block a row, its threads taking
every split-th key each with a softmax of its own, combined in shared memory at the end (flash-decoding inside a
block). Flash-decoding (a symbolic key length over few rows): the keys of a row in chunks, a block a (row, chunk)
storing its partial max, sum and accumulators, their count growing with the key length, then lower_combine's kernel
a block a row. All are uops only, so every GPU renderer takes them.
"""
from __future__ import annotations

import math

from tinygrad.codegen.ast_facts import op_dims
from tinygrad.codegen.uops import UOps
from tinygrad.dtype import PtrDType, dtypes
from tinygrad.ops import BinaryOps, TernaryOps, UnaryOps
from tinygrad.shape.symbolic import NumNode, Variable

TILE_Q, TILE_K = 64, 32  # a tiled GPU kernel's query rows a block (a thread each) and keys a tile in shared memory
GRID_Y_MAX = 65535  # CUDA's grid y: the batch dims of a tiled kernel
UNROLL = 4  # partial sums of a score's dot product (independent additions, not one chain of D dependent ones)
SPLIT_ROWS = 4096  # on a GPU, fewer query rows than this take a block each, its threads sharing the keys
SPLIT_THREADS = 64  # a block's threads sharing one query row's keys (half that for value head dims over 128)
DECODE_BLOCKS = 512  # flash-decoding: at least about this many blocks in all (a few per SM) at any key length
MAX_CHUNKS = 64  # flash-decoding: at most this many chunks a query row before the key length adds its own
KEYS_PER_CHUNK = 256  # flash-decoding: a chunk more for each this many keys (long contexts use more blocks)


def split_threads(rows: int, keys: int, dv: int) -> int:
    """How many threads of a GPU block share one query row's keys (flash-decoding inside a block): 1 (a thread a
    row) where there are rows enough to fill the GPU, else 64 (32 for value head dims over 128, so the block's
    shared memory, a slot a thread for each accumulator, stays under 48 KB)."""
    if rows >= SPLIT_ROWS or keys < 128:
        return 1
    return SPLIT_THREADS if dv <= 128 else SPLIT_THREADS // 2


def decode_chunks(rows: int, keys_max: int) -> int:
    """Flash-decoding's base count of chunks of the keys a query row: enough blocks to fill the GPU (DECODE_BLOCKS
    in all) at short key lengths, at least SPLIT_THREADS keys a chunk at the longest; chunk_count adds one for each
    KEYS_PER_CHUNK keys."""
    return max(1, min(MAX_CHUNKS, DECODE_BLOCKS // max(1, rows), keys_max // SPLIT_THREADS))


def chunk_count(sk, base: int):
    """The chunks of a query row's keys at key length `sk` (an int or a Node: the launch's y then follows it):
    `base` (decode_chunks) and one more each KEYS_PER_CHUNK keys, so a chunk holds at most about that many keys at
    long lengths and the blocks grow with them."""
    return (sk + KEYS_PER_CHUNK - 1) // KEYS_PER_CHUNK + base - 1


def max_chunks(p, base: int) -> int:
    """chunk_count at the longest key length: the partials' slots a row."""
    return (p.sk_max + KEYS_PER_CHUNK - 1) // KEYS_PER_CHUNK + base - 1


def tiled_sides(kern, p):
    """(q's side, k's side) of the score's product, where it is [casts] q-side * k-side with q's side the same
    for every key and k's the same for every query, and v's side the same for every query; else None."""
    body = p.rs.src[0]
    while body.op is UnaryOps.CAST:
        body = body.src[0]
    if body.op is not BinaryOps.MUL:
        return None
    dims = op_dims((p.rs.src[0], p.v_root), ())
    qdim, kdim = p.nb, p.nb + 1
    a, b = body.src
    if kdim not in dims[id(a)] and qdim not in dims[id(b)]:
        sides = (a, b)
    elif qdim not in dims[id(a)] and kdim not in dims[id(b)]:
        sides = (b, a)
    else:
        return None
    # (v's frame is bs + (Sq, Dv, Sk): the queries are its dim nb too)
    if qdim in dims[id(p.v_root)]:
        return None
    return sides

def batch_indices(em, p, g1, nbatch: int) -> list:
    """The batch dims' index Variables (NumNode(0) for a dim of size 1), bound to their digits of the block's y
    index `g1` (the batch dims flattened, innermost fastest, `nbatch` in all)."""
    bidx, div = [NumNode(0)] * p.nb, 1
    for n in reversed(range(p.nb)):
        if p.bs[n] > 1:
            v = em.div(g1, em.const(div)) if div != 1 else g1
            v = em.mod(v, em.const(p.bs[n])) if div * p.bs[n] != nbatch else v
            bidx[n] = Variable(f"b{n}", 0, p.bs[n] - 1)
            em.bind(bidx[n], v)
        div *= p.bs[n]
    return bidx


def lower_tiled(kern, p):
    """The tiled GPU kernel: block (query tile, batch), TQ threads a query row each; per tile of TK keys the block
    stores k's and v's sides in shared memory (float32), waits, and each thread runs the online softmax over the
    tile from there, q's side in registers."""
    em, i32, f32 = kern.em, dtypes.int32, dtypes.float32
    q_side, k_side = tiled_sides(kern, p)
    tq, tk = TILE_Q, TILE_K
    nbatch = math.prod(p.bs)
    qtiles = (p.sq + tq - 1) // tq
    lid = em.uop(UOps.SPECIAL, i32, (), (0, "lidx0", tq), False)
    g0 = em.uop(UOps.SPECIAL, i32, (), (0, "gidx0", qtiles), False)
    g1 = em.uop(UOps.SPECIAL, i32, (), (1, "gidx1", nbatch), False)
    kern.global_size, kern.local_size = (qtiles, nbatch, 1), (tq, 1, 1)
    # the batch dims from the block's y
    bidx = batch_indices(em, p, g1, nbatch)
    # the thread's query row; rows past the end compute the last row again (every thread reaches the barriers)
    i = em.add(em.mul(g0, em.const(tq)), lid)
    qgate = None
    if p.sq % tq:
        qgate = em.lt(i, em.const(p.sq))
        i = em.uop(UOps.ALU, i32, (qgate, i, em.const(p.sq - 1)), TernaryOps.WHERE)
    qi = Variable("qi", 0, p.sq - 1) if p.sq > 1 else None
    if qi is not None:
        em.bind(qi, i)
    qi = qi if qi is not None else NumNode(0)
    qregs = [kern._lower(q_side, bidx + [qi, NumNode(0), NumNode(d)], {}) for d in range(p.d)]
    sm_k = em.uop(UOps.DEFINE_LOCAL, PtrDType(f32), (), (f"ktile{len(kern.uops)}", tk * p.d), False)
    sm_v = em.uop(UOps.DEFINE_LOCAL, PtrDType(f32), (), (f"vtile{len(kern.uops)}", tk * p.dv), False)
    m = em.uop(UOps.DEFINE_ACC, f32, (), -math.inf, False)
    lsum = em.uop(UOps.DEFINE_ACC, f32, (), 0.0, False)
    accs = [em.uop(UOps.DEFINE_ACC, f32, (), 0.0, False) for _ in range(p.dv)]
    ntiles = (p.sk + tk - 1) // tk
    end = em.const(ntiles)
    if p.causal and tq % tk == 0:
        # keys past the block's last query row are masked for all its threads: its tiles stop there
        last = em.mul(em.add(g0, em.const(1)), em.const(tq // tk))
        end = em.uop(UOps.ALU, i32, (em.lt(last, end), last, end), TernaryOps.WHERE)
    tloop = em.uop(UOps.LOOP, i32, (em.const(0), end), None, False)
    em.open_scope()
    tbase = em.mul(tloop, em.const(tk))
    _stage(kern, sm_k, k_side, tk, p.d, tbase, lid, lambda jv, xv: bidx + [NumNode(0), jv, xv])
    _stage(kern, sm_v, p.v_root, tk, p.dv, tbase, lid, lambda jv, xv: bidx + [NumNode(0), xv, jv])
    em.uop(UOps.BARRIER, None, (), None, False)
    jloop = em.uop(UOps.LOOP, i32, (em.const(0), em.const(tk)), None, False)
    em.open_scope()
    j = em.add(tbase, jloop)
    inside = None
    if p.sk % tk:
        inside = em.lt(j, em.const(p.sk))
        j = em.uop(UOps.ALU, i32, (inside, j, em.const(p.sk - 1)), TernaryOps.WHERE)
    kj = Variable("kj", 0, p.sk - 1) if p.sk > 1 else None
    if kj is not None:
        em.bind(kj, j)
    kidx = kj if kj is not None else NumNode(0)
    # the score from the tile: UNROLL partial sums over the head dim
    sdt = kern._dtypes[id(p.rs)]
    parts = [None] * UNROLL
    exact = kern.float_products(p)
    if exact:
        qregs = [q if q.dtype == f32 else em.uop(UOps.CAST, f32, (q,), None) for q in qregs]
    for d in range(p.d):
        kval = em.uop(UOps.LOAD, f32, (sm_k, em.add(em.mul(jloop, em.const(p.d)), em.const(d))), None)
        if exact:
            term = em.uop(UOps.ALU, f32, (qregs[d], kval), BinaryOps.MUL)
        else:
            kdt = kern._dtypes[id(k_side)]
            if kdt != f32:
                kval = em.uop(UOps.CAST, kdt, (kval,), None)
            term = kern._lower(p.rs.src[0], bidx + [qi, kidx, NumNode(d)], {id(q_side): qregs[d], id(k_side): kval})
        u = d % UNROLL
        parts[u] = term if parts[u] is None else em.uop(UOps.ALU, sdt, (parts[u], term), BinaryOps.ADD)
    sacc = None
    for part in parts:
        if part is not None:
            sacc = part if sacc is None else em.uop(UOps.ALU, sdt, (sacc, part), BinaryOps.ADD)
    score = kern._lower(p.s_root, bidx + [qi, kidx, NumNode(0)], {id(p.rs): sacc})
    x = kern._lower(p.x, bidx + [qi, kidx], {"scores": score})
    if x.dtype != f32:
        x = em.uop(UOps.CAST, f32, (x,), None)
    if inside is not None:
        x = em.uop(UOps.ALU, f32, (inside, x, em.const(-math.inf, f32)), TernaryOps.WHERE)
    m_new = em.uop(UOps.ALU, f32, (m, x), BinaryOps.MAX)
    m_safe = kern._finite(m_new)
    rescale, pj = kern._exp(m, m_safe), kern._exp(x, m_safe)
    new_accs = []
    for e in range(p.dv):
        g = em.uop(UOps.LOAD, f32, (sm_v, em.add(em.mul(jloop, em.const(p.dv)), em.const(e))), None)
        new_accs.append(em.uop(UOps.ALU, f32, (em.uop(UOps.ALU, f32, (accs[e], rescale), BinaryOps.MUL),
                                               em.uop(UOps.ALU, f32, (pj, g), BinaryOps.MUL)), BinaryOps.ADD))
    # NOTE: the PHIs assign in place: the running max is written last (the rescale reads it)
    accs = [em.uop(UOps.PHI, f32, (a, u, jloop), None, False) for a, u in zip(accs, new_accs)]
    l_upd = em.uop(UOps.ALU, f32, (em.uop(UOps.ALU, f32, (lsum, rescale), BinaryOps.MUL), pj), BinaryOps.ADD)
    lsum = em.uop(UOps.PHI, f32, (lsum, l_upd, jloop), None, False)
    m = em.uop(UOps.PHI, f32, (m, m_new, jloop), None, False)
    em.close_scope()
    em.uop(UOps.ENDLOOP, None, (jloop,), None, False)
    em.uop(UOps.BARRIER, None, (), None, False)  # (before the next tile overwrites this one)
    em.close_scope()
    em.uop(UOps.ENDLOOP, None, (tloop,), None, False)
    inv = em.uop(UOps.ALU, f32, (lsum,), UnaryOps.RECIP)
    for e in range(p.dv):
        kern._store(p, bidx, qi, NumNode(e), em.uop(UOps.ALU, f32, (accs[e], inv), BinaryOps.MUL), qgate)

def _stage(kern, smem, side, tk, width, tbase, lid, frame):
    """The block's threads store `side` at keys tbase .. tbase + tk - 1 (the last key past the end), `width`
    values each, into `smem` as float32: thread t the elements t, t + TILE_Q, ... of the tile. `frame(j, x)` gives
    the side's frame indices of key j and element x."""
    em, i32, f32 = kern.em, dtypes.int32, dtypes.float32
    p = kern.plan
    total = tk * width
    for n in range((total + TILE_Q - 1) // TILE_Q):
        flat = em.add(em.const(n * TILE_Q), lid)
        gate = None
        if (n + 1) * TILE_Q > total:
            gate = em.lt(flat, em.const(total))
            flat = em.uop(UOps.ALU, i32, (gate, flat, em.const(total - 1)), TernaryOps.WHERE)
        j = em.add(tbase, em.div(flat, em.const(width)))
        if p.sk % tk:
            j = em.uop(UOps.ALU, i32, (em.lt(j, em.const(p.sk)), j, em.const(p.sk - 1)), TernaryOps.WHERE)
        jv, xv = Variable(f"sj{len(kern.uops)}", 0, p.sk - 1), Variable(f"sx{len(kern.uops)}", 0, width - 1)
        em.bind(jv, j)
        em.bind(xv, em.mod(flat, em.const(width)))
        val = kern._lower(side, frame(jv if p.sk > 1 else NumNode(0), xv if width > 1 else NumNode(0)), {})
        if val.dtype != f32:
            val = em.uop(UOps.CAST, f32, (val,), None)
        vin = (smem, flat, val) + ((gate,) if gate is not None else ())
        em.uop(UOps.STORE, None, vin, None, False)

def combine_and_store(kern, p, bidx, qi, m, lsum, accs, split, partial=False):
    """A block's threads each hold a row's softmax over their share of the keys: they meet in shared memory (a
    slot per thread for the max, the sum and each accumulator), each rescaled to the row's max; thread t then
    sums and stores the outputs t, t + split, ... (`partial`: flash-decoding's first half, which stores the block's
    max, sum and unnormalised accumulators to the partials instead: see attention.split_mode)"""
    em, i32, f32 = kern.em, dtypes.int32, dtypes.float32
    lid = kern._lid

    def shared(name, n):
        return em.uop(UOps.DEFINE_LOCAL, PtrDType(f32), (), (f"{name}{len(kern.uops)}", n), False)
    sm_m, sm_l, sm_a = shared("m", split), shared("l", split), shared("a", split * p.dv)
    em.uop(UOps.STORE, None, (sm_m, lid, m), None, False)
    em.uop(UOps.BARRIER, None, (), None, False)
    top = None
    for t in range(split):
        v = em.uop(UOps.LOAD, f32, (sm_m, em.const(t)), None)
        top = v if top is None else em.uop(UOps.ALU, f32, (top, v), BinaryOps.MAX)
    w = kern._exp(m, kern._finite(top))
    em.uop(UOps.STORE, None, (sm_l, lid, em.uop(UOps.ALU, f32, (lsum, w), BinaryOps.MUL)), None, False)
    for e in range(p.dv):
        em.uop(UOps.STORE, None, (sm_a, em.add(em.const(e * split), lid),
                                  em.uop(UOps.ALU, f32, (accs[e], w), BinaryOps.MUL)), None, False)
    em.uop(UOps.BARRIER, None, (), None, False)
    total = None
    for t in range(split):
        v = em.uop(UOps.LOAD, f32, (sm_l, em.const(t)), None)
        total = v if total is None else em.uop(UOps.ALU, f32, (total, v), BinaryOps.ADD)
    inv = em.uop(UOps.ALU, f32, (total,), UnaryOps.RECIP)
    base = None
    if partial:
        # the block's slot: (row, chunk) of (rows, C, Dv + 2); its sum and max after the Dv accumulators
        base = em.mul(em.add(em.mul(kern._flat, em.const(max_chunks(p, kern.chunks))), kern._chunk),
                      em.const(p.dv + 2))
        first = em.eq(lid, em.const(0))
        em.uop(UOps.STORE, None, (kern.bufs[0], em.add(base, em.const(p.dv)), total, first), None, False)
        em.uop(UOps.STORE, None, (kern.bufs[0], em.add(base, em.const(p.dv + 1)), top, first), None, False)
    for n in range((p.dv + split - 1) // split):
        e = em.add(em.const(n * split), lid)
        gate = em.lt(e, em.const(p.dv)) if (n + 1) * split > p.dv else None
        if gate is not None:
            e = em.uop(UOps.ALU, i32, (gate, e, em.const(p.dv - 1)), TernaryOps.WHERE)
        ev = Variable(f"oe{n}", 0, p.dv - 1)
        em.bind(ev, e)
        row = em.mul(e, em.const(split))
        acc = None
        for t in range(split):
            v = em.uop(UOps.LOAD, f32, (sm_a, em.add(row, em.const(t))), None)
            acc = v if acc is None else em.uop(UOps.ALU, f32, (acc, v), BinaryOps.ADD)
        if partial:
            vin = (kern.bufs[0], em.add(base, e), acc) + ((gate,) if gate is not None else ())
            em.uop(UOps.STORE, None, vin, None, False)
            continue
        kern._store(p, bidx, qi, ev, em.uop(UOps.ALU, f32, (acc, inv), BinaryOps.MUL), gate)


def lower_combine(kern, p):
    """Flash-decoding's second half: a block a query row, a thread an output e; the row's C partials (max m_c, sum
    l_c, accumulators a_c, each over its chunk of the keys) make out_e = sum_c w_c a_c[e] / sum_c w_c l_c with
    w_c = exp(m_c - max_c m_c), through the product's tail."""
    em, i32, f32 = kern.em, dtypes.int32, dtypes.float32
    rows, chunks, part = math.prod(p.bs) * p.sq, kern.chunks, kern.bufs[kern.scratch]
    flat = em.uop(UOps.SPECIAL, i32, (), (0, "gidx0", rows), False)
    lid = em.uop(UOps.SPECIAL, i32, (), (1, "lidx1", p.dv), False)
    kern.global_size, kern.local_size = (rows, 1, 1), (1, p.dv, 1)
    sizes = list(p.bs) + [p.sq]
    names, div = [NumNode(0)] * len(sizes), 1
    for n in reversed(range(len(sizes))):
        if sizes[n] > 1:
            v = em.div(flat, em.const(div)) if div != 1 else flat
            v = em.mod(v, em.const(sizes[n])) if div * sizes[n] != rows else v
            names[n] = Variable(f"r{n}", 0, sizes[n] - 1)
            em.bind(names[n], v)
        div *= sizes[n]
    slots = max_chunks(p, chunks)
    base = em.mul(flat, em.const(slots * (p.dv + 2)))
    # the row's partials one chunk at a time, rescaled to the running max (their count follows the key length)
    top = em.uop(UOps.DEFINE_ACC, f32, (), -math.inf, False)
    total = em.uop(UOps.DEFINE_ACC, f32, (), 0.0, False)
    acc = em.uop(UOps.DEFINE_ACC, f32, (), 0.0, False)
    count = em.lower_node(chunk_count(p.sk, chunks))
    cloop = em.uop(UOps.LOOP, i32, (em.const(0), count), None, False)
    em.open_scope()
    at = em.add(base, em.mul(cloop, em.const(p.dv + 2)))
    mc = em.uop(UOps.LOAD, f32, (part, em.add(at, em.const(p.dv + 1))), None)
    lc = em.uop(UOps.LOAD, f32, (part, em.add(at, em.const(p.dv))), None)
    ac = em.uop(UOps.LOAD, f32, (part, em.add(at, lid)), None)
    m_new = em.uop(UOps.ALU, f32, (top, mc), BinaryOps.MAX)
    m_safe = kern._finite(m_new)
    rescale, w = kern._exp(top, m_safe), kern._exp(mc, m_safe)

    def update(old, val):
        return em.uop(UOps.ALU, f32, (em.uop(UOps.ALU, f32, (old, rescale), BinaryOps.MUL),
                                      em.uop(UOps.ALU, f32, (val, w), BinaryOps.MUL)), BinaryOps.ADD)
    # NOTE: the PHIs assign in place: the running max is written last (the rescale reads it)
    new_total, new_acc = update(total, lc), update(acc, ac)
    total = em.uop(UOps.PHI, f32, (total, new_total, cloop), None, False)
    acc = em.uop(UOps.PHI, f32, (acc, new_acc, cloop), None, False)
    top = em.uop(UOps.PHI, f32, (top, m_new, cloop), None, False)
    em.close_scope()
    em.uop(UOps.ENDLOOP, None, (cloop,), None, False)
    ev = Variable("oe", 0, p.dv - 1)
    em.bind(ev, lid)
    inv = em.uop(UOps.ALU, f32, (total,), UnaryOps.RECIP)
    kern._store(p, names[:p.nb], names[p.nb], ev, em.uop(UOps.ALU, f32, (acc, inv), BinaryOps.MUL))

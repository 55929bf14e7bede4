"""Attention as one kernel: softmax(f(q @ k^T)) @ v with an online softmax, lowered to uops.

engine/fuse_attention.py finds the three kernels attention is scheduled as (the scores, a row kernel's softmax over
them, the product with v) and merges their ASTs into one: STORE(out, CUSTOM(scores, softmax, product)) whose arg is
ATTENTION. Each of the three keeps the frame (full shape) of its own kernel, so every view of q, k, v and a mask is
the scheduler's own; the two buffers between them become placeholders: the softmax's loads of the scores read
buffer SCORES, the product's loads of the softmax read buffer WEIGHTS. With `bs` the batch dims (batch, heads):

- scores: bs + (Sq, Sk, D), a SUM over D (its elementwise tail, a scale or a cast, after it);
- softmax: bs + (Sq, Sk), exp2((x - max(x)) * log2(e)) / sum(...) over Sk (casts around the sum), x any
  elementwise function of the scores and other buffers (a scale, a causal or padding mask by `where`, an added mask);
- product: bs + (Sq, Dv, Sk), a SUM over Sk of weights * g(v) (casts around the product and on either side), its tail
  after it.

The kernel visits each query row (b, i) once: one pass over the keys j, each score a loop over D, a running max m
and sum l (in float32), rescaled by exp(m_old - m_new) when the max grows, and Dv float32 accumulators of p * v;
the row is acc / l at the end. The same uops serve every renderer: on the CPU the rows are one loop (split across
threads) and the head dims float32 vectors; on a GPU (codegen/attention_gpu.py) a block of query rows of
one head with the keys and values staged in shared memory by tiles, or for few rows (decode) a block a row whose
threads share the keys.

The key length may be symbolic (a jitted decode step's start_pos + 1, for fewer than SYMBOLIC_ROWS query rows): the
key loop then runs to the bound Variables' expression, passed to the kernel after the buffers. On a GPU such a
kernel is split in two (flash-decoding, split_mode): blocks over chunks of the keys store partial softmaxes, a second
kernel combines them (codegen/attention_gpu.py).
"""
from __future__ import annotations

import math

from tinygrad.codegen import attention_gpu, attention_tc
from tinygrad.codegen.ast_facts import LEAVES, out_dtype
from tinygrad.codegen.emitter import Emitter, is_false, is_true, lane_base
from tinygrad.codegen.tile_values import _scalar_dtype
from tinygrad.codegen.uops import VECTOR_ALU_OPS, VECTOR_DTYPES, VECTOR_MATH_OPS, UOps
from tinygrad.dtype import PtrDType, dtypes
from tinygrad.helpers import to_function_name, toposort
from tinygrad.ops import BinaryOps, BufferOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.shapetracker import ShapeTracker
from tinygrad.shape.symbolic import Node, NumNode, Variable

ATTENTION = "attention"
SCORES, WEIGHTS = -1, -2  # the placeholder buffer numbers of the two intermediates
MAX_DV = 256  # value head dims up to this keep one float32 accumulator each in registers
# a symbolic key length fuses for fewer query rows than this (decode, short chunks): more take the unfused kernels,
# whose tiles are timed for the many rows of a prefill
SYMBOLIC_ROWS = 4096
_LOG2E = 1.0 / math.log(2.0)
UNROLL = 4  # partial sums of a score's dot product a loop step


def is_attention(ast) -> bool:
    """Whether a kernel AST (a tuple of STOREs) is engine/fuse_attention.py's merged attention kernel (or one of the
    two halves of a flash-decoding split: see split_mode)."""
    return len(ast) == 1 and ast[0].op is BufferOps.STORE and ast[0].src[0].op is LoadOps.CUSTOM and \
        isinstance(ast[0].src[0].arg, str) and ast[0].src[0].arg.split("/")[0] == ATTENTION


def split_mode(ast) -> tuple:
    """(kind, chunks, scratch) of a merged attention AST: ("whole", 1, None) for one kernel; for flash-decoding on a
    GPU, ("partial", C, None): the keys in chunks, a block each (C the base count: attention_gpu.chunk_count), whose
    partial max, sum and Dv accumulators go to buffer 0 (float32, (rows, max chunks, Dv + 2)) in place of the
    output; ("combine", C, n): the output from those partials, read from buffer n. Both halves carry the whole
    merged AST (the combine uses its shapes and the output's tail)."""
    parts = ast[0].src[0].arg.split("/")
    if len(parts) == 1:
        return "whole", 1, None
    return parts[1], int(parts[2]), int(parts[3]) if len(parts) > 3 else None


def _leaf_shape(root):
    for op in root.toposort():
        if op.op in LEAVES:
            return tuple(op.arg.st.shape)
    return None


def _only_reduce(root):
    """The one reduce of `root`, or None where it has none or several."""
    found = [op for op in root.toposort() if isinstance(op.op, ReduceOps)]
    return found[0] if len(found) == 1 else None


def _strip_casts(op):
    while op.op is UnaryOps.CAST:
        op = op.src[0]
    return op


def _loads_of(root, idx):
    return [op for op in root.toposort() if op.op is BufferOps.LOAD and op.arg.idx == idx]


class Plan:
    """The parts of a merged attention AST the lowering needs; `parse` makes one or returns None."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def parse(ast):
    """A Plan of the merged attention AST `ast`, or None where it is not of the form the module docstring gives."""
    if not is_attention(ast):
        return None
    store = ast[0]
    s_root, p_root, o_root = store.src[0].src
    rs, ro = _only_reduce(s_root), _only_reduce(o_root)
    if rs is None or ro is None or rs.op is not ReduceOps.SUM or ro.op is not ReduceOps.SUM:
        return None
    fs, fo = _leaf_shape(rs), _leaf_shape(ro)
    if fs is None or fo is None or len(fs) < 3 or len(fs) != len(fo):
        return None
    nb = len(fs) - 3
    bs, sq, sk, d = fs[:nb], fs[nb], fs[nb + 1], fs[nb + 2]
    dv = fo[nb + 1]
    fp = bs + (sq, sk)
    # every size known but the key length, which may be symbolic (a decode step's start_pos + n)
    fixed = fs[:nb + 1] + fs[nb + 2:] + fo[:nb + 2]
    if not all(isinstance(s, int) for s in fixed) or tuple(rs.arg) != (nb + 2,) or tuple(ro.arg) != (nb + 2,):
        return None
    if not isinstance(sk, (int, Node)) or isinstance(sk, Node) and (sk.min < 1 or not isinstance(sk.max, int) or
                                                                    math.prod(bs) * sq >= SYMBOLIC_ROWS):
        return None
    if fo[:nb] != bs or fo[nb] != sq or fo[nb + 2] != sk or dv > MAX_DV:
        return None
    if tuple(store.arg.st.shape) != bs + (sq, dv, 1):
        return None
    # every leaf of a part is in its part's frame (its tail's: the reduced dim is 1)
    for root, frame, red in ((s_root, fs, rs), (p_root, fp, None), (o_root, fo, ro)):
        inside = set(map(id, red.toposort())) if red is not None else set()
        for op in root.toposort():
            if op.op in LEAVES:
                want = frame if red is None or id(op) in inside else frame[:-1] + (1,)
                if tuple(op.arg.st.shape) != want:
                    return None
    # the softmax: exp2((x - max(x)) * log2e) / sum(exp2(...)), then casts
    div = _strip_casts(p_root)
    if div.op is not BinaryOps.DIV:
        return None
    # (half types take exp in float32 and round it once: casts around the exp and inside it)
    e, total = _strip_casts(div.src[0]), _strip_casts(div.src[1])
    if total.op is not ReduceOps.SUM or _strip_casts(total.src[0]) != e:
        return None
    if e.op is not UnaryOps.EXP2 or e.src[0].op is not BinaryOps.MUL:
        return None
    sub, scale = _strip_casts(e.src[0].src[0]), e.src[0].src[1]
    if scale.op is not BufferOps.CONST or not isinstance(scale.arg.val, float) or abs(scale.arg.val - _LOG2E) > 1e-6:
        return None
    if sub.op is not BinaryOps.SUB or sub.src[1].op is not ReduceOps.MAX or sub.src[1].src[0] != sub.src[0]:
        return None
    x = sub.src[0]
    if tuple(total.arg) != (nb + 1,) or tuple(sub.src[1].arg) != (nb + 1,):
        return None
    if any(isinstance(op.op, ReduceOps) for op in x.toposort()) or _loads_of(x, WEIGHTS):
        return None
    if any(op.arg.st != ShapeTracker.from_shape(fp) for op in _loads_of(x, SCORES)) or \
            len(_loads_of(p_root, SCORES)) != len(_loads_of(x, SCORES)):
        return None
    # the product: weights * g(v), each side under casts
    body = _strip_casts(ro.src[0])
    if body.op is not BinaryOps.MUL:
        return None
    sides = [_strip_casts(s) for s in body.src]
    w_side = [i for i, s in enumerate(sides) if s.op is BufferOps.LOAD and s.arg.idx == WEIGHTS]
    if len(w_side) != 1:
        return None
    v_root = body.src[1 - w_side[0]]
    if _loads_of(v_root, WEIGHTS) or _loads_of(o_root, SCORES) or len(_loads_of(o_root, WEIGHTS)) != 1:
        return None
    want = ShapeTracker.from_shape(fp).reshape(bs + (sq, 1, sk)).expand(fo)
    if sides[w_side[0]].arg.st != want:
        return None
    if _loads_of(s_root, SCORES) or _loads_of(s_root, WEIGHTS):
        return None
    return Plan(nb=nb, bs=bs, sq=sq, sk=sk, d=d, dv=dv, s_root=s_root, rs=rs, x=x, ro=ro, o_root=o_root,
                v_root=v_root, store=store, causal=_causal(x, fp, nb), symbolic=isinstance(sk, Node),
                sk_max=sk.max if isinstance(sk, Node) else sk)


def _iota_along(op, frame, dim) -> bool:
    """Whether `op` is an IOTA whose value in `frame` is the index of dim `dim` itself."""
    if op.op is not BufferOps.IOTA:
        return False
    names = [Variable(f"c{n}", 0, s - 1) if s > 1 else NumNode(0) for n, s in enumerate(frame)]
    idx, valid = op.arg.st.expr_idxs(names)
    return is_true(valid) and isinstance(idx, Variable) and idx.expr == f"c{dim}"


def _causal(x, frame, nb) -> bool:
    """Whether the softmax's input is where(not (i < j), s, -inf): scaled_dot_product_attention's causal mask, whose
    keys past the query row the kernel need not visit."""
    if not all(isinstance(s, int) for s in frame):
        return False  # (a symbolic key length: the mask is computed like any other)
    if x.op is not TernaryOps.WHERE or x.src[2].op is not BufferOps.CONST or x.src[2].arg.val != -math.inf:
        return False
    cond = x.src[0]
    if cond.op is not BinaryOps.CMPEQ or cond.src[1].op is not BufferOps.CONST or cond.src[1].arg.val is not False:
        return False
    lt = cond.src[0]
    return lt.op is BinaryOps.CMPLT and _iota_along(lt.src[0], frame, nb) and _iota_along(lt.src[1], frame, nb + 1)


class AttentionKernel:
    """The Linearizer's interface (`linearize()` fills `uops`; `name`, `global_size`, `local_size`, `vars`,
    `applied_opts`) for a merged attention AST: see the module docstring."""

    def __init__(self, ast, opts=None):
        self.ast = ast
        self.opts = opts
        self.plan = parse(ast)
        self.kind, self.chunks, self.scratch = split_mode(ast) if self.plan is not None else ("whole", 1, None)
        if self.plan is None:
            raise ValueError("not an attention kernel of a form the lowering handles")
        p = self.plan
        self.uops = []
        self.global_size = None
        self.local_size = None
        self.vars = []
        self.applied_opts = []
        self.gpu = opts is not None and getattr(opts, "has_local", False)
        # the CPU's vectors of float32 (VECTORIZE, vector ALU and loads: codegen/uops.py), over the head dims
        wide = opts is not None and not self.gpu and getattr(opts, "supports_upcast", False)
        self.width = getattr(opts, "max_vector_bytes", 0) // 4 if wide else 1
        if self.width < 4:
            self.width = 1
        dims = "_".join(str(s) for s in p.bs + (p.sq, p.sk, p.d, p.dv))
        # (flash-decoding's two halves are kernels of their own: their own names)
        self.name = to_function_name(f"attn_{dims}" + (f"_{self.kind}{self.chunks}" if self.kind != "whole" else ""))
        self._dtypes = {}
        for root in (p.s_root, p.x, p.o_root):
            for op in root.toposort():
                if id(op) not in self._dtypes:
                    self._dtypes[id(op)] = out_dtype(op, self._dtypes)

    def apply_opt(self, opt):
        raise ValueError("an attention kernel takes no Opts")

    # ---- lowering ----
    def linearize(self):
        if self.uops:
            return self
        p = self.plan
        em = self.em = Emitter(self.uops)
        mems = {}
        for root in (p.s_root, p.x, p.o_root, p.store):
            for op in root.toposort():
                if op.op in (BufferOps.LOAD, BufferOps.STORE) and op.arg.idx >= 0:
                    mems.setdefault(op.arg.idx, op.arg)
        self.bufs = {}
        # (flash-decoding's halves: the partials are float32, the first half's output and the second's last input)
        dts = {idx: mb.dtype for idx, mb in mems.items()}
        if self.kind == "partial":
            dts[0] = dtypes.float32
        elif self.kind == "combine":
            dts[self.scratch] = dtypes.float32
        for idx in sorted(dts):
            self.bufs[idx] = em.uop(UOps.DEFINE_GLOBAL, PtrDType(dts[idx]), (), (idx, f"data{idx}", idx == 0), False)
        # a symbolic key length's Variables are the kernel's arguments, after the buffers
        variables = set()
        for root in (p.s_root, p.x, p.o_root, p.store):
            for op in root.toposort():
                if op.op in LEAVES or op.op is BufferOps.STORE:
                    variables |= op.arg.st.vars()
                    if op.op is BufferOps.CONST and isinstance(op.arg.val, Node):
                        variables |= op.arg.val.vars()
        if p.symbolic:
            variables |= p.sk.vars()
        self.vars = sorted(variables, key=lambda v: v.expr)
        for v in self.vars:
            em.bind(v, em.uop(UOps.DEFINE_VAR, dtypes.int32, (), v, False))
        if self.kind == "combine":
            attention_gpu.lower_combine(self, p)
            return self
        if not p.symbolic and attention_tc.takes(self, p):
            attention_tc.lower(self, p)
            return self
        row_sizes = list(p.bs) + [p.sq]
        rows = math.prod(row_sizes)
        split = attention_gpu.split_threads(rows, p.sk_max, p.dv) if self.gpu else 1
        if self.kind == "partial":
            split = attention_gpu.SPLIT_THREADS if p.dv <= 128 else attention_gpu.SPLIT_THREADS // 2
        if self.gpu and split == 1 and not p.symbolic and math.prod(p.bs) <= attention_gpu.GRID_Y_MAX and \
                p.sk >= attention_gpu.TILE_K and p.sq >= attention_gpu.TILE_Q and \
                attention_gpu.tiled_sides(self, p) is not None:
            attention_gpu.lower_tiled(self, p)
            return self
        loops, row_vars = self._rows(row_sizes, split)
        bidx = [v if v is not None else NumNode(0) for v in row_vars[:p.nb]]
        qi = row_vars[p.nb] if row_vars[p.nb] is not None else NumNode(0)
        m, lsum, accs = self._keys(p, bidx, qi, split)
        if split > 1:
            attention_gpu.combine_and_store(self, p, bidx, qi, m, lsum, accs, split, self.kind == "partial")
        else:
            inv = em.uop(UOps.ALU, dtypes.float32, (lsum,), UnaryOps.RECIP)
            for e in range(p.dv):
                self._store(p, bidx, qi, NumNode(e), em.uop(UOps.ALU, dtypes.float32, (accs[e], inv), BinaryOps.MUL))
        for lp in reversed(loops):
            em.close_scope()
            em.uop(UOps.ENDLOOP, None, (lp,), None, False)
        return self

    def _rows(self, row_sizes, split):
        """The query row (b..., i) of this thread: one loop over the rows on the CPU (split across threads), a thread
        a row on a GPU, or a block a row whose `split` threads share its keys. Returns (the loops, the row's index
        Variables, None for dims of size 1)."""
        em, i32 = self.em, dtypes.int32
        rows = math.prod(row_sizes)
        row_vars = [Variable(f"r{n}", 0, s - 1) if s > 1 else None for n, s in enumerate(row_sizes)]
        loops = []
        if not self.gpu:
            # one loop over every row, split across the host's threads whatever the batch and head counts
            threads = getattr(self.opts, "threads", 1) if self.opts is not None else 1
            arg = min(threads, rows) if threads > 1 and rows > 1 else None
            flat = em.uop(UOps.LOOP, i32, (em.const(0), em.const(rows)), arg, False)
            em.open_scope()
            loops.append(flat)
        elif split > 1:
            # a block a row (at most CUDA's 2**31 - 1 blocks in x), its threads taking every split-th key
            flat = em.uop(UOps.SPECIAL, i32, (), (0, "gidx0", rows), False)
            self._lid = em.uop(UOps.SPECIAL, i32, (), (1, "lidx1", split), False)
            self.global_size, self.local_size = (rows, 1, 1), (1, split, 1)
            self._flat = flat
            if self.kind == "partial":
                # flash-decoding: the block's chunk of the keys is its y; their count follows the key length
                count = attention_gpu.chunk_count(self.plan.sk, self.chunks)
                self._chunk = em.uop(UOps.SPECIAL, i32, (), (1, "gidx1", attention_gpu.max_chunks(self.plan,
                                                                                                 self.chunks)), False)
                self._nchunks = em.lower_node(count)
                self.global_size = (rows, count, 1)
        else:
            lsize = 64 if rows >= 64 else rows
            flat = em.uop(UOps.SPECIAL, i32, (), (0, "idx0", rows, lsize), False)
            self.global_size, self.local_size = ((rows + lsize - 1) // lsize, 1, 1), (lsize, 1, 1)
        div = 1
        for n in reversed(range(len(row_sizes))):
            if row_vars[n] is not None:
                v = em.div(flat, em.const(div)) if div != 1 else flat
                v = em.mod(v, em.const(row_sizes[n])) if div * row_sizes[n] != rows else v
                em.bind(row_vars[n], v)
            div *= row_sizes[n]
        return loops, row_vars

    def _keys(self, p, bidx, qi, split):
        """The pass over the keys (this thread's share of them: j = step * split + lane): returns the running max,
        the sum and the Dv accumulators, each a float32 PHI (or DEFINE_ACC where the loop is empty)."""
        em, i32, f32 = self.em, dtypes.int32, dtypes.float32
        m = em.uop(UOps.DEFINE_ACC, f32, (), -math.inf, False)
        lsum = em.uop(UOps.DEFINE_ACC, f32, (), 0.0, False)
        wv = self.width if self.width > 1 and p.dv % self.width == 0 else 1
        vdt = f32.vec(wv) if wv > 1 else f32
        accs = [em.uop(UOps.DEFINE_ACC, vdt, (), 0.0, False) for _ in range(p.dv // wv)]
        # the key length: a constant, or the expression of the bound Variables (start_pos + n) computed at launch
        if not p.symbolic:
            sk, end, last = None, em.const((p.sk + split - 1) // split), em.const(p.sk - 1)
        else:
            sk = em.lower_node(p.sk)
            end = em.div(em.add(sk, em.const(split - 1)), em.const(split)) if split > 1 else sk
            last = em.sub(sk, em.const(1))
        if p.causal and split == 1 and isinstance(qi, Variable) and p.sk_max > 1:
            # keys past the query row are masked: the loop stops at min(i + 1, Sk)
            nxt = em.add(em.var_uops[qi], em.const(1))
            end = em.uop(UOps.ALU, i32, (em.lt(nxt, end), nxt, end), TernaryOps.WHERE)
        first = stop = None
        if self.kind == "partial":
            # this block's chunk of the keys: [c * len, min((c + 1) * len, Sk)), len = ceil(Sk / C) (empty chunks
            # leave max -inf, sum 0)
            skn = sk if sk is not None else em.const(p.sk)
            clen = em.div(em.add(skn, em.sub(self._nchunks, em.const(1))), self._nchunks)
            first = em.mul(self._chunk, clen)
            nxt = em.add(first, clen)
            stop = em.uop(UOps.ALU, i32, (em.lt(nxt, skn), nxt, skn), TernaryOps.WHERE)
            end = em.div(em.add(clen, em.const(split - 1)), em.const(split))
            last = em.sub(skn, em.const(1))
        kloop = em.uop(UOps.LOOP, i32, (em.const(0), end), None, False)
        em.open_scope()
        inside = None
        if first is not None:
            j = em.add(first, em.add(em.mul(kloop, em.const(split)), self._lid))
            inside = em.lt(j, stop)
            j = em.uop(UOps.ALU, i32, (inside, j, last), TernaryOps.WHERE)
        elif split > 1:
            j = em.add(em.mul(kloop, em.const(split)), self._lid)
            if p.symbolic or p.sk % split:
                # the last step's threads past the end read the last key, and weigh it 0
                inside = em.lt(j, sk if sk is not None else em.const(p.sk))
                j = em.uop(UOps.ALU, i32, (inside, j, last), TernaryOps.WHERE)
        else:
            j = kloop
        kj = Variable("kj", 0, p.sk_max - 1) if p.sk_max > 1 else None
        if kj is not None:
            em.bind(kj, j)
        kidx = kj if kj is not None else NumNode(0)
        score = self._score(p, bidx, qi, kidx)
        x = self._lower(p.x, bidx + [qi, kidx], {"scores": score})
        if x.dtype != f32:
            x = em.uop(UOps.CAST, f32, (x,), None)
        if inside is not None:
            x = em.uop(UOps.ALU, f32, (inside, x, em.const(-math.inf, f32)), TernaryOps.WHERE)
        # online softmax: NOTE the PHIs assign in place, so the running max is written last (the rescale reads it)
        m_new = em.uop(UOps.ALU, f32, (m, x), BinaryOps.MAX)
        m_safe = self._finite(m_new)
        rescale, pj = self._exp(m, m_safe), self._exp(x, m_safe)
        new_accs = []
        if wv > 1:
            lane = Variable("_lane", 0, wv - 1)
            rescale_v, pj_v = self._as_vec(rescale, wv), self._as_vec(pj, wv)
        for c in range(len(accs)):
            if wv > 1:
                g = self._as_vec(self._vlower(p.v_root, bidx + [qi, NumNode(c * wv) + lane, kidx], lane), wv)
                rs_, pj_ = rescale_v, pj_v
            else:
                g = self._lower(p.v_root, bidx + [qi, NumNode(c), kidx], {})
                if g.dtype != f32:
                    g = em.uop(UOps.CAST, f32, (g,), None)
                rs_, pj_ = rescale, pj
            new_accs.append(em.uop(UOps.ALU, vdt, (em.uop(UOps.ALU, vdt, (accs[c], rs_), BinaryOps.MUL),
                                                   em.uop(UOps.ALU, vdt, (pj_, g), BinaryOps.MUL)), BinaryOps.ADD))
        accs = [em.uop(UOps.PHI, vdt, (a, u, kloop), None, False) for a, u in zip(accs, new_accs)]
        l_upd = em.uop(UOps.ALU, f32, (em.uop(UOps.ALU, f32, (lsum, rescale), BinaryOps.MUL), pj), BinaryOps.ADD)
        lsum = em.uop(UOps.PHI, f32, (lsum, l_upd, kloop), None, False)
        m = em.uop(UOps.PHI, f32, (m, m_new, kloop), None, False)
        em.close_scope()
        em.uop(UOps.ENDLOOP, None, (kloop,), None, False)
        if wv > 1:
            accs = [self._lane_of(a, i) for a in accs for i in range(wv)]
        return m, lsum, accs

    def _finite(self, mx):
        """`mx`, or 0 where it is -inf (every key so far masked): exp(x - 0) is then 0, where exp(-inf + inf) is
        NaN."""
        em, f32 = self.em, dtypes.float32
        empty = em.uop(UOps.ALU, dtypes.bool, (mx, em.const(-3.0e38, f32)), BinaryOps.CMPLT)
        return em.uop(UOps.ALU, f32, (empty, em.const(0.0, f32), mx), TernaryOps.WHERE)

    def _exp(self, v, mx):
        """exp(v - mx) in float32, as exp2."""
        em, f32 = self.em, dtypes.float32
        return em.uop(UOps.ALU, f32, (em.uop(UOps.ALU, f32, (em.sub(v, mx), em.const(_LOG2E, f32)), BinaryOps.MUL),),
                      UnaryOps.EXP2)

    def _score(self, p, bidx, qi, kidx):
        """The score of query row qi and key kidx: its dot product over the head dim (a loop), then its tail."""
        em, i32 = self.em, dtypes.int32
        sdt = self._dtypes[id(p.rs)]
        w = self.width
        if w > 1 and sdt == dtypes.float32 and p.d % w == 0:
            return self._score_vec(p, bidx, qi, kidx, sdt)
        # UNROLL partial sums a loop step: independent additions, not one chain of D dependent ones (reassociates
        # the sum, as the linearizer's vectors do)
        unroll = UNROLL if p.d % UNROLL == 0 and p.d > UNROLL else 1
        saccs = [em.uop(UOps.DEFINE_ACC, sdt, (), dtypes.as_const(0, sdt), False) for _ in range(unroll)]
        dloop = em.uop(UOps.LOOP, i32, (em.const(0), em.const(p.d // unroll)), None, False)
        em.open_scope()
        step = Variable("hd", 0, p.d // unroll - 1) if p.d > unroll else None
        if step is not None:
            em.bind(step, dloop)
        for u in range(unroll):
            hd = step * unroll + u if step is not None else NumNode(u)
            if self.float_products(p):
                sides = [self._lower(x, bidx + [qi, kidx, hd], {}) for x in _strip_casts(p.rs.src[0]).src]
                sides = [x if x.dtype == sdt else em.uop(UOps.CAST, sdt, (x,), None) for x in sides]
                term = em.uop(UOps.ALU, sdt, tuple(sides), BinaryOps.MUL)
            else:
                term = self._lower(p.rs.src[0], bidx + [qi, kidx, hd], {})
            saccs[u] = em.uop(UOps.PHI, sdt, (saccs[u], em.uop(UOps.ALU, sdt, (term, saccs[u]), BinaryOps.ADD,
                                                                False), dloop), None, False)
        em.close_scope()
        em.uop(UOps.ENDLOOP, None, (dloop,), None, False)
        sacc = saccs[0]
        for a in saccs[1:]:
            sacc = em.uop(UOps.ALU, sdt, (sacc, a), BinaryOps.ADD)
        return self._lower(p.s_root, bidx + [qi, kidx, NumNode(0)], {id(p.rs): sacc})

    def float_products(self, p) -> bool:
        """Whether the score's terms are float32(a * b) of two half-precision (or float32) sides: then the kernel
        multiplies the sides in float32, exactly, without rounding each product to half first (PyTorch's kernels
        do the same; the unfused kernels round it) and without a conversion a term."""
        body = p.rs.src[0]
        if self._dtypes[id(p.rs)] != dtypes.float32:
            return False
        inner = _strip_casts(body)
        if inner.op is not BinaryOps.MUL:
            return False
        return all(self._dtypes[id(x)] in (dtypes.float16, dtypes.bfloat16, dtypes.float32) for x in inner.src) and \
            (body is inner or body.op is UnaryOps.CAST and body.src[0] is inner)

    def _score_vec(self, p, bidx, qi, kidx, sdt):
        """The score with the head dim in vectors: a lane each of `width` consecutive d, two vector partial sums a
        step where the dim holds them, added and folded across lanes after the loop."""
        em, i32, w = self.em, dtypes.int32, self.width
        n = 2 if p.d % (2 * w) == 0 and p.d > 2 * w else 1
        vdt = sdt.vec(w)
        saccs = [em.uop(UOps.DEFINE_ACC, vdt, (), 0.0, False) for _ in range(n)]
        chunk = w * n
        dloop = em.uop(UOps.LOOP, i32, (em.const(0), em.const(p.d // chunk)), None, False)
        em.open_scope()
        step = Variable("hd", 0, p.d // chunk - 1) if p.d > chunk else None
        if step is not None:
            em.bind(step, dloop)
        lane = Variable("_lane", 0, w - 1)
        for u in range(n):
            hd = (step * chunk if step is not None else NumNode(0)) + u * w + lane
            if self.float_products(p):
                a, b = _strip_casts(p.rs.src[0]).src
                term = em.uop(UOps.ALU, vdt, (self._as_vec(self._vlower(a, bidx + [qi, kidx, hd], lane), w),
                                              self._as_vec(self._vlower(b, bidx + [qi, kidx, hd], lane), w)),
                              BinaryOps.MUL)
            else:
                term = self._as_vec(self._vlower(p.rs.src[0], bidx + [qi, kidx, hd], lane), w)
            saccs[u] = em.uop(UOps.PHI, vdt, (saccs[u], em.uop(UOps.ALU, vdt, (term, saccs[u]), BinaryOps.ADD,
                                                                False), dloop), None, False)
        em.close_scope()
        em.uop(UOps.ENDLOOP, None, (dloop,), None, False)
        acc = saccs[0]
        for a in saccs[1:]:
            acc = em.uop(UOps.ALU, vdt, (acc, a), BinaryOps.ADD)
        vals = [self._lane_of(acc, i) for i in range(w)]
        while len(vals) > 1:
            vals = [em.uop(UOps.ALU, sdt, (vals[i], vals[i + 1]), BinaryOps.ADD) for i in range(0, len(vals), 2)]
        return self._lower(p.s_root, bidx + [qi, kidx, NumNode(0)], {id(p.rs): vals[0]})

    # ---- values over the lanes of a vector: a scalar (the same in every lane), a vector uop, or a tuple of lanes ----
    def _lane_of(self, v, i):
        if isinstance(v, tuple):
            return v[i]
        if v.dtype.count == 1:
            return v
        if v.uop is UOps.VECTORIZE:
            return v.vin[i]
        return self.em.uop(UOps.GEP, v.dtype.scalar(), (v,), i)

    def _as_vec(self, v, w):
        """A float32 vector of `w` lanes from a lane value (casting lanes of another type)."""
        f32 = dtypes.float32
        if not isinstance(v, tuple) and v.dtype.count > 1:
            return v
        lanes = [self._lane_of(v, i) for i in range(w)]
        lanes = [x if x.dtype == f32 else self.em.uop(UOps.CAST, f32, (x,), None) for x in lanes]
        return self.em.uop(UOps.VECTORIZE, f32.vec(w), tuple(lanes), None)

    def _vlower(self, root, idxs, lane):
        """Lower the elementwise AST `root` (no reduce, no placeholder) over the lanes of Variable `lane`: a vector
        where loads are consecutive float32 and the ops are vector ops, lane by lane elsewhere."""
        em, w, f32 = self.em, self.width, dtypes.float32
        done = {}
        for op in root.toposort():
            if op.op in LEAVES:
                val = self._vleaf(op, idxs, lane)
            else:
                dt = self._dtypes[id(op)]
                src = [done[id(x)] for x in op.src]
                scalar = all(not isinstance(x, tuple) and x.dtype.count == 1 for x in src)
                vec_op = op.op in VECTOR_ALU_OPS or \
                    op.op in VECTOR_MATH_OPS and getattr(self.opts, "vector_math", False)
                if scalar:
                    val = self._lower_op(op, dt, tuple(src))
                elif vec_op and dt == f32 and all(_scalar_dtype(x) == f32 for x in src):
                    val = em.uop(UOps.ALU, f32.vec(w), tuple(self._as_vec(x, w) for x in src), op.op)
                else:
                    val = tuple(self._lower_op(op, dt, tuple(self._lane_of(x, i) for x in src)) for i in range(w))
            done[id(op)] = val
        return done[id(root)]

    def _vleaf(self, op, idxs, lane):
        st = op.arg.st
        my = [idxs[n] if st.shape[n] != 1 else NumNode(0) for n in range(len(st.shape))]
        idx, valid = st.expr_idxs(my)
        if lane not in idx.vars() and lane not in valid.vars():
            return self._leaf_at(op, idx, valid)
        dtype = op.arg.dtype
        if op.op is BufferOps.LOAD and dtype in VECTOR_DTYPES and lane not in valid.vars():
            base = lane_base(idx, lane)
            if base is not None:
                vdt = dtype.vec(self.width)
                vin = (self.bufs[op.arg.idx], self.em.lower_node(base))
                if not is_true(valid):
                    zero = self.em.const(dtypes.as_const(0, dtype), dtype)
                    vin = vin + (self.em.lower_node(valid), self._as_vec(zero, self.width))
                return self.em.uop(UOps.LOAD, vdt, vin, None)
        return tuple(self._leaf_at(op, idx.substitute({lane: NumNode(i)}), valid.substitute({lane: NumNode(i)}))
                     for i in range(self.width))

    def _store(self, p, bidx, qi, e, val, gate=None):
        """Store output `e` (a Node) of the row: the normalised accumulator `val` through the product's tail."""
        em = self.em
        odt = self._dtypes[id(p.ro)]
        out_mb = p.store.arg
        if odt != dtypes.float32:
            val = em.uop(UOps.CAST, odt, (val,), None)
        oidx = bidx + [qi, e, NumNode(0)]
        val = self._lower(p.o_root, oidx, {id(p.ro): val})
        if val.dtype != out_mb.dtype:
            val = em.uop(UOps.CAST, out_mb.dtype, (val,), None)
        idx, valid = out_mb.st.expr_idxs(oidx)
        vin = (self.bufs[out_mb.idx], em.lower_node(idx), val)
        cond = gate
        if not is_true(valid):
            cond = em.lower_node(valid) if cond is None else em.both(em.lower_node(valid), cond)
        if cond is not None:
            vin = vin + (cond,)
        em.uop(UOps.STORE, None, vin, None, False)

    def _lower(self, root, idxs, given):
        """Lower the elementwise AST `root` at the frame indices `idxs` (Nodes); `given` holds the values of the
        reduces (by id) and of the scores placeholder ("scores")."""
        em = self.em
        order = toposort(root, lambda op: () if isinstance(op.op, ReduceOps) or id(op) in given else op.src)
        done = {}
        for op in order:
            if id(op) in given:
                val = given[id(op)]
            elif op.op is BufferOps.LOAD and op.arg.idx == SCORES:
                val = given["scores"]
                if val.dtype != op.arg.dtype:
                    val = em.uop(UOps.CAST, op.arg.dtype, (val,), None)
            elif op.op in LEAVES:
                val = self._leaf(op, idxs)
            else:
                val = self._lower_op(op, self._dtypes[id(op)], tuple([done[id(s)] for s in op.src]))
            done[id(op)] = val
        return done[id(root)]

    def _lower_op(self, op, dt, src):
        """One elementwise op of an AST on scalar uops."""
        em = self.em
        if op.op is UnaryOps.CAST or op.op is UnaryOps.BITCAST:
            return em.uop(UOps.CAST if op.op is UnaryOps.CAST else UOps.BITCAST, op.arg[0], src, None)
        if op.op is TernaryOps.MULACC:
            return em.uop(UOps.ALU, dt, (em.uop(UOps.ALU, dt, src[:2], BinaryOps.MUL), src[2]), BinaryOps.ADD)
        return em.uop(UOps.ALU, dt, src, op.op)

    def _leaf(self, op, idxs):
        st = op.arg.st
        my = [idxs[n] if st.shape[n] != 1 else NumNode(0) for n in range(len(st.shape))]
        idx, valid = st.expr_idxs(my)
        return self._leaf_at(op, idx, valid)

    def _leaf_at(self, op, idx, valid):
        """A leaf at one index: a load, a constant or the index itself (IOTA); 0 where `valid` is false."""
        em = self.em
        dtype = op.arg.dtype
        zero = em.const(dtypes.as_const(0, dtype), dtype)
        if is_false(valid):
            return zero
        if op.op is BufferOps.LOAD:
            vin = (self.bufs[op.arg.idx], em.lower_node(idx))
            if not is_true(valid):
                vin = vin + (em.lower_node(valid), zero)
            return em.uop(UOps.LOAD, dtype, vin, None)
        if op.op is BufferOps.IOTA or isinstance(op.arg.val, Node):
            c = em.lower_node(idx if op.op is BufferOps.IOTA else op.arg.val)
            if dtype != dtypes.int32:
                c = em.uop(UOps.CAST, dtype, (c,), None)
        else:
            c = em.const(op.arg.val, dtype)
        if is_true(valid):
            return c
        return em.uop(UOps.ALU, dtype, (em.lower_node(valid), c, zero), TernaryOps.WHERE)


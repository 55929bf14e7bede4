"""Attention fusion: the three kernels of softmax(f(q @ k^T)) @ v become one (the scheduler's last step).

The scheduler makes attention three kernels: the scores (a SUM over the head dim), their softmax (a row kernel,
engine/fuse_rows.py, with the scale and any mask fused in) and the product with v (a SUM over the keys). The scores
and the weights then go through memory: Sq x Sk values a head, twice. Here, after the schedule is made, such a
triple is merged into one item whose AST holds the three kernels' ASTs (codegen/attention.py says the form and lowers
it with an online softmax), where

- the scores' buffer is read only by the softmax and the weights' only by the product, neither is an output or an
  assign, and each is stored whole (a contiguous store of its kernel's output);
- codegen/attention.parse accepts the merged AST (the shapes line up, the softmax is exp(x - max) / sum, the product
  is weights * g(v)).

Anything else (dropout between the softmax and the product, symbolic shapes other than the key length, a value head
dim over MAX_DV) keeps its three kernels. The two intermediates never get a buffer.

Flash-decoding: on a GPU, a key length that is symbolic (a jitted decode step's start_pos + 1) over few query rows
takes two items: the first splits each row's keys into chunks, a block each, and stores each block's partial
softmax (max, sum, accumulators) to a small float32 buffer of its own; the second combines a row's partials into the
output (codegen/attention.split_mode), so one query row of a head uses many SMs.
"""
import math

from tinygrad.codegen.attention import ATTENTION, SCORES, WEIGHTS, parse
from tinygrad.codegen.attention_gpu import decode_chunks, max_chunks
from tinygrad.device import Buffer, Device
from tinygrad.dtype import dtypes
from tinygrad.helpers import FLASH_ATTENTION
from tinygrad.ops import BufferOps, LazyOp, LoadOps, MemBuffer, ReduceOps
from tinygrad.shape.shapetracker import ShapeTracker


def _kernel_root(si):
    """The one STORE of a kernel item that stores one buffer, or None."""
    if si.n_outputs != 1 or len(si.ast) != 1 or si.ast[0].op is not BufferOps.STORE:
        return None
    if si.lbs and si.lbs[0].op is LoadOps.ASSIGN:
        return None
    return si.ast[0]


def _stored_whole(store) -> bool:
    st = store.arg.st
    return st == ShapeTracker.from_shape(tuple(st.shape))


def _remap(root, mapping):
    """`root` with each LOAD's buffer number replaced through `mapping` (old number -> new number)."""
    memo = {}
    for op in root.toposort():
        src = tuple(memo[id(s)] for s in op.src)
        arg = op.arg
        if op.op is BufferOps.LOAD:
            arg = MemBuffer(mapping[arg.idx], arg.dtype, arg.st)
        memo[id(op)] = LazyOp(op.op, src, arg)
    return memo[id(root)]


def _merge(s_si, p_si, o_si):
    """The merged item of the scores, softmax and product items, or None where the lowering does not take it."""
    s_buf, p_buf = s_si.bufs[0], p_si.bufs[0]
    bufs = [o_si.bufs[0]]

    def number(buf):
        if buf is s_buf:
            return SCORES
        if buf is p_buf:
            return WEIGHTS
        for n, b in enumerate(bufs):
            if b is buf:
                return n
        bufs.append(buf)
        return len(bufs) - 1
    parts = []
    for si in (s_si, p_si, o_si):
        mapping = {n: number(b) for n, b in enumerate(si.bufs) if n >= si.n_outputs}
        parts.append(_remap(si.ast[0].src[0], mapping))
    store = o_si.ast[0]
    ast = (LazyOp(BufferOps.STORE, (LazyOp(LoadOps.CUSTOM, tuple(parts), ATTENTION),), store.arg),)
    plan = parse(ast)
    if plan is None:
        return None
    gpu = getattr(Device[bufs[0].device].linearizer_opts, "has_local", False)
    if plan.symbolic and not gpu and not SYMBOLIC_ON_CPU:
        return None
    return _flash_decode(type(o_si), ast, tuple(bufs), o_si.lbs, plan) or [type(o_si)(ast, tuple(bufs), 1, o_si.lbs)]


# A symbolic key length keeps the three kernels on the CPU: its fused lowering reads the cached values (laid out
# (head_dim, positions)) a position at a time across the head dim, lane by lane, where the unfused product reads them
# along the positions in vectors; measured 2-3x slower at Gemma 3 270M's decode shape (4 heads of 256, 128 keys).
# Tests turn it on to check that lowering.
SYMBOLIC_ON_CPU = False


def _flash_decode(item, ast, bufs, lbs, plan):
    """The two items of flash-decoding (see the module docstring) for the merged `ast`, or None where it is one
    kernel (the CPU, a key length known when scheduling, one chunk)."""
    if not plan.symbolic:
        return None
    dev = bufs[0].device
    opts = Device[dev].linearizer_opts
    if opts is None or not getattr(opts, "has_local", False):
        return None
    rows = math.prod(plan.bs) * plan.sq
    chunks = decode_chunks(rows, plan.sk_max)
    if chunks < 2:
        return None
    return split_items(item, ast, bufs, lbs, plan, chunks)


def split_items(item, ast, bufs, lbs, plan, chunks: int) -> list:
    """Flash-decoding's two items of type `item` for the merged `ast` on `bufs` (output first), the keys of a row in
    `chunks` chunks: the partials to a new float32 buffer, then the output from them."""
    rows = math.prod(plan.bs) * plan.sq
    partials = Buffer(bufs[0].device, rows * max_chunks(plan, chunks) * (plan.dv + 2), dtypes.float32)
    store, custom = ast[0], ast[0].src[0]

    def half(arg):
        return (LazyOp(BufferOps.STORE, (LazyOp(LoadOps.CUSTOM, custom.src, arg),), store.arg),)
    first = item(half(f"{ATTENTION}/partial/{chunks}"), (partials,) + bufs[1:], 1, ())
    second = item(half(f"{ATTENTION}/combine/{chunks}/{len(bufs)}"), bufs + (partials,), 1, lbs)
    return [first, second]


def fuse_attention(schedule, out_ids):
    """`schedule` with each attention triple merged into one item (see the module docstring); `out_ids` holds the
    id of every requested output base. FLASH_ATTENTION=0 turns it off."""
    if not FLASH_ATTENTION:
        return schedule
    producer, readers = {}, {}
    for n, si in enumerate(schedule):
        for b in si.bufs[:si.n_outputs]:
            producer[id(b)] = n
        for b in si.bufs[si.n_outputs:]:
            readers.setdefault(id(b), set()).add(n)
    dropped, merged = set(), {}
    for n, o_si in enumerate(schedule):
        o_store = _kernel_root(o_si)
        if o_store is None or not any(isinstance(op.op, ReduceOps) for op in o_store.toposort()):
            continue
        for p_buf in o_si.bufs[1:]:
            pn = producer.get(id(p_buf))
            if pn is None or pn in dropped or readers.get(id(p_buf)) != {n}:
                continue
            p_si = schedule[pn]
            p_store = _kernel_root(p_si)
            if p_store is None or id(p_si.lbs[0]) in out_ids or not _stored_whole(p_store):
                continue
            for s_buf in p_si.bufs[1:]:
                sn = producer.get(id(s_buf))
                if sn is None or sn in dropped or readers.get(id(s_buf)) != {pn}:
                    continue
                s_si = schedule[sn]
                s_store = _kernel_root(s_si)
                if s_store is None or id(s_si.lbs[0]) in out_ids or not _stored_whole(s_store):
                    continue
                item = _merge(s_si, p_si, o_si)
                if item is not None:
                    dropped |= {sn, pn}
                    merged[n] = item
                    break
            if n in merged:
                break
    if not merged:
        return schedule
    return [x for n, si in enumerate(schedule) if n not in dropped for x in merged.get(n, [si])]

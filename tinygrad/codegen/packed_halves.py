"""Half and bfloat16 buffers moved as packed vectors on a GPU (LinearizerOptions.half_vectors).

The GPU renderers keep a half or bfloat16 value in a float register and convert it at each load and store, so the
linearizer never makes vectors of them (codegen/uops.py): a thread of an fp16 elementwise kernel read and wrote 2
bytes at a time, and such kernels ran at about a third of copy bandwidth on the H100 (gelu fp16 8192x4096: 820 GB/s
against PyTorch's 2,331). Here the lanes of a vectorised dim are read as one vector of their 16-bit patterns (up to
8 of them: a 16-byte access) and each lane is converted from its bits (a BITCAST); a store converts each lane to its
bits and writes them as one vector. Arithmetic stays lane by lane in float, as before, so results are bit for bit
those of the scalar kernel.
"""
from tinygrad.codegen.emitter import is_true, lane_base
from tinygrad.codegen.uops import UOps
from tinygrad.dtype import dtypes
from tinygrad.ops import BufferOps
from tinygrad.shape.symbolic import Node

HALF_TYPES = (dtypes.float16, dtypes.bfloat16)


def packs(lin, dtype) -> bool:
    """Whether a vectorised access to a buffer of `dtype` goes as one vector of 16-bit patterns."""
    return dtype in HALF_TYPES and lin._opt("half_vectors") and lin.vector_width * 2 <= lin.opts.max_vector_bytes


def load(lin, op, idx: Node, valid: Node, lane):
    """The lanes of a vectorised load of `op` (a half or bfloat16 buffer) as a tuple of scalar uops, read as one
    vector of bits; None where this does not apply (another kind of leaf or buffer, lanes that are not consecutive
    elements or are masked one by one): the caller reads them as before."""
    if op.op is not BufferOps.LOAD or not packs(lin, op.arg.dtype) or lane in valid.vars():
        return None
    base = lane_base(idx, lane)
    if base is None:
        return None
    em, w = lin.em, lin.vector_width
    bits = dtypes.uint16.vec(w)
    vin = (lin.buf_uops[op.arg.idx], em.lower_node(base))
    if not is_true(valid):
        zero = em.const(0, dtypes.uint16)
        vin = vin + (em.lower_node(valid), em.uop(UOps.VECTORIZE, bits, (zero,) * w, None))
    vec = em.uop(UOps.LOAD, bits, vin, None)
    dtype = op.arg.dtype
    return tuple(em.uop(UOps.BITCAST, dtype, (em.uop(UOps.GEP, dtypes.uint16, (vec,), i),), None) for i in range(w))


def store(lin, mb, idx: Node, valid: Node, val) -> bool:
    """Store the lanes of `val` to buffer `mb` as one vector of bits where it is a half or bfloat16 buffer and the
    lanes are consecutive elements, not masked one by one; False (nothing emitted) otherwise."""
    if not packs(lin, mb.dtype) or lin._lane in valid.vars():
        return False
    base = lane_base(idx, lin._lane)
    if base is None:
        return False
    em, w, gate = lin.em, lin.vector_width, lin._gated(valid)
    lanes = tuple(em.uop(UOps.BITCAST, dtypes.uint16, (lin._lane_of(val, i),), None) for i in range(w))
    vin = (lin.buf_uops[mb.idx], em.lower_node(base), em.uop(UOps.VECTORIZE, dtypes.uint16.vec(w), lanes, None))
    em.uop(UOps.STORE, None, vin + ((gate,) if gate is not None else ()), None, False)
    return True

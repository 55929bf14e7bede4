# cython: language_level=3
"""LazyBuffer: a Tensor without derivatives. Ops on it build a graph; nothing runs until the graph is scheduled.

A LazyBuffer is either a *base*, which owns an op (`op`, `srcs`, `arg`) and, once realized, a Buffer; or a *view*
of a base through a ShapeTracker (`st`), which is how every movement op is expressed without copying.

It is a Cython class because every Tensor op makes one or more of them: building `x * 2 + 1` must cost a few
hundred nanoseconds per node, not microseconds, for eager execution to be fast.
"""
from libc.string cimport memcpy

import collections

import numpy as np

from tinygrad.const_fold import cast as _const_cast, evaluate as _const_evaluate, reduce_sum as _const_sum
from tinygrad.device import Buffer
from tinygrad.dtype import dtypes
from tinygrad.errors import ArgumentError
from tinygrad.helpers import toposort
from tinygrad.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.shapetracker cimport ShapeTracker
from tinygrad.shape.symbolic import Node

# LazyBuffer.scalar's buffers by (device, id(dtype), the value's bits), least recently used first. The id is safe
# as a key: the cached LazyBuffer holds its dtype, so the id is not reused while the entry exists (two equal but
# distinct dtype objects just get a buffer each). DType hashes in Python code; an int key costs nothing.
_scalars = collections.OrderedDict()


cdef bint _compiled_in(double v):
    """Whether float constant `v` stays in the kernel's source: values code writes as literals and never varies (small
    integers, halves), and inf and nan, which constant folding and the renderers treat specially."""
    if v != v or v == float("inf") or v == float("-inf"):
        return True
    if -16 <= v <= 16 and v == <long long>v:
        return True
    return v == 0.5 or v == -0.5


cdef inline long long _bits(double v) noexcept:
    # the value's bit pattern: -0.0 and 0.0, and nans of different payloads, are different keys
    cdef long long b
    memcpy(&b, &v, sizeof(b))
    return b


cdef LazyBuffer _scalar(double val, object dtype, str device):
    """LazyBuffer.scalar (see there): the buffer of `val`, found or made, or None when it is compiled in."""
    if _compiled_in(val):
        return None
    key = (device, <Py_ssize_t><void*>dtype, _bits(val))
    cdef LazyBuffer ret = _scalars.get(key)
    if ret is not None:
        try:
            _scalars.move_to_end(key)
        except KeyError:  # another thread evicted it meanwhile: still a valid buffer of this value
            pass
        return ret
    if dtype.np is None or device.startswith("DISK"):
        return None
    # a value past the dtype's range becomes inf, as the same constant compiled into a kernel does: no warning
    with np.errstate(over="ignore"):
        host = np.array([val], dtype=dtype.np)
    buf = Buffer(device, 1, dtype).allocate()
    buf.copyin(memoryview(host).cast("B"))
    ret = new_base(device, contiguous_st(()), dtype, LoadOps.EMPTY, None, ())
    ret.buffer, ret.shared_const = buf, True
    _scalars[key] = ret
    if len(_scalars) > 256:
        try:
            _scalars.popitem(last=False)
        except KeyError:  # emptied by other threads meanwhile
            pass
    return ret


_CMP_OPS = frozenset((BinaryOps.CMPLT, BinaryOps.CMPEQ, BinaryOps.CMPNE))
_CONST = LoadOps.CONST
_IOTA = LoadOps.IOTA
_CONTIGUOUS = LoadOps.CONTIGUOUS
_COPY = LoadOps.COPY
_WHERE = TernaryOps.WHERE
_NEG = UnaryOps.NEG
_CMPLT, _CMPEQ, _CMPNE = BinaryOps.CMPLT, BinaryOps.CMPEQ, BinaryOps.CMPNE
_F16, _BF16, _F32, _F64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64


cdef inline bint _is_float(object dt):
    # identity with the shared singletons: DType hashes and compares in Python code
    return dt is _F32 or dt is _F16 or dt is _BF16 or dt is _F64


_INTS = (dtypes.int32, dtypes.int64, dtypes.int8, dtypes.int16, dtypes.uint8, dtypes.uint16, dtypes.uint32,
         dtypes.uint64)


cdef inline bint _is_int(object dt):
    # identity, as _is_float (bool is not an int dtype here: its constants are bools)
    for d in _INTS:
        if dt is d:
            return True
    return False

# trackers are immutable, so the common ones are shared: the contiguous tracker of a shape, and the tracker that
# broadcasts a 0-d constant to a shape. Only concrete shapes: a bound Variable compares equal to the same Variable
# bound to another value, so a symbolic tracker must not be reused.
cdef dict _contiguous_st = {}
cdef dict _broadcast_st = {}


cdef inline bint _concrete(tuple shape):
    for s in shape:
        if type(s) is not int:
            return False
    return True


cdef ShapeTracker contiguous_st(tuple shape):
    if not _concrete(shape):
        return ShapeTracker.from_shape(shape)
    st = _contiguous_st.get(shape)
    if st is None:
        st = ShapeTracker.from_shape(shape)
        if len(_contiguous_st) < 4096:
            _contiguous_st[shape] = st
    return <ShapeTracker>st


cdef ShapeTracker broadcast_st(tuple shape):
    if not _concrete(shape):
        return ShapeTracker.from_shape(()).reshape((1,) * len(shape)).expand(shape)
    st = _broadcast_st.get(shape)
    if st is None:
        st = ShapeTracker.from_shape(()).reshape((1,) * len(shape)).expand(shape)
        if len(_broadcast_st) < 4096:
            _broadcast_st[shape] = st
    return <ShapeTracker>st


cdef LazyBuffer new_base(str device, ShapeTracker st, object dtype, object op, object arg, tuple srcs):
    """A base node; its Buffer object exists at once (memory comes when its kernel first runs)."""
    cdef LazyBuffer ret = LazyBuffer.__new__(LazyBuffer)
    ret.device, ret.st, ret.dtype, ret.shape = device, st, dtype, st.shape
    ret.size = st.size
    ret._base = None
    ret.op, ret.arg, ret.srcs = op, arg, srcs
    # the Buffer object comes at the first read of `buffer`: most nodes of an eager expression fuse into the
    # kernel of the one realized, and never need one
    ret._buffer = None
    ret.forced_realize = False
    ret.pending = False
    return ret


cdef LazyBuffer new_view(LazyBuffer base, ShapeTracker st):
    cdef LazyBuffer ret = LazyBuffer.__new__(LazyBuffer)
    ret.device, ret.st, ret.dtype, ret.shape = base.device, st, base.dtype, st.shape
    ret.size = st.size
    ret._base = base
    ret.op, ret.arg, ret.srcs, ret._buffer = None, None, (), None
    ret.forced_realize = False
    ret.pending = False
    return ret


cdef class LazyBuffer:
    """One node of the lazy graph; see the module docstring. Build them with the factories, not the constructor."""

    def __init__(self, str device, ShapeTracker st, dtype, op=None, arg=None, tuple srcs=(), LazyBuffer base=None):
        if base is not None and base._base is not None:
            raise RuntimeError("a view's base must be a base")
        proto = new_view(base, st) if base is not None else new_base(device, st, dtype, op, arg, srcs)
        self.device, self.st, self.dtype, self.shape, self.size = device, st, proto.dtype, proto.shape, proto.size
        self._base, self.op, self.arg, self.srcs, self._buffer = proto._base, proto.op, proto.arg, proto.srcs, \
            proto._buffer
        self.forced_realize = False
        self.pending = False

    # ---- identity ----
    @property
    def base(self):
        return self._base if self._base is not None else self

    @property
    def lbs(self):
        """[self]: the buffers behind a tensor, as tinygrad 0.9's single- and multi-device buffers both answered."""
        return [self]

    @property
    def realized(self):
        """The Buffer holding this base's data once it has been computed; None for views and unrealized bases."""
        if self._base is not None or self._buffer is None or self.pending or self._buffer._buf is None:
            return None
        return self._buffer

    @property
    def buffer(self):
        """A base's Buffer (made here at the first read: its memory comes when its kernel first runs); None for
        views and constants, which kernels inline. A symbolic size gets room for the largest value its variables
        allow."""
        if self._buffer is None and self._base is None and self.op is not None and self.op is not _CONST:
            size = self.size
            self._buffer = Buffer(self.device, size if isinstance(size, int) else size.max, self.dtype)
        return self._buffer

    @buffer.setter
    def buffer(self, value):
        self._buffer = value

    def __repr__(self):
        what = f"{self.op}" if self._base is None else f"view of {self.base.op}"
        return f"<LB {self.device} {self.shape} {str(self.dtype)[7:]} {what} st={self.st}>"

    def is_unrealized_const(self):
        b = self.base
        return b.realized is None and b.op is _CONST

    def is_folded_const(self):
        """Whether this reads an unrealized constant that folding computed (see `folded`)."""
        cdef LazyBuffer b = self._base if self._base is not None else self
        return b.folded and b.op is _CONST and b._buffer is None

    def constant_value(self):
        """The Python value of every element when this is a constant that folding may use (unrealized, unmasked, not
        kept by realize()), else None."""
        return _const_value(self)

    def is_inlined(self):
        """Whether this is a constant or an iota: a value kernels compute in place, with no buffer behind it."""
        b = self.base
        return b.realized is None and (b.op is _CONST or b.op is _IOTA)

    # ---- factories ----
    @staticmethod
    def loadop(op, shape, dtype, str device, arg=None, tuple srcs=()):
        return new_base(device, contiguous_st(tuple(shape)), dtype, op, arg, srcs)

    @staticmethod
    def fromcpu(x):
        """A realized LazyBuffer on the CPU device holding (a contiguous copy of) numpy array `x`."""
        # NOTE: not np.ascontiguousarray, which makes 0-d arrays 1-d
        x = np.asarray(x)
        if not x.flags.c_contiguous:
            x = x.copy(order="C")
        ret = new_base("CPU", contiguous_st(tuple(x.shape)), dtypes.from_np(x.dtype), LoadOps.EMPTY, None, ())
        ret.buffer = Buffer("CPU", x.size, ret.dtype, opaque=x.reshape(-1))
        return ret

    @staticmethod
    def scalar(val, dtype, str device):
        """A realized 0-d buffer on `device` holding float `val`, shared by every graph that uses this value, or None
        where the value is better compiled into the kernel (see _compiled_in). Kernels read it instead of holding
        the value, so a scalar that changes between calls (a learning rate, a `full()` value) reuses one compiled
        kernel. The last few hundred values are kept; each is read-only (`shared_const`)."""
        return _scalar(float(val), dtype, device)

    def scalar_const(self, val):
        """Python number `val` as a constant of this buffer's dtype, device and shape, the way eager arithmetic
        wants it: a float value that code may vary reads its shared scalar buffer (LazyBuffer.scalar) through a
        broadcast view, anything else is const(val). One call, so `x * 1.0001` costs what `x * 2` does to build."""
        cdef LazyBuffer s = None
        cdef tuple shp = self.shape
        if type(val) is float and _is_float(self.dtype):
            s = _scalar(val, self.dtype, self.device)
        if s is None:
            return self.const(val)
        if not shp:
            return s
        if _concrete(shp):
            return new_view(s, broadcast_st(shp))
        return s.reshape((1,) * len(shp)).expand(shp)

    def const(self, val, shape=None):
        """A constant with this buffer's dtype and device, broadcast to `shape` (default: this shape)."""
        cdef tuple shp = self.shape if shape is None else tuple(shape)
        # dtypes.as_const's answer for the common cases (a Python number into a float buffer, a Python int into an
        # int one), without the call
        if (type(val) is float or type(val) is int) and _is_float(self.dtype):
            cval = float(val)
        elif type(val) is int and _is_int(self.dtype):
            cval = val
        else:
            cval = dtypes.as_const(val, self.dtype)
        c = new_base(self.device, contiguous_st(()), self.dtype, _CONST, cval, ())
        if not shp:
            return c
        for s in shp:
            if isinstance(s, Node):
                return c.reshape((1,) * len(shp)).expand(shp)
        return new_view(c, broadcast_st(shp))

    # ---- the graph's ops ----
    def contiguous(self):
        """This data laid out contiguously in a buffer of its own (a no-op when it already is)."""
        if not self.is_inlined() and self.st.contiguous and self.size == self.base.size:
            # already laid out contiguously: make sure it gets a buffer of its own instead of being fused away
            if self.base.realized is None:
                (<LazyBuffer>self.base).forced_realize = True
            return self
        return new_base(self.device, contiguous_st(self.shape), self.dtype, _CONTIGUOUS, None, (self,))

    def assign(self, LazyBuffer x):
        """`x`, computed straight into this buffer's memory when this is a realized buffer or a view of one (so
        kernels captured by the JIT keep seeing it, and a write through a shrink, permute or pad of a buffer lands
        in the buffer, as a KV cache needs); otherwise `x`, given a buffer of its own if it is a constant."""
        cdef LazyBuffer target = self.base
        cdef bint whole = self.st.contiguous and self.size == target.size
        if not whole and target.buffer is not None and target.op is not _CONST and not target.shared_const and \
                (target.realized is not None or target.op is LoadOps.ASSIGN):
            if x.base is target:
                if x.st == self.st:
                    return self
                # other elements of the same buffer: copied out before they are written
                x = new_base(x.device, contiguous_st(x.shape), x.dtype, _CONTIGUOUS, None, (x,))
            return _assign_view(self, x, target)
        if x.base is target or target.realized is None or target.op is _CONST or target.shared_const or not whole:
            # NOTE: state assigned a constant (a counter starting from zeros, folded without a kernel) must still
            # become a buffer: a jitted step captures the kernels that write buffers, and would never update it
            return x.contiguous() if x.base is not target and x.is_inlined() else x
        if _reads_shifted(x, target, None):
            # writing in place while reading other elements of the same memory: compute into a temporary first
            x = new_base(x.device, contiguous_st(x.shape), x.dtype, _CONTIGUOUS, None, (x,))
        cdef LazyBuffer ret = LazyBuffer.__new__(LazyBuffer)
        st = contiguous_st(self.shape)
        ret.device, ret.st, ret.dtype, ret.shape, ret.size = self.device, st, self.dtype, st.shape, st.size
        ret._base = None
        ret.op, ret.arg, ret.srcs = LoadOps.ASSIGN, None, (x, target)
        ret.buffer, ret.pending, ret.forced_realize = target.buffer, True, False
        return ret

    def cast(self, dtype, bint bitcast=False):
        if self.dtype == dtype:
            return self
        if bitcast and self.device.startswith("DISK"):
            # bytes of a file: reinterpreted in place, as tinygrad 0.9 did (the last dim scales with the size)
            ret = _disk_view(self, dtype)
            if ret is None:
                raise ArgumentError(f"can't bitcast {self.shape} {self.dtype} on {self.device} to {dtype}: only a "
                                 f"contiguous range whose last dim holds whole {dtype} values can be")
            return ret
        if bitcast and dtype.itemsize != self.dtype.itemsize:
            raise ArgumentError(f"can't bitcast {self.dtype} to {dtype}: sizes differ")
        if not bitcast:
            folded = _fold_cast(self, dtype)
            if folded is not None:
                return folded
        op = UnaryOps.BITCAST if bitcast else UnaryOps.CAST
        return new_base(self.device, contiguous_st(self.shape), dtype, op, (dtype, bitcast), (self,))

    def copy_to_device(self, str device):
        if device == self.device:
            return self
        if self.is_unrealized_const() and all(v.mask is None for v in self.st.views):
            # an unmasked constant is the same constant on any device: nothing to copy
            c = new_base(device, contiguous_st(()), self.dtype, _CONST, self.base.arg, ())
            return c.reshape((1,) * len(self.shape)).expand(self.shape)
        if self.device.startswith("DISK") and self is not self.base:
            # a slice of a file is a smaller file view: nothing computes on DISK
            src = _disk_view(self, self.dtype)
            if src is None:
                # a permuted, strided or padded view: copy what it reads from, then view that on the device
                return self.base.copy_to_device(device)._view(self.st)
        else:
            src = self.contiguous()
        return new_base(device, contiguous_st(src.shape), src.dtype, _COPY, src.size * src.dtype.itemsize, (src,))

    def e(self, op, *in_srcs, arg=None):
        """An elementwise op on this buffer and `in_srcs` (same shape and device; dtypes as the op needs)."""
        cdef tuple srcs = (self,) + in_srcs
        cdef LazyBuffer s
        for s in srcs:
            if s.shape != self.shape:
                raise ArgumentError(f"{op} needs equal shapes, got {[x.shape for x in srcs]}")
            if s.device != self.device:
                raise RuntimeError(f"{op} mixes devices {[x.device for x in srcs]}")
        if op is _WHERE:
            if srcs[1].dtype != srcs[2].dtype:
                raise TypeError(f"where needs equal value dtypes, got {srcs[1].dtype} and {srcs[2].dtype}")
            out_dtype = srcs[1].dtype
        else:
            for s in srcs:
                if s.dtype is not self.dtype and s.dtype != self.dtype:
                    raise TypeError(f"{op} needs equal dtypes, got {[x.dtype for x in srcs]}")
            # identity, not `op in _CMP_OPS`: hashing an Enum member runs Python code, on every eager op
            out_dtype = dtypes.bool if op is _CMPLT or op is _CMPEQ or op is _CMPNE else self.dtype
        cdef LazyBuffer b
        cdef int consts = 0
        cdef bint tried = False
        for s in srcs:
            # cheap tests first: only a constant operand that _fold has a rule for is looked at further (x*2+1
            # pays a few field reads here)
            b = s._base if s._base is not None else s
            if b.op is _CONST:
                consts += 1
                if not tried and _may_fold(op, b.arg):
                    tried = True
                    folded = _fold(op, srcs)
                    if folded is not None:
                        return folded
            elif (op is _NEG or op is BinaryOps.MUL) and b.srcs:
                folded = _fold_negations(op, srcs)
                if folded is not None:
                    return folded
        if consts == len(srcs):
            folded = _fold_consts(op, srcs, out_dtype)
            if folded is not None:
                return folded
        return new_base(self.device, contiguous_st(self.shape), out_dtype, op, arg, srcs)

    def r(self, op, axis):
        """Reduce over `axis`; the reduced dims stay, with size 1."""
        axis = tuple(sorted(set(axis)))
        new_shape = tuple(1 if i in axis else s for i, s in enumerate(self.shape))
        if any(self.shape[a] == 0 for a in axis if isinstance(self.shape[a], int)):
            identity = {ReduceOps.SUM: 0, ReduceOps.PROD: 1}.get(op, dtypes.min(self.dtype))
            return self.const(identity, new_shape)
        if all(self.shape[a] == 1 for a in axis if isinstance(self.shape[a], int)) and \
                all(isinstance(self.shape[a], int) for a in axis):
            return self.reshape(new_shape)
        folded = _fold_reduce(self, op, axis, new_shape)
        if folded is not None:
            return folded
        return new_base(self.device, contiguous_st(new_shape), self.dtype, op, axis, (self,))

    # ---- movement ops: zero-copy views through the ShapeTracker ----
    cpdef LazyBuffer _view(self, ShapeTracker new_st):
        cdef LazyBuffer base = self._base if self._base is not None else self
        if new_st.contiguous and new_st.shape == base.shape:
            return base
        return new_view(base, new_st)

    cpdef LazyBuffer reshape(self, tuple new_shape):
        return self if new_shape == self.shape else self._view(self.st.reshape(new_shape))

    def pad(self, arg):
        return self if all(p == (0, 0) for p in arg) else self._view(self.st.pad(tuple(arg)))

    cpdef LazyBuffer expand(self, tuple new_shape):
        return self if new_shape == self.shape else self._view(self.st.expand(new_shape))

    def permute(self, arg):
        return self if tuple(arg) == tuple(range(len(arg))) else self._view(self.st.permute(tuple(arg)))

    def shrink(self, arg):
        return self if all(a == (0, s) for a, s in zip(arg, self.shape)) else self._view(self.st.shrink(tuple(arg)))

    def stride(self, arg):
        return self if all(a == 1 for a in arg) else self._view(self.st.stride(tuple(arg)))


# ---- constant folding: ops whose result is known without running a kernel ----
cdef object _const_value(LazyBuffer s):
    """The value of `s` when it is a constant everywhere (an unrealized CONST read through unmasked views), else
    None."""
    cdef LazyBuffer b = s._base if s._base is not None else s
    if b.op is not _CONST or b._buffer is not None or b.kept:
        return None
    for v in s.st.views:
        if v.mask is not None:
            return None
    val = b.arg
    return val if type(val) is int or type(val) is float or type(val) is bool else None


cdef inline bint _is_zero(object v):
    # +0 only: x - (-0.0) is x + 0.0, which turns -0.0 into +0.0
    return v == 0 and not (type(v) is float and np.copysign(1.0, v) < 0)


cdef inline bint _may_fold(object op, object v):
    """Whether _fold has a rule for `op` with a constant operand `v`: 0 for add/sub/or/xor, 0 or 1 for mul, 1 for
    div, any value for and (bools) and where (its condition)."""
    if op is _WHERE or op is BinaryOps.AND:
        return True
    t = type(v)
    if not (t is float or t is int or t is bool):
        return False
    if op is BinaryOps.MUL:
        return v == 0 or v == 1
    if op is BinaryOps.DIV:
        return v == 1
    return v == 0


cdef object _fold(object op, tuple srcs):
    """The result of elementwise `op` on `srcs` when it needs no kernel, else None. Only exact rewrites: x*0 is
    not 0 for a float x that is NaN or infinite, and x+0 is not x for x = -0.0, so those fold for ints and bools
    only."""
    vals = [_const_value(s) for s in srcs]
    dt = srcs[0].dtype
    if op is _WHERE:
        if vals[0] is not None:
            return srcs[1] if vals[0] else srcs[2]
        return None
    # NOTE: an op on constants alone is left to a kernel, which inlines them (the seed walkthrough shows 2 + 3
    # compiled that way): it is one tiny kernel, and its result needs a buffer anyway when it is realized
    if len(srcs) != 2:
        return None
    a, b = vals
    exact = not _is_float(dt)  # ints and bools: no NaN, no signed zero
    if op is BinaryOps.MUL:
        for c, x in ((b, srcs[0]), (a, srcs[1])):
            if c is not None and c == 1:
                return x
            if c is not None and c == 0 and exact:
                return x.const(0)
    elif op is BinaryOps.ADD or op is BinaryOps.OR or op is BinaryOps.XOR:
        for c, x in ((b, srcs[0]), (a, srcs[1])):
            if c is not None and c == 0 and (exact or op is not BinaryOps.ADD):
                return x
    elif op is BinaryOps.SUB:
        if b is not None and _is_zero(b):
            return srcs[0]
    elif op is BinaryOps.DIV:
        if b is not None and b == 1:
            return srcs[0]
    elif op is BinaryOps.AND and dt is dtypes.bool:
        for c, x in ((b, srcs[0]), (a, srcs[1])):
            if c is not None:
                return x if c else x.const(False)
    return None


cdef LazyBuffer _const_of(str device, object dtype, object val, tuple shp):
    """Constant `val` of `dtype` on `device` that folding computed, broadcast to `shp`."""
    c = new_base(device, contiguous_st(()), dtype, _CONST, dtypes.as_const(val, dtype), ())
    c.folded = True
    if not shp:
        return c
    if not _concrete(shp):
        return c.reshape((1,) * len(shp)).expand(shp)
    return new_view(c, broadcast_st(shp))


cdef object _fold_consts(object op, tuple srcs, object out_dtype):
    """An elementwise op on constants alone as the constant it computes (see const_fold), else None."""
    vals = [_const_value(s) for s in srcs]
    if any(v is None for v in vals) or op is _WHERE:
        return None
    cdef LazyBuffer s0 = srcs[0]
    val = _const_evaluate(op, vals, s0.dtype)
    if val is None:
        return None
    return _const_of(s0.device, out_dtype, val, s0.shape)


cdef object _negated(LazyBuffer s):
    """x when `s` is an unrealized -x (a NEG, or a multiplication by the constant -1) read whole, else None."""
    if s._base is not None or len(s.srcs) == 0:  # a view, or realized (its sources are dropped then)
        return None
    if s.op is _NEG:
        return s.srcs[0]
    if s.op is BinaryOps.MUL:
        for k in range(2):
            c = _const_value(s.srcs[k])
            if c is not None and type(c) is not bool and c == -1:
                return s.srcs[1 - k]
    return None


cdef object _fold_negations(object op, tuple srcs):
    """-(-x) as x: a NEG of a negation, or a negation times the constant -1 (exact: negating twice gives x back)."""
    if op is _NEG:
        return _negated(srcs[0])
    for k in range(2):
        c = _const_value(srcs[1 - k])
        if c is not None and type(c) is not bool and c == -1:
            return _negated(srcs[k])
    return None


cdef object _fold_cast(LazyBuffer x, object dtype):
    """A cast of a constant as the constant of the new dtype; a cast of a padded or otherwise masked view of one as
    that view of the cast constant (the padding's 0 casts to 0) when the new dtype is no wider, else None."""
    cdef LazyBuffer b = x._base if x._base is not None else x
    if b.op is not _CONST or b._buffer is not None or b.kept:
        return None
    val = _const_cast(b.arg, b.dtype, dtype)
    if val is None:
        return None
    if _const_value(x) is not None:
        return _const_of(b.device, dtype, val, x.shape)
    if dtype.itemsize > x.dtype.itemsize or b.shape != ():
        return None
    return (<LazyBuffer>_const_of(b.device, dtype, val, ()))._view(x.st)


cdef object _fold_reduce(LazyBuffer x, object op, tuple axis, tuple new_shape):
    """A sum or max of a constant read whole as a constant: the max is the value, the sum the value times the count."""
    val = _const_value(x)
    if val is None or not _concrete(x.shape) or not (op is ReduceOps.SUM or op is ReduceOps.MAX):
        return None
    if op is ReduceOps.MAX:
        out = val
    else:
        count = 1
        for a in axis:
            count *= x.shape[a]
        out = _const_sum(val, count, x.dtype)
        if out is None:
            return None
    return _const_of(x.device, x.dtype, out, new_shape)


cdef object _disk_view(LazyBuffer lb, object dtype):
    """The bytes `lb` reads, as a realized DISK base of `dtype` over the same memory, when it reads one contiguous
    range of a realized DISK buffer (and the last dim holds whole values of `dtype`); else None."""
    cdef LazyBuffer base = lb.base
    if base.realized is None or len(lb.st.views) != 1:
        return None
    v = lb.st.views[0]
    if v.mask is not None or not all(type(x) is int for x in (*v.shape, *v.strides, v.offset)):
        return None
    acc = 1
    for s, stride in zip(reversed(v.shape), reversed(v.strides)):
        if s != 1 and stride != acc:
            return None
        acc *= s
    isz = lb.dtype.itemsize
    start, nbytes = v.offset * isz, acc * isz
    shape = lb.shape
    if dtype.itemsize != isz:
        last = shape[len(shape) - 1] * isz if shape else isz
        if last % dtype.itemsize:
            return None
        shape = (shape[:len(shape) - 1] if shape else ()) + (last // dtype.itemsize,)
    ret = new_base(lb.device, contiguous_st(tuple(shape)), dtype, LoadOps.EMPTY, None, ())
    ret.buffer = Buffer(lb.device, nbytes // dtype.itemsize, dtype, opaque=base.buffer._buf[start:start + nbytes])
    return ret


def _reads_shifted(LazyBuffer x, LazyBuffer target, object write_st):
    """Whether computing `x` elementwise reads `target` at other positions than the one being written (through a
    permute, pad, expand, ... or a reduce), which an in-place write would corrupt. `write_st` is the view written
    through (None: the whole buffer, contiguously); through a view, only a read of `x`'s own node through that
    same view is safe."""
    def fused_srcs(b):
        # the bases computed in the same kernel as b (realized, inlined and separately stored ones are not)
        return [s.base for s in b.srcs if s.base.realized is None and s.base.op not in (_CONST, _IOTA) and
                s.base.op not in (_CONTIGUOUS, _COPY)]
    reaches = {}
    for b in toposort(x.base, fused_srcs):
        hit = False
        for s in b.srcs:
            if not (s.base is target or reaches.get(id(s.base), False)):
                continue
            if isinstance(b.op, ReduceOps):
                return True
            if write_st is None:
                if not (s.st.contiguous and s.size == s.base.size):
                    return True
            elif not (s.base is target and b is x and s.st == write_st):
                return True
            hit = True
        reaches[id(b)] = hit
    return False


cdef bint _aliases(ShapeTracker st):
    """Whether two indices of `st` can reach one element (a dim of stride 0 that spans more than one element):
    writing through such a view would have several values race for one place."""
    for v in st.views:
        for d, (n, stride) in enumerate(zip(v.shape, v.strides)):
            if stride != 0 or (type(n) is int and n <= 1):
                continue
            if v.mask is not None and type(v.mask[d][0]) is int and type(v.mask[d][1]) is int and \
                    v.mask[d][1] - v.mask[d][0] <= 1:
                continue
            return True
    return False


cdef LazyBuffer _assign_view(LazyBuffer view, LazyBuffer x, LazyBuffer target):
    """An ASSIGN that stores `x` through `view`'s tracker into `target`'s buffer (its `arg`: the tracker written
    through), returned as the same view of the result: the target's other elements keep their values."""
    if _aliases(view.st):
        raise ArgumentError(f"can't assign to an expanded view {view.shape}: several of its elements are one element "
                         f"of the buffer (assign to the tensor before the expand)")
    if x.size != view.size:
        raise ArgumentError(f"assign size mismatch: {x.shape} into a view of shape {view.shape}")
    if _reads_shifted(x, target, view.st):
        x = new_base(x.device, contiguous_st(x.shape), x.dtype, _CONTIGUOUS, None, (x,))
    cdef LazyBuffer ret = LazyBuffer.__new__(LazyBuffer)
    ret.device, ret.st, ret.dtype, ret.shape, ret.size = target.device, target.st, target.dtype, target.shape, \
        target.size
    ret._base = None
    ret.op, ret.arg, ret.srcs = LoadOps.ASSIGN, view.st, (x, target)
    ret.buffer, ret.pending, ret.forced_realize = target.buffer, True, False
    return new_view(ret, view.st)

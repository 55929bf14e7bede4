"""LazyBuffer: a Tensor without derivatives. Ops on it build a graph; nothing runs until the graph is scheduled.

A LazyBuffer is either a *base*, which owns an op (`op`, `srcs`, `arg`) and, once realized, a Buffer; or a *view*
of a base through a ShapeTracker (`st`), which is how every movement op is expressed without copying.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tinygrad.device import Buffer
from tinygrad.dtype import ConstType, DType, dtypes
from tinygrad.helpers import toposort
from tinygrad.ops import BinaryOps, LoadOps, Op, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.shapetracker import ShapeTracker
from tinygrad.shape.symbolic import sint

_CMP_OPS = (BinaryOps.CMPLT, BinaryOps.CMPEQ, BinaryOps.CMPNE)
_INLINED = (LoadOps.CONST, LoadOps.IOTA)


class LazyBuffer:
    """One node of the lazy graph; see the module docstring. Build them with the factories, not the constructor."""

    def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Op | None = None, arg: Any = None,
                 srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None):
        self.device, self.st, self.dtype = device, st, dtype
        self.shape: tuple[sint, ...] = st.shape
        self.size: sint = st.size
        self._base = base
        if base is None:
            self.op, self.arg, self.srcs = op, arg, srcs
            # consts never get memory of their own: kernels inline them
            # a symbolic size gets room for the largest value its variables allow
            self.buffer: Buffer | None = None if op is LoadOps.CONST else \
                Buffer(device, self.size if isinstance(self.size, int) else self.size.max, dtype)
            self.forced_realize = False
            # set while an ASSIGN's kernel has not run: its (shared) buffer is allocated but not yet written
            self.pending = False
        else:
            if base._base is not None:
                raise RuntimeError("a view's base must be a base")
            self.op, self.arg, self.srcs, self.buffer = None, None, (), None

    # ---- identity ----
    @property
    def base(self) -> LazyBuffer:
        return self._base if self._base is not None else self

    @property
    def realized(self) -> Buffer | None:
        """The Buffer holding this base's data once it has been computed; None for views and unrealized bases."""
        if self._base is not None or self.buffer is None or self.pending or not self.buffer.is_allocated():
            return None
        return self.buffer

    def __repr__(self) -> str:
        what = f"{self.op}" if self._base is None else f"view of {self.base.op}"
        return f"<LB {self.device} {self.shape} {str(self.dtype)[7:]} {what} st={self.st}>"

    def is_unrealized_const(self) -> bool:
        return self.base.realized is None and self.base.op is LoadOps.CONST

    def is_inlined(self) -> bool:
        """Whether this is a constant or an iota: a value kernels compute in place, with no buffer behind it."""
        return self.base.realized is None and self.base.op in _INLINED

    # ---- factories ----
    @staticmethod
    def loadop(op: LoadOps, shape: tuple[sint, ...], dtype: DType, device: str, arg: Any = None,
               srcs: tuple[LazyBuffer, ...] = ()) -> LazyBuffer:
        return LazyBuffer(device, ShapeTracker.from_shape(tuple(shape)), dtype, op, arg, srcs)

    @staticmethod
    def fromcpu(x: np.ndarray) -> LazyBuffer:
        """A realized LazyBuffer on the CPU device holding (a contiguous copy of) numpy array `x`."""
        # NOTE: not np.ascontiguousarray, which makes 0-d arrays 1-d
        x = np.asarray(x)
        if not x.flags.c_contiguous:
            x = x.copy(order="C")
        ret = LazyBuffer("CPU", ShapeTracker.from_shape(x.shape), dtypes.from_np(x.dtype), LoadOps.EMPTY)
        ret.buffer = Buffer("CPU", x.size, ret.dtype, opaque=x.reshape(-1))
        return ret

    def const(self, val: ConstType, shape: tuple[sint, ...] | None = None) -> LazyBuffer:
        """A constant with this buffer's dtype and device, broadcast to `shape` (default: this shape)."""
        shape = self.shape if shape is None else shape
        c = LazyBuffer.loadop(LoadOps.CONST, (), self.dtype, self.device, arg=dtypes.as_const(val, self.dtype))
        return c.reshape((1,) * len(shape)).expand(shape) if shape else c

    # ---- the graph's ops ----
    def contiguous(self) -> LazyBuffer:
        """This data laid out contiguously in a buffer of its own (a no-op when it already is)."""
        if not self.is_inlined() and self.st.contiguous and self.size == self.base.size:
            # already laid out contiguously: make sure it gets a buffer of its own instead of being fused away
            if self.base.realized is None:
                self.base.forced_realize = True
            return self
        return LazyBuffer.loadop(LoadOps.CONTIGUOUS, self.shape, self.dtype, self.device, srcs=(self,))

    def assign(self, x: LazyBuffer) -> LazyBuffer:
        """`x`, computed straight into this buffer's memory when this is a realized, contiguous buffer (so kernels
        captured by the JIT keep seeing it); otherwise simply `x`."""
        target = self.base
        if x.base is target or target.realized is None or target.op is LoadOps.CONST or \
                not (self.st.contiguous and self.size == target.size):
            return x
        if _reads_shifted(x, target):
            # writing in place while reading other elements of the same memory: compute into a temporary first
            x = LazyBuffer.loadop(LoadOps.CONTIGUOUS, x.shape, x.dtype, x.device, srcs=(x,))
        ret = LazyBuffer(self.device, ShapeTracker.from_shape(self.shape), self.dtype, LoadOps.ASSIGN, None,
                         (x, target))
        ret.buffer, ret.pending = target.buffer, True
        return ret

    def cast(self, dtype: DType, bitcast: bool = False) -> LazyBuffer:
        if self.dtype == dtype:
            return self
        if bitcast and dtype.itemsize != self.dtype.itemsize:
            raise ValueError(f"can't bitcast {self.dtype} to {dtype}: sizes differ")
        op = UnaryOps.BITCAST if bitcast else UnaryOps.CAST
        return self._elementwise(op, (self,), dtype, arg=(dtype, bitcast))

    def copy_to_device(self, device: str) -> LazyBuffer:
        if device == self.device:
            return self
        if self.is_unrealized_const() and all(v.mask is None for v in self.st.views):
            # an unmasked constant is the same constant on any device: nothing to copy
            return LazyBuffer.loadop(LoadOps.CONST, (), self.dtype, device, arg=self.base.arg) \
                .reshape((1,) * len(self.shape)).expand(self.shape)
        src = self.contiguous()
        return LazyBuffer.loadop(LoadOps.COPY, src.shape, src.dtype, device, arg=src.size * src.dtype.itemsize,
                                 srcs=(src,))

    def e(self, op: UnaryOps | BinaryOps | TernaryOps, *in_srcs: LazyBuffer, arg: Any = None) -> LazyBuffer:
        """An elementwise op on this buffer and `in_srcs` (same shape and device; dtypes as the op needs)."""
        srcs = (self,) + in_srcs
        for s in srcs:
            if s.shape != self.shape:
                raise ValueError(f"{op} needs equal shapes, got {[x.shape for x in srcs]}")
            if s.device != self.device:
                raise RuntimeError(f"{op} mixes devices {[x.device for x in srcs]}")
        if op is TernaryOps.WHERE:
            if srcs[1].dtype != srcs[2].dtype:
                raise TypeError(f"where needs equal value dtypes, got {srcs[1].dtype} and {srcs[2].dtype}")
            out_dtype = srcs[1].dtype
        else:
            if any(s.dtype != self.dtype for s in srcs):
                raise TypeError(f"{op} needs equal dtypes, got {[s.dtype for s in srcs]}")
            out_dtype = dtypes.bool if op in _CMP_OPS else self.dtype
        return self._elementwise(op, srcs, out_dtype, arg)

    def _elementwise(self, op: Op, srcs: tuple[LazyBuffer, ...], dtype: DType, arg: Any = None) -> LazyBuffer:
        return LazyBuffer(self.device, ShapeTracker.from_shape(self.shape), dtype, op, arg, srcs)

    def r(self, op: ReduceOps, axis: tuple[int, ...]) -> LazyBuffer:
        """Reduce over `axis`; the reduced dims stay, with size 1."""
        axis = tuple(sorted(set(axis)))
        new_shape = tuple(1 if i in axis else s for i, s in enumerate(self.shape))
        if any(self.shape[a] == 0 for a in axis if isinstance(self.shape[a], int)):
            identity = {ReduceOps.SUM: 0, ReduceOps.PROD: 1}.get(op, dtypes.min(self.dtype))
            return self.const(identity, new_shape)
        if all(self.shape[a] == 1 for a in axis if isinstance(self.shape[a], int)) and \
                all(isinstance(self.shape[a], int) for a in axis):
            return self.reshape(new_shape)
        return LazyBuffer(self.device, ShapeTracker.from_shape(new_shape), self.dtype, op, axis, (self,))

    # ---- movement ops: zero-copy views through the ShapeTracker ----
    def _view(self, new_st: ShapeTracker) -> LazyBuffer:
        if new_st.contiguous and new_st.shape == self.base.shape:
            return self.base
        return LazyBuffer(self.device, new_st, self.dtype, base=self.base)

    def reshape(self, new_shape: tuple[sint, ...]) -> LazyBuffer:
        return self if new_shape == self.shape else self._view(self.st.reshape(tuple(new_shape)))

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        return self if all(p == (0, 0) for p in arg) else self._view(self.st.pad(tuple(arg)))

    def expand(self, new_shape: tuple[sint, ...]) -> LazyBuffer:
        return self if new_shape == self.shape else self._view(self.st.expand(tuple(new_shape)))

    def permute(self, arg: tuple[int, ...]) -> LazyBuffer:
        return self if tuple(arg) == tuple(range(len(arg))) else self._view(self.st.permute(tuple(arg)))

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        return self if all(a == (0, s) for a, s in zip(arg, self.shape)) else self._view(self.st.shrink(tuple(arg)))

    def stride(self, arg: tuple[int, ...]) -> LazyBuffer:
        return self if all(a == 1 for a in arg) else self._view(self.st.stride(tuple(arg)))


def _reads_shifted(x: LazyBuffer, target: LazyBuffer) -> bool:
    """Whether computing `x` elementwise reads `target` at other positions than the one being written (through a
    permute, pad, expand, ... or a reduce), which an in-place write would corrupt."""
    def fused_srcs(b: LazyBuffer) -> list[LazyBuffer]:
        # the bases computed in the same kernel as b (realized, inlined and separately stored ones are not)
        return [s.base for s in b.srcs if s.base.realized is None and s.base.op not in _INLINED and
                s.base.op not in (LoadOps.CONTIGUOUS, LoadOps.COPY)]
    reaches: dict[int, bool] = {}
    for b in toposort(x.base, fused_srcs):
        hit = False
        for s in b.srcs:
            if not (s.base is target or reaches.get(id(s.base), False)):
                continue
            if not (s.st.contiguous and s.size == s.base.size) or isinstance(b.op, ReduceOps):
                return True
            hit = True
        reaches[id(b)] = hit
    return False

"""Reductions: sums, maxima, statistics and the softmax family, over any axes.

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `type(self)` so subclasses stay subclasses.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import tinygrad.mlops as F
from tinygrad.dtype import DType, dtypes, least_upper_float
from tinygrad.helpers import prod

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor


class ReduceMixin:
    __slots__ = ()

    def _axes(self, axis) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        return tuple(self._resolve_dim(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))

    def _reduce(self, fxn: type[F.Function], axis=None, keepdim: bool = False) -> Tensor:
        axes = self._axes(axis)
        ret = fxn.apply(self, axis=axes) if axes else self
        return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis=None, keepdim: bool = False, acc_dtype: DType | None = None) -> Tensor:
        # small ints accumulate in int32, bools count as ints, as PyTorch does
        dt = acc_dtype or (dtypes.int32 if self.dtype == dtypes.bool or
                           (dtypes.is_int(self.dtype) and self.dtype.itemsize < 4 and not
                            dtypes.is_unsigned(self.dtype)) else
                           dtypes.uint32 if dtypes.is_unsigned(self.dtype) and self.dtype.itemsize < 4 else self.dtype)
        return self.cast(dt)._reduce(F.Sum, axis, keepdim)

    def max(self, axis=None, keepdim: bool = False) -> Tensor:
        return self._reduce(F.Max, axis, keepdim)

    def min(self, axis=None, keepdim: bool = False) -> Tensor:
        if dtypes.is_int(self.dtype) or self.dtype == dtypes.bool:
            return ~((~self).max(axis=axis, keepdim=keepdim))
        return -((-self).max(axis=axis, keepdim=keepdim))

    def mean(self, axis=None, keepdim: bool = False) -> Tensor:
        out_dtype = least_upper_float(self.dtype)
        n = prod(s for i, s in enumerate(self.shape) if i in self._axes(axis))
        s = self.cast(out_dtype).sum(axis=axis, keepdim=keepdim)
        return s * math.nan if isinstance(n, int) and n == 0 else s.div(n)

    def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
        sq = (self - self.mean(axis=axis, keepdim=True)).square()
        n = prod(s for i, s in enumerate(self.shape) if i in self._axes(axis))
        den = n - correction
        return sq.sum(axis=axis, keepdim=keepdim).div(max(0, den) if isinstance(den, int) else den)

    def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    def _softmax(self, axis) -> tuple[Tensor, Tensor, Tensor]:
        m = self - self.max(axis=axis, keepdim=True)
        e = m.exp()
        return m, e, e.sum(axis=axis, keepdim=True)

    def softmax(self, axis: int = -1) -> Tensor:
        _, e, ss = self._softmax(axis)
        return e.div(ss)

    def log_softmax(self, axis: int = -1) -> Tensor:
        m, _, ss = self._softmax(axis)
        return m - ss.log()

    def logsumexp(self, axis=None, keepdim: bool = False) -> Tensor:
        m = self.max(axis=axis, keepdim=True)
        return (self - m).exp().sum(axis=axis, keepdim=True).log().add(m).reshape(
            self.sum(axis=axis, keepdim=keepdim).shape)

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        if axis is None:
            return self.flatten().argmax(0)
        axis = self._resolve_dim(axis)
        n = self.shape[axis]
        is_max = self == self.max(axis=axis, keepdim=True)
        # the first index that holds the max: largest value of (n - index) among the hits
        rev = type(self).arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - axis - 1))
        return (n - (is_max * rev).max(axis=axis, keepdim=keepdim)).cast(dtypes.int32)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        return (-self).argmax(axis=axis, keepdim=keepdim)

    def _cumsum(self) -> Tensor:
        """Inclusive cumulative sum of a 1-d tensor, as one reduce over a lower-triangular view."""
        n = self.shape[0]
        # pad to 2n-1, view as n overlapping windows of length n, and sum each window
        x = self.pad(((n - 1, 0),))
        win = x.reshape(1, 2 * n - 1).expand(n + 1, 2 * n - 1).reshape(-1)[:(n + 1) * (2 * n - 2)]
        win = win.reshape(n + 1, 2 * n - 2)[1:, :n] if n > 1 else x.reshape(1, 1)
        return win.sum(axis=-1)

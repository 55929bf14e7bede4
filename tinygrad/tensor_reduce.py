"""Reductions: sums, products, maxima, statistics, the softmax family and cumulative scans, over any axes.

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `type(self)` so subclasses stay subclasses.

Result dtypes follow PyTorch: sums, products and cumulative sums/products of bool and int tensors are int64
(uint64 stays uint64); half and bfloat16 accumulate in float32 and are cast back; `mean`, `var`, `std` and the
softmax family compute in a float dtype.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import tinygrad.mlops as F
from tinygrad.dtype import DType, dtypes, least_upper_float
from tinygrad.errors import ArgumentError
from tinygrad.helpers import prod
from tinygrad.ops import ReduceOps

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor

# a scan over up to _CUM_SPLIT elements is one reduce over a triangular window (n*n work); a longer one scans
# blocks of _CUM_BLOCK and then the blocks' totals, which keeps the work near n*_CUM_BLOCK
_CUM_SPLIT = 512
_CUM_BLOCK = 256


def _acc_dtype(dt: DType) -> DType:
    """The dtype a sum or product of `dt` accumulates in (PyTorch's: int64 for bool and ints)."""
    hit = _ACC.get(dt)
    if hit is not None:
        return hit
    if dt == dtypes.bool or (dtypes.is_int(dt) and dt != dtypes.uint64):
        return dtypes.int64
    if dt in (dtypes.float16, dtypes.bfloat16):
        return dtypes.float32
    return dt


def _out_dtype(dt: DType) -> DType:
    """The dtype of a sum or product of `dt`: half and bfloat16 come back as themselves."""
    return dt if dt in (dtypes.float16, dtypes.bfloat16) else _acc_dtype(dt)


# every reduction asks: the answers for the common dtypes, looked up instead of worked out
_ACC: dict[DType, DType] = {}
_ACC.update({dt: _acc_dtype(dt) for dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64,
                                           dtypes.int32, dtypes.int64, dtypes.bool)})


class ReduceMixin:
    __slots__ = ()

    # ---- axis handling ----
    def _axes(self, axis) -> tuple[int, ...]:
        """`axis` (None, an int or a sequence of ints, negative allowed) as sorted non-negative dims."""
        if axis is None:
            return tuple(range(self.ndim))
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        for a in axes:
            if not isinstance(a, int) or isinstance(a, bool):
                raise TypeError(f"axis must be an int or a sequence of ints, got {axis!r}")
        if self.ndim == 0:
            # a 0-d tensor accepts dims 0 and -1, as PyTorch does, and there is nothing to reduce
            if any(a not in (0, -1) for a in axes):
                raise IndexError(f"dimension {axis} out of range for a 0-d tensor")
            return ()
        resolved = tuple(self._resolve_dim(a) for a in axes)
        if len(set(resolved)) != len(resolved):
            raise ArgumentError(f"axis {axis} names a dim more than once for a tensor of shape {self.shape}")
        return tuple(sorted(resolved))

    def _reduce(self, fxn: type[F.Function], axis=None, keepdim: bool = False) -> Tensor:
        axes = self._axes(axis)
        ret = fxn.apply(self, axis=axes) if axes else self
        return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def _check_nonempty(self, name: str, axis) -> None:
        """Max-like reductions have no identity: reducing over a zero-size dim raises, as PyTorch does."""
        empty = [a for a in self._axes(axis) if isinstance(self.shape[a], int) and self.shape[a] == 0]
        if empty:
            raise IndexError(f"{name}(): can't reduce over dim {empty[0]} of size 0 (shape {self.shape}); "
                             "this reduction has no identity")

    def _order_flip(self) -> Tensor:
        """An order-reversing map: -x for floats, ~x for ints and bools (which can't overflow)."""
        return -self if dtypes.is_float(self.dtype) else ~self

    # ---- sums and products ----
    def sum(self, axis=None, keepdim: bool = False, acc_dtype: DType | None = None) -> Tensor:
        """Sum over `axis` (None: all). Accumulates in `acc_dtype` and returns it, else in PyTorch's dtype."""
        lb = self.lazydata
        if axis is None and acc_dtype is None and not keepdim and not self.requires_grad and \
                (lb.dtype is dtypes.float32 or lb.dtype is dtypes.float64) and lb.shape and \
                all(type(s) is int for s in lb.shape) and not str(lb.device).startswith("DISK"):
            # the whole-tensor sum of eager code, built straight on the LazyBuffer: no gradient to record (a DISK
            # tensor takes the Function's path, which reads it off its file: see mlops.apply)
            ret = object.__new__(type(self))
            ret.lazydata = lb.r(ReduceOps.SUM, tuple(range(len(lb.shape)))).reshape(())
            ret.requires_grad, ret.grad, ret._ctx = self.requires_grad, None, None
            return ret
        if acc_dtype is not None:
            return self.cast(acc_dtype)._reduce(F.Sum, axis, keepdim)
        return self.cast(_acc_dtype(self.dtype))._reduce(F.Sum, axis, keepdim).cast(_out_dtype(self.dtype))

    def prod(self, axis=None, keepdim: bool = False, acc_dtype: DType | None = None) -> Tensor:
        """Product over `axis` (None: all); its gradient is exact when the input holds zeros."""
        if acc_dtype is not None:
            return self.cast(acc_dtype)._reduce(F.Prod, axis, keepdim)
        return self.cast(_acc_dtype(self.dtype))._reduce(F.Prod, axis, keepdim).cast(_out_dtype(self.dtype))

    # ---- extremes ----
    def max(self, axis=None, keepdim: bool = False) -> Tensor:
        """Largest value over `axis`; the gradient is shared evenly by ties (PyTorch's amax)."""
        self._check_nonempty("max", axis)
        return self._reduce(F.Max, axis, keepdim)

    def min(self, axis=None, keepdim: bool = False) -> Tensor:
        """Smallest value over `axis`; the gradient is shared evenly by ties (PyTorch's amin)."""
        self._check_nonempty("min", axis)
        return self._order_flip()._reduce(F.Max, axis, keepdim)._order_flip()

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index (int32) of the first largest value along `axis`; None: in the flattened tensor. NaN counts as
        the largest, as in PyTorch."""
        x = self.detach()
        if axis is None:
            ret = x.reshape(-1).argmax(0)
            return ret.reshape((1,) * self.ndim) if keepdim else ret
        if self.ndim == 0:
            x = x.reshape(1)
        axis = x._resolve_dim(axis)
        x._check_nonempty("argmax", axis)
        n = x.shape[axis]
        hit = x == x.max(axis=axis, keepdim=True)
        if dtypes.is_float(x.dtype):
            hit = hit | (x != x)
        # the first hit is the one with the largest (n - index)
        rev = type(self).arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (x.ndim - axis - 1))
        ret = (n - (hit * rev).max(axis=axis, keepdim=keepdim)).cast(dtypes.int32)
        return ret.reshape(()) if self.ndim == 0 else ret

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index (int32) of the first smallest value along `axis`; None: in the flattened tensor."""
        return self.detach()._order_flip().argmax(axis=axis, keepdim=keepdim)

    def any(self, axis=None, keepdim: bool = False) -> Tensor:
        """Whether any element over `axis` is nonzero (False for an empty reduction)."""
        return self.detach().bool()._reduce(F.Max, axis, keepdim)

    def all(self, axis=None, keepdim: bool = False) -> Tensor:
        """Whether every element over `axis` is nonzero (True for an empty reduction)."""
        return self.detach().bool().logical_not().any(axis, keepdim).logical_not()

    # ---- statistics ----
    def mean(self, axis=None, keepdim: bool = False) -> Tensor:
        """Mean over `axis` in a float dtype; nan for an empty reduction."""
        out_dtype = least_upper_float(self.dtype)
        n = prod(self.shape[a] for a in self._axes(axis))
        s = self.sum(axis=axis, keepdim=keepdim, acc_dtype=_acc_dtype(out_dtype))
        ret = s * math.nan if isinstance(n, int) and n == 0 else s.div(n)
        return ret.cast(out_dtype)

    def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
        """Variance over `axis`, dividing by max(0, n - correction) (Bessel's correction by default)."""
        x = self.cast(least_upper_float(self.dtype))
        sq = (x - x.mean(axis=axis, keepdim=True)).square()
        n = prod(self.shape[a] for a in self._axes(axis))
        den = n - correction
        return sq.sum(axis=axis, keepdim=keepdim).div(max(0, den) if isinstance(den, int) else den)

    def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
        """Standard deviation over `axis`: the square root of `var`."""
        return self.var(axis, keepdim, correction).sqrt()

    # ---- the softmax family ----
    def _shifted(self, axis) -> tuple[Tensor, Tensor]:
        """(x - max, max) along `axis` in a float dtype. The max is detached: the results don't depend on it."""
        x = self.cast(least_upper_float(self.dtype))
        m = x.detach()._reduce(F.Max, axis, keepdim=True)
        return x - m, m

    def softmax(self, axis: int = -1) -> Tensor:
        """exp(x) / sum(exp(x)) along `axis`, shifted by the max so large inputs don't overflow."""
        x = self.cast(least_upper_float(self.dtype))
        m, _ = x.detach()._shifted(axis)
        e = m.exp()
        p = e.div(e.sum(axis=axis, keepdim=True))
        # the backward from p alone (mlops.SoftmaxOut says why): x is not kept for it
        return p if x.requires_grad is False else F.SoftmaxOut.apply(x, p, axis=self._axes(axis))

    def log_softmax(self, axis: int = -1) -> Tensor:
        """log(softmax(x)) along `axis`, computed as (x - max) - log(sum(exp(x - max)))."""
        m, _ = self._shifted(axis)
        return m - m.exp().sum(axis=axis, keepdim=True).log()

    def logsumexp(self, axis=None, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) over `axis`; -inf for an empty reduction."""
        x = self.cast(least_upper_float(self.dtype))
        m = x.detach()._reduce(F.Max, axis, keepdim=True)
        # an infinite max (or the -inf of an empty reduction) would make x - m nan: shift by 0 instead
        m = ((m == math.inf) | (m == -math.inf)).where(0.0, m)
        ret = (x - m).exp().sum(axis=axis, keepdim=True).log() + m
        return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in self._axes(axis)))

    # ---- cumulative scans ----
    def _cum_window(self, fxn: type[F.Function], identity) -> Tensor:
        """Inclusive scan along the last axis as one reduce: pad n-1 identities in front, view the result as n
        overlapping windows of length n (window i holds elements 0..i and identities), and reduce each window."""
        n, lead = self.shape[-1], self.shape[:-1]
        if n == 1:
            return self
        length = 2 * n - 1
        x = self.pad((None,) * len(lead) + ((n - 1, 0),), value=identity)
        # repeat the row n+1 times and re-cut it into rows one longer: row i starts at element i
        x = x.unsqueeze(-2).expand(*lead, n + 1, length).reshape(*lead, (n + 1) * length)
        x = x.shrink((None,) * len(lead) + ((0, n * (length + 1)),)).reshape(*lead, n, length + 1)
        x = x.shrink((None,) * len(lead) + (None, (0, n)))
        return x._reduce(fxn, -1)

    def _cum_last(self, fxn: type[F.Function], identity, combine) -> Tensor:
        """Inclusive scan along the last axis; long axes go through blocks so the work stays near n*block."""
        n, lead = self.shape[-1], self.shape[:-1]
        if n <= _CUM_SPLIT:
            return self._cum_window(fxn, identity)
        nb = math.ceil(n / _CUM_BLOCK)
        x = self.pad((None,) * len(lead) + ((0, nb * _CUM_BLOCK - n),), value=identity)
        inner = x.reshape(*lead, nb, _CUM_BLOCK)._cum_window(fxn, identity)
        totals = inner.shrink((None,) * (len(lead) + 1) + ((_CUM_BLOCK - 1, _CUM_BLOCK),)).reshape(*lead, nb)
        # what the blocks before each block contribute: the scan of the totals, shifted by one block
        before = totals._cum_last(fxn, identity, combine).pad((None,) * len(lead) + ((1, 0),), value=identity)
        before = before.shrink((None,) * len(lead) + ((0, nb),)).unsqueeze(-1)
        ret = combine(inner, before).reshape(*lead, nb * _CUM_BLOCK)
        return ret.shrink((None,) * len(lead) + ((0, n),))

    def _scan(self, axis: int, fxn: type[F.Function], identity, combine) -> Tensor:
        """Inclusive scan along `axis` (dtype unchanged)."""
        if self.ndim == 0:
            return self
        axis = self._resolve_dim(axis)
        if 0 in self.shape:
            return self
        x = self.transpose(axis, -1) if axis != self.ndim - 1 else self
        ret = x._cum_last(fxn, identity, combine)
        return ret.transpose(axis, -1) if axis != self.ndim - 1 else ret

    def _cumsum(self, axis: int = 0) -> Tensor:
        """Inclusive cumulative sum along `axis` in this tensor's dtype."""
        return self._scan(axis, F.Sum, 0, lambda a, b: a + b)

    def cumsum(self, axis: int = 0) -> Tensor:
        """Inclusive cumulative sum along `axis`, fused (no loop over elements); ints and bools give int64."""
        return self.cast(_acc_dtype(self.dtype))._cumsum(axis).cast(_out_dtype(self.dtype))

    def cumprod(self, axis: int = 0) -> Tensor:
        """Inclusive cumulative product along `axis`; its gradient is exact with zeros."""
        x = self.cast(_acc_dtype(self.dtype))
        return x._scan(axis, F.Prod, 1, lambda a, b: a * b).cast(_out_dtype(self.dtype))

    def cummax(self, axis: int = 0) -> Tensor:
        """Running maximum along `axis` (the values of PyTorch's cummax; ties share the gradient)."""
        return self._scan(axis, F.Max, dtypes.min(self.dtype), lambda a, b: a.maximum(b))

    def cummin(self, axis: int = 0) -> Tensor:
        """Running minimum along `axis` (the values of PyTorch's cummin)."""
        return self._order_flip().cummax(axis)._order_flip()

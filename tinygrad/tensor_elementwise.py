"""Elementwise ops: math, activations, comparisons, casts, and broadcasting binary operators.

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `type(self)` so subclasses stay subclasses.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Union

import numpy as np

import tinygrad.mlops as F
from tinygrad.dtype import ConstType, DType, dtypes, least_upper_dtype, least_upper_float, to_dtype
from tinygrad.shape.symbolic import Node, sint

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor


TensorLike = Union["Tensor", ConstType]


def broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded):
        sizes = {d for d in dims if not (isinstance(d, int) and d == 1)}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} can't be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


class ElementwiseMixin:
    __slots__ = ()

    def neg(self) -> Tensor:
        return F.Neg.apply(self) if self.dtype != dtypes.bool else self.logical_not()

    def log(self) -> Tensor:
        return F.Log.apply(self.cast(least_upper_float(self.dtype)))

    def log2(self) -> Tensor:
        return self.log() / math.log(2)

    def exp(self) -> Tensor:
        return F.Exp.apply(self.cast(least_upper_float(self.dtype)))

    def exp2(self) -> Tensor:
        return F.Exp.apply(self.cast(least_upper_float(self.dtype)) * math.log(2))

    def sqrt(self) -> Tensor:
        return F.Sqrt.apply(self.cast(least_upper_float(self.dtype)))

    def rsqrt(self) -> Tensor:
        return self.reciprocal().sqrt()

    def sin(self) -> Tensor:
        return F.Sin.apply(self.cast(least_upper_float(self.dtype)))

    def cos(self) -> Tensor:
        return ((math.pi / 2) - self).sin()

    def tan(self) -> Tensor:
        return self.sin() / self.cos()

    def reciprocal(self) -> Tensor:
        return F.Reciprocal.apply(self.cast(least_upper_float(self.dtype)))

    def sigmoid(self) -> Tensor:
        return F.Sigmoid.apply(self.cast(least_upper_float(self.dtype)))

    def relu(self) -> Tensor:
        return F.Relu.apply(self)

    def leakyrelu(self, neg_slope: float = 0.01) -> Tensor:
        return self.relu() - (-neg_slope * self).relu()

    def tanh(self) -> Tensor:
        return 2.0 * ((2.0 * self).sigmoid()) - 1.0

    def gelu(self) -> Tensor:
        return 0.5 * self * (1 + (self * 0.7978845608 * (1 + 0.044715 * self * self)).tanh())

    def swish(self) -> Tensor:
        return self * self.sigmoid()

    def silu(self) -> Tensor:
        return self.swish()

    def abs(self) -> Tensor:
        return self.relu() + (-self).relu()

    def square(self) -> Tensor:
        return self * self

    def clip(self, min_, max_) -> Tensor:
        return self.maximum(min_).minimum(max_)

    def sign(self) -> Tensor:
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def logical_not(self) -> Tensor:
        return F.Eq.apply(*self._broadcasted(False))

    def __invert__(self) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"~ needs an int or bool tensor, not {self.dtype}")
        return self.xor(-1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))

    def cast(self, dtype: DType | str) -> Tensor:
        dtype = to_dtype(dtype)
        return self if self.dtype == dtype else F.Cast.apply(self, dtype=dtype)

    def bitcast(self, dtype: DType | str) -> Tensor:
        dtype = to_dtype(dtype)
        return self if self.dtype == dtype else F.Cast.apply(self, dtype=dtype, bitcast=True)

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    def _broadcasted(self, y: TensorLike, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
        x: Tensor = self
        if not isinstance(y, ElementwiseMixin):
            if isinstance(y, Node):
                y = type(self)(y, device=x.device, dtype=x.dtype if dtypes.is_float(x.dtype) else dtypes.int32,
                           requires_grad=False)
            elif not isinstance(y, (bool, int, float, np.generic)):
                raise TypeError(f"can't combine a Tensor with {type(y).__name__}")
        if not isinstance(y, ElementwiseMixin):
            y = y.item() if isinstance(y, np.generic) else y
            # a Python scalar takes the tensor's dtype unless it needs a wider kind (float into an int tensor)
            if dtypes.is_float(x.dtype) or (dtypes.is_int(x.dtype) and isinstance(y, int) and
                                            not isinstance(y, bool)) or (x.dtype == dtypes.bool and
                                                                         isinstance(y, bool)):
                y_dtype = x.dtype
            else:
                y_dtype = dtypes.from_py(y)
            y = type(self)(dtypes.as_const(y, y_dtype), device=x.device, dtype=y_dtype, requires_grad=False)
        if x.device != y.device:
            raise RuntimeError(f"tensors are on different devices: {x.device} and {y.device}")
        if match_dtype and x.dtype != y.dtype:
            out = least_upper_dtype(x.dtype, y.dtype)
            x, y = x.cast(out), y.cast(out)
        if reverse:
            x, y = y, x
        shape = broadcast_shape(x.shape, y.shape)
        return x.expand(shape), y.expand(shape)

    def add(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return F.Add.apply(*self._broadcasted(x, reverse))

    def sub(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return F.Sub.apply(*self._broadcasted(x, reverse))

    def mul(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return F.Mul.apply(*self._broadcasted(x, reverse))

    def div(self, x: TensorLike, reverse: bool = False, upcast: bool = True) -> Tensor:
        num, den = self._broadcasted(x, reverse)
        if upcast:
            num, den = num.cast(least_upper_float(num.dtype)), den.cast(least_upper_float(den.dtype))
        return F.Div.apply(num, den)

    def pow(self, x: TensorLike, reverse: bool = False) -> Tensor:
        if not isinstance(x, ElementwiseMixin) and not reverse:
            if x == 2:
                return self * self
            if x == 1:
                return self
            if x == 0.5:
                return self.sqrt()
            if x == -1:
                return self.reciprocal()
        base, exp = self._broadcasted(x, reverse)
        base, exp = base.cast(least_upper_float(base.dtype)), exp.cast(least_upper_float(exp.dtype))
        # |b|^e via exp/log, then the sign: negative bases give (-1)^e for integral e and nan otherwise
        mag = (base.abs().log() * exp).exp()
        integral = (exp - exp.trunc()) == 0
        half = exp.abs() * 0.5
        odd = integral & ((half - half.trunc()) != 0)
        signed = odd.where(-mag, mag)
        return (base < 0).where(integral.where(signed, math.nan), mag)

    def trunc(self) -> Tensor:
        return self.cast(dtypes.int64).cast(self.dtype) if dtypes.is_float(self.dtype) else self

    def maximum(self, x: TensorLike) -> Tensor:
        return F.Maximum.apply(*self._broadcasted(x))

    def minimum(self, x: TensorLike) -> Tensor:
        return -((-self).maximum(-x))

    def where(self, x: TensorLike, y: TensorLike) -> Tensor:
        if not isinstance(x, ElementwiseMixin) and not isinstance(y, ElementwiseMixin):
            x = type(self)(x, device=self.device, dtype=dtypes.from_py(x), requires_grad=False)
        if isinstance(x, ElementwiseMixin):
            x, y = x._broadcasted(y)
        else:
            y, x = y._broadcasted(x)
        cond, x = self.cast(dtypes.bool)._broadcasted(x, match_dtype=False)
        cond, y = cond._broadcasted(y, match_dtype=False)
        return F.Where.apply(cond, *x._broadcasted(y))

    def xor(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return F.Xor.apply(*self._broadcasted(x, reverse))

    def __neg__(self) -> Tensor:
        return self.neg()

    def __add__(self, x) -> Tensor:
        return self.add(x)

    def __sub__(self, x) -> Tensor:
        return self.sub(x)

    def __mul__(self, x) -> Tensor:
        return self.mul(x)

    def __truediv__(self, x) -> Tensor:
        return self.div(x)

    def __pow__(self, x) -> Tensor:
        return self.pow(x)

    def __matmul__(self, x) -> Tensor:
        return self.matmul(x)

    def __xor__(self, x) -> Tensor:
        return self.xor(x)

    def __and__(self, x) -> Tensor:
        return F.BitwiseAnd.apply(*self._broadcasted(x))

    def __or__(self, x) -> Tensor:
        return F.BitwiseOr.apply(*self._broadcasted(x))

    def __mod__(self, x) -> Tensor:
        return F.Mod.apply(*self._broadcasted(x))

    def __radd__(self, x) -> Tensor:
        return self.add(x, True)

    def __rsub__(self, x) -> Tensor:
        return self.sub(x, True)

    def __rmul__(self, x) -> Tensor:
        return self.mul(x, True)

    def __rtruediv__(self, x) -> Tensor:
        return self.div(x, True)

    def __rpow__(self, x) -> Tensor:
        return self.pow(x, True)

    def __rmatmul__(self, x) -> Tensor:
        return type(self)(x, device=self.device).matmul(self) if not isinstance(x, ElementwiseMixin) else x.matmul(self)

    def __iadd__(self, x) -> Tensor:
        return self.assign(self.add(x))

    def __isub__(self, x) -> Tensor:
        return self.assign(self.sub(x))

    def __imul__(self, x) -> Tensor:
        return self.assign(self.mul(x))

    def __itruediv__(self, x) -> Tensor:
        return self.assign(self.div(x))

    def __lt__(self, x) -> Tensor:
        return F.Less.apply(*self._broadcasted(x))

    def __gt__(self, x) -> Tensor:
        return F.Less.apply(*self._broadcasted(x, True))

    def __ge__(self, x) -> Tensor:
        return (self < x).logical_not()

    def __le__(self, x) -> Tensor:
        return (self > x).logical_not()

    def __eq__(self, x) -> Tensor:  # type: ignore[override]
        return F.Eq.apply(*self._broadcasted(x))

    def __ne__(self, x) -> Tensor:  # type: ignore[override]
        return F.Neq.apply(*self._broadcasted(x))

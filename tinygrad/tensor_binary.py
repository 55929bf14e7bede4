"""Elementwise ops of two or more tensors: broadcasting and dtype promotion, arithmetic, powers, bitwise ops and
shifts, comparisons, `where`, and Python's operators (with their reflected and in-place forms).

A mixin of Tensor (tinygrad/tensor.py), beside tensor_elementwise.py's ops of one tensor; new tensors are made with
`type(self)` so subclasses stay subclasses. Values, promotion and gradients follow PyTorch (see
tensor_elementwise.py for how gradients that differ from the computed form are attached). `+`, `-`, `*` and `/` of a
tensor with a number, or of two tensors alike in shape, dtype and device, take a shortcut (`_fast_binop`) when no
gradient is tracked: eager code pays for every op it builds.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

import tinygrad.mlops as F
from tinygrad.device import Device
from tinygrad.dtype import ConstType, DType, dtypes, least_upper_dtype
from tinygrad.errors import ArgumentError
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import BinaryOps
from tinygrad.shape.symbolic import Node
from tinygrad.tensor_elementwise import TensorLike, _constant_value, _with_grad, broadcast_shape

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor


class BinaryMixin:
    __slots__ = ()

    # ---- binary: broadcasting and promotion ----
    def _broadcasted(self, y: TensorLike, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
        x: Tensor = self
        if not isinstance(y, BinaryMixin):
            if isinstance(y, Node):
                y = type(self)(y, device=x.device, dtype=x.dtype if dtypes.is_float(x.dtype) else dtypes.int32,
                               requires_grad=False)
            elif not isinstance(y, (bool, int, float, np.generic)):
                raise TypeError(f"can't combine a Tensor with {type(y).__name__}")
        if not isinstance(y, BinaryMixin):
            y = y.item() if isinstance(y, np.generic) else y
            # a Python scalar takes the tensor's dtype unless it needs a wider kind (float into an int tensor)
            if dtypes.is_float(x.dtype) or (dtypes.is_int(x.dtype) and isinstance(y, int) and
                                            not isinstance(y, bool)) or (x.dtype == dtypes.bool and
                                                                         isinstance(y, bool)):
                y_dtype = x.dtype
            else:
                y_dtype = dtypes.from_py(y)
            xl = x.lazydata
            if y_dtype is xl.dtype and type(xl) is LazyBuffer and _const_fits(y, y_dtype):
                # the constant built straight at x's shape: the graph Tensor(y).reshape(...).expand(x.shape) builds,
                # without the Tensor-level movement ops (eager code with gradients pays for every op it builds)
                yt = object.__new__(type(self))
                yt.lazydata, yt.requires_grad, yt.grad, yt._ctx = xl.scalar_const(y), False, None, None
                return (yt, x) if reverse else (x, yt)
            scalar = LazyBuffer.scalar(y, y_dtype, x.device) if type(y) is float and \
                dtypes.is_float(y_dtype) and type(x.device) is str else None
            # a scalar that code may vary between calls is read from a shared buffer (see LazyBuffer.scalar)
            y = type(self)(scalar if scalar is not None else dtypes.as_const(y, y_dtype), device=x.device,
                           dtype=y_dtype, requires_grad=False)
        if x.device != y.device:
            # a DISK tensor meets a constant made for it (on the default device, see Device.storage) or a tensor
            # elsewhere: it is read off its file onto the default device, where the op runs anyway
            x, y = (t.to(Device.storage(t.device)) if type(t.device) is str else t for t in (x, y))
            if x.device != y.device:
                raise RuntimeError(f"tensors are on different devices: {x.device} and {y.device}")
        if match_dtype and x.dtype != y.dtype:
            out = least_upper_dtype(x.dtype, y.dtype)
            x, y = x.cast(out), y.cast(out)
        if reverse:
            x, y = y, x
        shape = broadcast_shape(x.shape, y.shape)
        return x.expand(shape), y.expand(shape)

    # ---- arithmetic ----
    def add(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """self + x with broadcasting and dtype promotion (`reverse`: x + self); bool + bool is logical or.

        >>> Tensor([1, 2]).add(3).tolist()
        [4, 5]
        """
        a, b = self._broadcasted(x, reverse)
        # bool + bool is logical or (PyTorch's); the C sum of two _Bools would be 2 inside a fused expression
        return F.BitwiseOr.apply(a, b) if a.dtype == dtypes.bool else F.Add.apply(a, b)

    def sub(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """self - x with broadcasting and dtype promotion (`reverse`: x - self); bool tensors are refused.

        >>> Tensor([5, 6]).sub(1, reverse=True).tolist()
        [-4, -5]
        """
        a, b = self._broadcasted(x, reverse)
        if a.dtype == dtypes.bool:
            raise TypeError("subtracting bool tensors is not supported: use ^ (xor) or logical_not")
        return F.Sub.apply(a, b)

    def mul(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """self * x with broadcasting and dtype promotion (`reverse`: x * self); bool * bool is logical and.

        >>> Tensor([[1], [2]]).mul(Tensor([1.0, 10.0])).tolist()
        [[1.0, 10.0], [2.0, 20.0]]
        """
        a, b = self._broadcasted(x, reverse)
        return F.BitwiseAnd.apply(a, b) if a.dtype == dtypes.bool else F.Mul.apply(a, b)

    def div(self, x: TensorLike, reverse: bool = False, upcast: bool = True,
            rounding_mode: str | None = None) -> Tensor:
        """self / x. True division (ints give floats) by default; rounding_mode "trunc" or "floor" rounds the
        quotient as torch.div does, keeping int dtypes (an int division by zero gives 0: C would trap)."""
        a, b = self._broadcasted(x, reverse)
        if rounding_mode is None:
            if upcast:
                a, b = a._as_float(), b._as_float()
            return F.Div.apply(a, b)
        if rounding_mode not in ("trunc", "floor"):
            raise ArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
        if dtypes.is_float(a.dtype):
            q = F.Div.apply(a, b)._trunc_value() if rounding_mode == "trunc" else a._floor_divide(b)
            return _with_grad(q, (a, 0.0), (b, 0.0))
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        q, r = a._int_divmod(b)
        return q if rounding_mode == "trunc" else q - a._floor_fix(r, b).cast(q.dtype)

    def _int_divmod(self, b: Tensor) -> tuple[Tensor, Tensor]:
        """C's truncating quotient and remainder of int tensors, made safe: by 0 gives (0, 0) instead of a trap, and
        by -1 gives (-a, 0) without INT_MIN / -1's trap."""
        a = self
        zero = b == 0
        bad = zero if dtypes.is_unsigned(a.dtype) else zero | (b == -1)
        safe = bad.where(1, b)
        q, r = F.Div.apply(a, safe), F.Mod.apply(a, safe)
        if not dtypes.is_unsigned(a.dtype):
            q = (b == -1).where(-a, q)
        return zero.where(0, q), r

    @staticmethod
    def _floor_fix(r: Tensor, b: Tensor) -> Tensor:
        """Where C's remainder `r` (the dividend's sign) and the floor's (the divisor's sign) differ."""
        return (r != 0) & ((r < 0) != (b < 0))

    def _floor_divide(self, b: Tensor) -> Tensor:
        """Python's float floor division (what PyTorch computes): floor((a - fmod(a, b)) / b), exact where
        floor(a / b) is not (1 // 0.1 is 9)."""
        a = self
        m = F.Mod.apply(a, b)
        d = F.Div.apply(a - m, b)
        d = a._floor_fix(m, b).where(d - 1, d)
        t = d._trunc_value()
        fl = (t > d).where(t - 1, t)
        fl = (d - fl > 0.5).where(fl + 1, fl)
        q = F.Div.apply(a, b)
        return (b == 0).where(q, (d != 0).where(fl, q * 0))

    def mod(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """Python's (and torch.remainder's) modulo: the result takes the divisor's sign."""
        a, b = self._broadcasted(x, reverse)
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        if not dtypes.is_float(a.dtype):
            _, r = a._int_divmod(b)
            return a._floor_fix(r, b).where(r + b, r)
        m = F.Mod.apply(a, b)
        value = a._floor_fix(m, b).where(m + b, m)
        return _with_grad(value, (a, 1.0), (b, lambda: -a._floor_divide(b)))

    def pow(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """self ** x as PyTorch: negative bases give signed results for integral exponents and nan otherwise,
        0 ** 0 = 1, int ** int stays int (exact, by repeated squaring)."""
        if not reverse and dtypes.is_float(self.dtype) and isinstance(x, (int, float)) and not isinstance(x, bool):
            # small integral exponents by multiplication: exact where exp2(x * log2|b|) would round
            if x == 1:
                return self * 1
            if x == 0 and not self.requires_grad:
                # b ** 0 is 1 for every b, nan and inf included: a constant, no kernel
                return type(self).ones(*self.shape, dtype=self.dtype, device=self.device)
            if x == 2:
                return self * self
            if x == 3:
                return self * self * self
            if x == 0.5:
                return self.sqrt()
            if x == -1:
                return self.reciprocal()
        b, e = self._broadcasted(x, reverse)
        if b.dtype == dtypes.bool:
            return b | e.logical_not()  # PyTorch's bool ** bool: 1 ** x = 1, 0 ** 0 = 1, 0 ** 1 = 0
        if not dtypes.is_float(b.dtype):
            if not reverse and isinstance(x, int) and not isinstance(x, bool):
                return b._int_pow_const(int(x))
            return b._int_pow(e)
        return b._opmath(lambda bb: bb._float_pow(e.cast(bb.dtype)))

    def _pow_value(self, e: Tensor) -> Tensor:
        b = self
        mag = (e * b.abs().log2()).exp2()
        mag = ((e == 0) | (b == 1) | ((b == -1) & e.isinf())).where(1.0, mag)
        integral = e._trunc_value() == e
        half = e * 0.5
        odd = integral & (half._trunc_value() != half)
        # -0.0 counts as negative for the sign, as in C: (-0.0) ** -1 is -inf
        negative = (b < 0) | ((b == 0) & (b.reciprocal() < 0))
        signed = (odd & negative).where(-mag, mag)
        return ((b < 0) & integral.logical_not()).where(math.nan, signed)

    def _float_pow(self, e: Tensor) -> Tensor:
        b = self
        # exact folds, for every b and e (nan and inf included): b ** 0 = 1 ** e = 1, b ** 1 = b
        ev, bv = _constant_value(e), _constant_value(b)
        if (ev is not None and ev == 0) or (bv is not None and bv == 1):
            value = b.ones_like()
        elif ev is not None and ev == 1:
            value = b
        else:
            value = b._pow_value(e)
        return _with_grad(value, (b, lambda: (e == 0).where(0.0, e * b._pow_value(e - 1))),
                          (e, lambda: ((b == 0) & (e >= 0)).where(0.0, value * b.log())))

    def _int_pow_const(self, n: int) -> Tensor:
        if n < 0:
            raise ArgumentError(f"integers to negative integer powers are not allowed (exponent {n})")
        acc, base = None, self
        while n:
            if n & 1:
                acc = base if acc is None else acc * base
            n >>= 1
            if n:
                base = base * base
        return acc if acc is not None else self.full_like(1)

    def _int_pow(self, e: Tensor) -> Tensor:
        b, signed = self, not dtypes.is_unsigned(e.dtype)
        acc, base = b.full_like(1), b
        nbits = 8 * e.dtype.itemsize - (1 if signed else 0)
        for i in range(nbits):
            acc = ((e.rshift(i) & 1) != 0).where(acc * base, acc)
            if i + 1 < nbits:
                base = base * base
        if signed:
            # negative exponents: 1 ** e = 1, (-1) ** e = +-1, anything else truncates to 0 (PyTorch's)
            neg = (b == 1).where(1, (b == -1).where(((e & 1) != 0).where(-1, 1), 0)).cast(acc.dtype)
            acc = (e < 0).where(neg, acc)
        return acc

    def maximum(self, x: TensorLike) -> Tensor:
        """The larger of self and x elementwise, broadcast (ties share the gradient).

        >>> Tensor([1, 5]).maximum(3).tolist()
        [3, 5]
        """
        return F.Maximum.apply(*self._broadcasted(x))

    def minimum(self, x: TensorLike) -> Tensor:
        """The smaller of self and x elementwise, broadcast (ties share the gradient).

        >>> Tensor([1, 5]).minimum(3).tolist()
        [1, 3]
        """
        a, b = self._broadcasted(x)
        if dtypes.is_float(a.dtype):
            return -((-a).maximum(-b))
        # ~ reverses the order of every int type, signed or not, and of bools
        return ~((~a).maximum(~b))

    def where(self, x: TensorLike, y: TensorLike) -> Tensor:
        """x where this tensor (the condition) is nonzero, else y; all three broadcast together.

        >>> Tensor([True, False]).where(1, 2).tolist()
        [1, 2]
        """
        if not isinstance(x, BinaryMixin) and not isinstance(y, BinaryMixin):
            x = type(self)(x, device=self.device, dtype=dtypes.from_py(x), requires_grad=False)
        if isinstance(x, BinaryMixin):
            x, y = x._broadcasted(y)
        else:
            y, x = y._broadcasted(x)
        cond, x = self.cast(dtypes.bool)._broadcasted(x, match_dtype=False)
        cond, y = cond._broadcasted(y, match_dtype=False)
        return F.Where.apply(cond, *x._broadcasted(y))

    def lerp(self, end: TensorLike, weight: TensorLike) -> Tensor:
        """self + weight * (end - self), computed as PyTorch does (from the nearer end, so weight 1 gives end)."""
        def near_start():
            return self + weight * (end - self)

        def near_end():
            return end - (end - self) * (1 - weight)
        if isinstance(weight, BinaryMixin):
            return (weight.abs() < 0.5).where(near_start(), near_end())
        return near_start() if abs(weight) < 0.5 else near_end()

    # ---- bitwise ----
    def _bitwise(self, fxn: type[F.Function], x: TensorLike, reverse: bool, name: str) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if not (dtypes.is_int(a.dtype) or a.dtype == dtypes.bool):
            raise TypeError(f"{name} needs int or bool tensors, got {self.dtype} and "
                            f"{x.dtype if isinstance(x, BinaryMixin) else type(x).__name__}")
        return fxn.apply(a, b)

    def xor(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """Bitwise exclusive or of int or bool tensors, broadcast (`reverse`: x ^ self).

        >>> Tensor([12, 5]).xor(10).tolist()
        [6, 15]
        """
        return self._bitwise(F.Xor, x, reverse, "xor")

    def bitwise_and(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """Bitwise and of int or bool tensors, broadcast (`reverse`: x & self).

        >>> Tensor([12, 5]).bitwise_and(10).tolist()
        [8, 0]
        """
        return self._bitwise(F.BitwiseAnd, x, reverse, "bitwise_and")

    def bitwise_or(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """Bitwise or of int or bool tensors, broadcast (`reverse`: x | self).

        >>> Tensor([12, 5]).bitwise_or(10).tolist()
        [14, 15]
        """
        return self._bitwise(F.BitwiseOr, x, reverse, "bitwise_or")

    def bitwise_not(self) -> Tensor:
        """~x: every bit flipped for ints, logical not for bools.

        >>> Tensor([0, 5]).bitwise_not().tolist()
        [-1, -6]
        """
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"~ needs an int or bool tensor, not {self.dtype}")
        return self.xor(-1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))

    def _shift(self, x: TensorLike, reverse: bool, left: bool) -> Tensor:
        a, s = self._broadcasted(x, reverse)
        if not dtypes.is_int(a.dtype):
            raise TypeError(f"{'<<' if left else '>>'} needs int tensors, got {a.dtype}")
        fxn = F.ShiftLeft if left else F.ShiftRight
        bits = 8 * a.dtype.itemsize
        if not reverse and isinstance(x, int) and 0 <= x < bits:
            return fxn.apply(a, s)
        # shifts by a negative count or by the width or more are undefined in C; PyTorch gives 0, or for >> of a
        # signed value, its sign
        ok = (s >= 0) & (s < bits)
        shifted = fxn.apply(a, ok.where(s, 0))
        if left or dtypes.is_unsigned(a.dtype):
            return ok.where(shifted, 0)
        return ok.where(shifted, F.ShiftRight.apply(*a._broadcasted(bits - 1)))

    def lshift(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """self << x for int tensors (`reverse`: x << self); shifting by the width or more gives 0, as PyTorch.

        >>> Tensor([1, 3]).lshift(2).tolist()
        [4, 12]
        """
        return self._shift(x, reverse, True)

    def rshift(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """self >> x for int tensors (`reverse`: x >> self); arithmetic (sign-filling) for signed dtypes.

        >>> Tensor([16, -16]).rshift(2).tolist()
        [4, -4]
        """
        return self._shift(x, reverse, False)

    # ---- comparisons (bool results, no gradient) ----
    def __lt__(self, x) -> Tensor:
        return F.Less.apply(*self._broadcasted(x))

    def __gt__(self, x) -> Tensor:
        return F.Less.apply(*self._broadcasted(x, True))

    def _less_equal(self, x: TensorLike, reverse: bool) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            # not (b < a) would make nan <= x true
            return F.Less.apply(a, b) | F.Eq.apply(a, b)
        return F.Less.apply(b, a).logical_not()

    def __le__(self, x) -> Tensor:
        return self._less_equal(x, False)

    def __ge__(self, x) -> Tensor:
        return self._less_equal(x, True)

    def __eq__(self, x) -> Tensor:  # type: ignore[override]
        return F.Eq.apply(*self._broadcasted(x))

    def __ne__(self, x) -> Tensor:  # type: ignore[override]
        return F.Neq.apply(*self._broadcasted(x))

    # ---- operators ----
    def __neg__(self) -> Tensor:
        return self.neg()

    def __invert__(self) -> Tensor:
        return self.bitwise_not()

    def __add__(self, x) -> Tensor:
        ret = _fast_binop(self, x, BinaryOps.ADD, False)
        return ret if ret is not None else self.add(x)

    def __sub__(self, x) -> Tensor:
        ret = _fast_binop(self, x, BinaryOps.SUB, False)
        return ret if ret is not None else self.sub(x)

    def __mul__(self, x) -> Tensor:
        ret = _fast_binop(self, x, BinaryOps.MUL, False)
        return ret if ret is not None else self.mul(x)

    def __truediv__(self, x) -> Tensor:
        ret = _fast_binop(self, x, BinaryOps.DIV, False)
        return ret if ret is not None else self.div(x)

    def __floordiv__(self, x) -> Tensor:
        return self.div(x, rounding_mode="floor")

    def __mod__(self, x) -> Tensor:
        return self.mod(x)

    def __pow__(self, x) -> Tensor:
        return self.pow(x)

    def __matmul__(self, x) -> Tensor:
        return self.matmul(x)

    def __and__(self, x) -> Tensor:
        return self.bitwise_and(x)

    def __or__(self, x) -> Tensor:
        return self.bitwise_or(x)

    def __xor__(self, x) -> Tensor:
        return self.xor(x)

    def __lshift__(self, x) -> Tensor:
        return self.lshift(x)

    def __rshift__(self, x) -> Tensor:
        return self.rshift(x)

    def __radd__(self, x) -> Tensor:
        ret = _fast_binop(self, x, BinaryOps.ADD, True)
        return ret if ret is not None else self.add(x, True)

    def __rsub__(self, x) -> Tensor:
        ret = _fast_binop(self, x, BinaryOps.SUB, True)
        return ret if ret is not None else self.sub(x, True)

    def __rmul__(self, x) -> Tensor:
        ret = _fast_binop(self, x, BinaryOps.MUL, True)
        return ret if ret is not None else self.mul(x, True)

    def __rtruediv__(self, x) -> Tensor:
        ret = _fast_binop(self, x, BinaryOps.DIV, True)
        return ret if ret is not None else self.div(x, True)

    def __rfloordiv__(self, x) -> Tensor:
        return self.div(x, True, rounding_mode="floor")

    def __rmod__(self, x) -> Tensor:
        return self.mod(x, True)

    def __rpow__(self, x) -> Tensor:
        return self.pow(x, True)

    def __rmatmul__(self, x) -> Tensor:
        return type(self)(x, device=self.device).matmul(self) if not isinstance(x, BinaryMixin) else x.matmul(self)

    def __rand__(self, x) -> Tensor:
        return self.bitwise_and(x, True)

    def __ror__(self, x) -> Tensor:
        return self.bitwise_or(x, True)

    def __rxor__(self, x) -> Tensor:
        return self.xor(x, True)

    def __rlshift__(self, x) -> Tensor:
        return self.lshift(x, True)

    def __rrshift__(self, x) -> Tensor:
        return self.rshift(x, True)

    def __iadd__(self, x) -> Tensor:
        return self.assign(self.add(x))

    def __isub__(self, x) -> Tensor:
        return self.assign(self.sub(x))

    def __imul__(self, x) -> Tensor:
        return self.assign(self.mul(x))

    def __itruediv__(self, x) -> Tensor:
        return self.assign(self.div(x))

    def __ifloordiv__(self, x) -> Tensor:
        return self.assign(self.div(x, rounding_mode="floor"))

    def __imod__(self, x) -> Tensor:
        return self.assign(self.mod(x))

    def __ipow__(self, x) -> Tensor:
        return self.assign(self.pow(x))

    def __iand__(self, x) -> Tensor:
        return self.assign(self.bitwise_and(x))

    def __ior__(self, x) -> Tensor:
        return self.assign(self.bitwise_or(x))

    def __ixor__(self, x) -> Tensor:
        return self.assign(self.xor(x))

    def __ilshift__(self, x) -> Tensor:
        return self.assign(self.lshift(x))

    def __irshift__(self, x) -> Tensor:
        return self.assign(self.rshift(x))

    def masked_fill(self, mask: Tensor, value: ConstType) -> Tensor:
        """`value` where `mask` is True, this tensor elsewhere (mask broadcasts)."""
        return mask.where(value, self)


_F16, _BF16, _F32, _F64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64
# int dtypes that _fast_binop serves, by id (DType hashes in Python code), with the range of Python ints it takes
# for each: a value outside goes the general path, which raises and says why
_FAST_INTS = {id(dt): (dtypes.min(dt), dtypes.max(dt)) for dt in (
    dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)}


def _const_fits(y, dt: DType) -> bool:
    """Whether Python scalar `y` is a constant of `dt` as it is (a float of a float dtype, an int in an int dtype's
    range, a bool of bool); Tensor(y, dtype=dt) refuses an int out of range, and says why."""
    if dt is _F32 or dt is _F16 or dt is _BF16 or dt is _F64:
        return True
    bounds = _FAST_INTS.get(id(dt))
    if bounds is not None:
        return type(y) is int and bounds[0] <= y <= bounds[1]
    return type(y) is bool and dt is dtypes.bool


def _fast_binop(x, y, op: BinaryOps, reverse: bool):
    """`x op y` built straight on the LazyBuffers when nothing needs a gradient and no broadcasting or promotion is
    involved (a float tensor with a Python number, an int tensor with a Python int, or two float tensors of one
    shape, dtype and device); None otherwise, and the general path runs. The result is exactly the general path's,
    made with far less work: eager code pays for every op it builds."""
    xl = x.lazydata
    if type(xl) is not LazyBuffer or x.requires_grad or xl.device.startswith("DISK"):
        return None  # several devices, a gradient to track, or a file's bytes (computed off DISK): the general path
    dt = xl.dtype
    ty = type(y)
    # identity with the shared singletons: cheaper than hashing the dtype
    if not (dt is _F32 or dt is _F16 or dt is _BF16 or dt is _F64):
        # an int tensor with a Python int in its range: +, - and * keep its dtype (/ makes floats: the general path)
        bounds = _FAST_INTS.get(id(dt))
        if ty is not int or bounds is None or op is BinaryOps.DIV or not bounds[0] <= y <= bounds[1]:
            return None
        yl = xl.const(y)
        rg = x.requires_grad
    elif ty is float or ty is int:
        # a float that code may vary reads a shared scalar buffer: one compiled kernel for every value
        yl = xl.scalar_const(y)
        rg = x.requires_grad
    elif ty is type(x):
        yl = y.lazydata
        if y.requires_grad or yl.dtype is not xl.dtype or yl.shape != xl.shape or yl.device != xl.device:
            return None
        rg = None if x.requires_grad is None or y.requires_grad is None else False
    else:
        return None
    ret = object.__new__(type(x))
    ret.lazydata = yl.e(op, xl) if reverse else xl.e(op, yl)
    ret.requires_grad, ret.grad, ret._ctx = rg, None, None
    return ret
